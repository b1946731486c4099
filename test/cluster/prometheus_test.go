//go:build cluster

// The chart's alert rules and dashboard against a real Prometheus (Debian's
// prometheus package) scraping the real crossproxy pods of the cluster: the
// rules as the chart renders them (monitoring.rules.for=20s, so the run is
// short), each alert made to fire by making its condition true, and quiet
// while healthy; every dashboard query answered. Runs after TestHelm, on its
// release (installed here when absent).
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	kyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const promAddr = "10.201.0.1:19090"

type promResult struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// promQuery runs an instant query against the test's Prometheus (in xpc-cp).
func (c *cluster) promQuery(q string) ([]promResult, error) {
	out, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-cp", "curl", "-sf", "--max-time", "5",
		"http://"+promAddr+"/api/v1/query?query="+url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []promResult `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Status != "success" {
		return nil, fmt.Errorf("query %q: %v: %s", q, err, out)
	}
	return r.Data.Result, nil
}

// firing lists the firing alerts as "name{label=value}" for the labels asked.
func (c *cluster) firing() map[string][]map[string]string {
	res, err := c.promQuery(`ALERTS{alertstate="firing"}`)
	if err != nil {
		c.t.Fatal(err)
	}
	m := map[string][]map[string]string{}
	for _, r := range res {
		m[r.Metric["alertname"]] = append(m[r.Metric["alertname"]], r.Metric)
	}
	return m
}

func (c *cluster) waitFiring(alert string, match map[string]string, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.eventually(alert+" firing", timeout, func() error {
		for _, a := range c.firing()[alert] {
			ok := true
			for k, v := range match {
				ok = ok && a[k] == v
			}
			if ok {
				return nil
			}
		}
		return fmt.Errorf("not firing; firing: %v", c.firing())
	})
	return time.Since(start).Round(time.Second)
}

// ensureRelease installs the chart as TestHelm does when no release exists.
func (c *cluster) ensureRelease(chart string) {
	if strings.Contains(c.helm("list", "--namespace", "kube-system", "-q"), "crossproxy") {
		return
	}
	repo, tag := imageParts(env(c.t, "XP_IMAGE_REF"))
	if _, err := sh(context.Background(), "bash", c.script, "load", env(c.t, "XP_IMAGE_ARCHIVE")); err != nil {
		c.t.Fatal(err)
	}
	c.deleteManifestObjects()
	c.helm("install", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "apiServer.host=10.201.0.1", "--set", "apiServer.port=6443",
		"--set", "linux.config.clusterCIDR=10.202.0.0/16", "--wait", "--timeout", "4m")
}

func TestPrometheus(t *testing.T) {
	c := newCluster(t)
	chart, err := filepath.Abs(env(t, "XP_CHART"))
	if err != nil {
		t.Fatal(err)
	}
	c.ensureRelease(chart)
	c.kubectlIn(workloads, "apply", "-f", "-")

	// The rules exactly as the chart renders them, with a short for.
	out, err := sh(context.Background(), env(t, "XP_HELM"), "template", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "monitoring.enabled=true,monitoring.rules.for=20s", "--show-only", "templates/monitoring.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule map[string]any
	for _, doc := range strings.Split(out, "\n---\n") {
		var o map[string]any
		if j, err := kyaml.ToJSON([]byte(doc)); err == nil && json.Unmarshal(j, &o) == nil && o["kind"] == "PrometheusRule" {
			rule = o
		}
	}
	if rule == nil {
		t.Fatalf("no PrometheusRule in:\n%s", out)
	}
	dir := t.TempDir()
	spec, _ := json.Marshal(rule["spec"]) // JSON is YAML to Prometheus
	if err := os.WriteFile(filepath.Join(dir, "crossproxy.rules.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	// What a hand-written scrape config needs: job crossproxy, the nodes'
	// metrics ports.
	cfg := `global: {scrape_interval: 5s, evaluation_interval: 5s}
rule_files: [crossproxy.rules.yaml]
scrape_configs:
  - job_name: crossproxy
    static_configs: [{targets: ["10.201.0.11:10249", "10.201.0.12:10249"]}]
`
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := exec.Command("nsenter", "--net=/run/netns/xpc-cp", "prometheus",
		"--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr)
	plog, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	prom.Stdout, prom.Stderr = plog, plog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = prom.Process.Signal(os.Interrupt)
		_ = prom.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(plog.Name())
			t.Logf("prometheus log (tail):\n%s", tail(string(b), 3000))
		}
	})

	c.eventually("both crossproxy targets up", 90*time.Second, func() error {
		res, err := c.promQuery(`up{job="crossproxy"} == 1`)
		if err != nil {
			return err
		}
		if len(res) != 2 {
			return fmt.Errorf("%d targets up", len(res))
		}
		return nil
	})
	// Healthy: after more than the rules' for, nothing fires.
	time.Sleep(40 * time.Second)
	if f := c.firing(); len(f) != 0 {
		t.Errorf("alerts firing on a healthy cluster: %v", f)
	} else {
		t.Log("FIGURE prometheus: healthy for 40s after both targets were up: no alert firing")
	}

	// Input problems: two Services claiming the same external IP and port.
	conflict := `
apiVersion: v1
kind: Service
metadata: {name: claim-1, namespace: xpc-test}
spec: {selector: {app: echo}, externalIPs: [10.201.0.99], ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: v1
kind: Service
metadata: {name: claim-2, namespace: xpc-test}
spec: {selector: {app: echo}, externalIPs: [10.201.0.99], ports: [{port: 80, targetPort: 8080}]}
`
	c.kubectlIn(conflict, "apply", "-f", "-")
	t.Logf("FIGURE prometheus: CrossproxyInputProblems fired %v after two Services claimed one external IP:port",
		c.waitFiring("CrossproxyInputProblems", map[string]string{"kind": "Service"}, 3*time.Minute))

	// Sync failures and a stall on xpc-a: another process holds crossproxy's
	// table (nftables' owner flag), so every batch touching it is refused
	// until that process exits.
	holder := exec.Command("nsenter", "--net=/run/netns/xpc-a", "nft", "-i")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stdout, holder.Stderr = io.Discard, io.Discard
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = stdin.Close()
			_ = holder.Wait()
		}
	}
	defer release()
	if _, err := io.WriteString(stdin, "delete table inet crossproxy; add table inet crossproxy { flags owner; }\n"); err != nil {
		t.Fatal(err)
	}
	a := map[string]string{"instance": "10.201.0.11:10249"}
	t.Logf("FIGURE prometheus: CrossproxySyncFailing fired %v after crossproxy's table was held on xpc-a",
		c.waitFiring("CrossproxySyncFailing", a, 3*time.Minute))
	t.Logf("FIGURE prometheus: CrossproxySyncStalled fired %v later (threshold 2 x syncPeriod = 60s)",
		c.waitFiring("CrossproxySyncStalled", a, 3*time.Minute))
	release()
	c.eventually("xpc-a syncing again (CrossproxySyncStalled resolved)", 3*time.Minute, func() error {
		for _, f := range c.firing()["CrossproxySyncStalled"] {
			if f["instance"] == a["instance"] {
				return fmt.Errorf("still stalled")
			}
		}
		return nil
	})

	// Another proxy: kube-proxy's table appears on xpc-b beside crossproxy's.
	if _, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-b", "nft", "add", "table", "ip", "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE prometheus: CrossproxyOtherProxyDetected fired %v after table ip kube-proxy appeared on xpc-b",
		c.waitFiring("CrossproxyOtherProxyDetected", map[string]string{"instance": "10.201.0.12:10249", "proxy": "kube-proxy"}, 3*time.Minute))
	if _, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-b", "nft", "delete", "table", "ip", "kube-proxy"); err != nil {
		t.Fatal(err)
	}

	// Every dashboard query answers from this Prometheus now (failures,
	// problems and another proxy have been seen, both nodes are scraped);
	// drift repairs only once one has succeeded.
	b, err := os.ReadFile(filepath.Join(chart, "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string                  `json:"title"`
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			q := strings.ReplaceAll(strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"), "$instance", ".*")
			res, err := c.promQuery(q)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprintf("%d series: %s", len(res), q))
			if len(res) == 0 && !strings.Contains(q, "crossproxy_drift_repairs_total") {
				t.Errorf("dashboard panel %q: query returns nothing: %s", p.Title, q)
			}
		}
	}
	sort.Strings(lines)
	t.Logf("dashboard queries:\n%s", strings.Join(lines, "\n"))

	// Down: no crossproxy pod on xpc-b.
	c.kubectl("-n", "kube-system", "patch", "daemonset", "crossproxy-linux", "--type", "merge", "-p",
		`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":["xpc-b"]}]}]}}}}}}}`)
	t.Logf("FIGURE prometheus: CrossproxyDown fired %v after the pod on xpc-b was removed",
		c.waitFiring("CrossproxyDown", map[string]string{"instance": "10.201.0.12:10249"}, 3*time.Minute))
	if _, ok := c.firing()["CrossproxyAbsent"]; ok {
		t.Error("CrossproxyAbsent fires while xpc-a is still scraped")
	}

	// Put things back for later tests.
	c.kubectl("-n", ns, "delete", "service", "claim-1", "claim-2", "--ignore-not-found")
	c.kubectl("-n", "kube-system", "patch", "daemonset", "crossproxy-linux", "--type", "json", "-p",
		`[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=3m")
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
