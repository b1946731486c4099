// The chart at installer/helm/crossproxy, run through the real Helm CLI (built
// from this module by build.sh) and Debian's promtool: `make test-helm`.
package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const (
	chart   = "../../installer/helm/crossproxy"
	render  = "../../installer/render.sh"
	version = "v9.8.7-test"
	repo    = "registry.example/crossproxy"
)

func tool(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("%s is not set: run this through make test-helm", env)
	}
	return p
}

// run runs a command and returns stdout, or stdout+stderr in the error.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// template renders the chart as `helm template` does for a release in
// kube-system, with the release's image tag and extra arguments.
func template(t *testing.T, args ...string) (string, error) {
	t.Helper()
	base := []string{"template", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + version}
	return run(tool(t, "HELM"), append(base, args...)...)
}

func mustTemplate(t *testing.T, args ...string) string {
	t.Helper()
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type object = map[string]any

// objects decodes a multi-document YAML stream into objects keyed by
// kind/namespace/name. A key seen twice must hold the same object (the RBAC
// is in both OS files of make dist).
func objects(t *testing.T, stream string) map[string]object {
	t.Helper()
	m := map[string]object{}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(stream, -1) {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		if o == nil {
			continue
		}
		md, _ := o["metadata"].(map[string]any)
		key := fmt.Sprintf("%v/%v/%v", o["kind"], md["namespace"], md["name"])
		if prev, ok := m[key]; ok && !reflect.DeepEqual(prev, o) {
			t.Fatalf("%s appears twice, differently", key)
		}
		m[key] = o
	}
	return m
}

// normalize makes a chart object comparable with a plain manifest: the
// ConfigMaps' config.yaml is compared as YAML (the manifests' copy has
// comments), and the pod template's config-hash annotation, which only the
// chart has (it rolls the pods when a value changes the config), is dropped.
func normalize(t *testing.T, o object) object {
	t.Helper()
	b, _ := json.Marshal(o)
	var c object
	_ = json.Unmarshal(b, &c)
	if c["kind"] == "ConfigMap" {
		if data, ok := c["data"].(map[string]any); ok {
			if s, ok := data["config.yaml"].(string); ok {
				var v any
				if err := yaml.Unmarshal([]byte(s), &v); err != nil {
					t.Fatalf("config.yaml: %v", err)
				}
				data["config.yaml"] = v
			}
		}
	}
	if c["kind"] == "DaemonSet" {
		tm := c["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)
		if a, ok := tm["annotations"].(map[string]any); ok {
			delete(a, "crossproxy.io/config-hash")
			if len(a) == 0 {
				delete(tm, "annotations")
			}
		}
	}
	return c
}

// drift lists how the chart's objects differ from make dist's.
func drift(t *testing.T, chartOut, distOut string) []string {
	t.Helper()
	got, want := objects(t, chartOut), objects(t, distOut)
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			diffs = append(diffs, "missing from the chart: "+k)
			continue
		}
		if gn, wn := normalize(t, g), normalize(t, w); !reflect.DeepEqual(gn, wn) {
			gy, _ := yaml.Marshal(gn)
			wy, _ := yaml.Marshal(wn)
			diffs = append(diffs, fmt.Sprintf("%s differs:\n--- make dist\n%s\n--- chart\n%s", k, wy, gy))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "only in the chart: "+k)
		}
	}
	sort.Strings(diffs)
	return diffs
}

func distManifests(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := run("bash", render, repo+":"+version, repo+":"+version, version, dir); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, os_ := range []string{"linux", "windows"} {
		b, err := os.ReadFile(filepath.Join(dir, "crossproxy-"+version+"-"+os_+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, string(b))
	}
	return strings.Join(all, "\n---\n")
}

// TestDefaultsMatchDist: the chart with default values renders exactly the
// objects of make dist's two manifests (installer/render.sh), and a changed
// value is seen as drift (so the comparison can fail).
func TestDefaultsMatchDist(t *testing.T) {
	dist := distManifests(t)
	chartOut := mustTemplate(t)
	if d := drift(t, chartOut, dist); len(d) > 0 {
		t.Fatalf("the chart's default output drifted from make dist's manifests (installer/linux, installer/windows):\n%s",
			strings.Join(d, "\n"))
	}
	t.Logf("chart defaults == make dist: %d objects", len(objects(t, chartOut)))
	for _, set := range []string{"linux.resources.limits.memory=1Gi", "linux.config.syncPeriod=1m",
		"windows.config.networkName=vxlan0", "tolerations=null", "apiServer.host=10.0.0.1,apiServer.port=6443", "ports.secure=10300"} {
		if d := drift(t, mustTemplate(t, "--set", set), dist); len(d) == 0 {
			t.Errorf("--set %s: no drift seen; the comparison misses it", set)
		}
	}
}

// TestLint: helm lint --strict with the defaults and with everything on.
func TestLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "monitoring.enabled=true,monitoring.dashboard.enabled=true,takeover.enabled=true,ports.healthz=10356,ports.metrics=10349"},
		{"--set", "monitoring.enabled=true,monitoring.kind=ServiceMonitor,windows.enabled=false"}} {
		out, err := run(tool(t, "HELM"), append([]string{"lint", "--strict", chart}, args...)...)
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s", args, err, out)
		}
	}
}

// TestSchemaRefusesBadValues: each invalid value fails helm template (as it
// fails helm install) with a message naming it.
func TestSchemaRefusesBadValues(t *testing.T) {
	cases := []struct{ set, want string }{
		{"image.pullPolicy=Sometimes", "pullPolicy"},
		{"linux.config.syncPeriod=30", "syncPeriod"},
		{"linux.config.syncPeriod=1h30", "syncPeriod"},
		{"linux.config.detectLocalMode=Cluster", "detectLocalMode"},
		{"linux.config.clusterCIDR=10.244.0.0", "clusterCIDR"},
		{"linux.config.masqueradeAll=maybe", "masqueradeAll"},
		{"linux.resources.limits.memory=lots", "memory"},
		{"linux.cpuLimit=1", "cpuLimit"},
		{"windows.config.sourceVip=auto", "sourceVip"},
		{"windows.config.enableDSR=yes", "enableDSR"},
		{"extraArgs[0]=-v", "extraArgs"},
		{"ports.metrics=70000", "metrics"},
		{"monitoring.enabled=sometimes", "enabled"},
		{"monitoring.kind=Probe", "kind"},
		{"apiServer.host=10.0.0.1", "apiServer.port"},
		{"apiServer.port=6443", "apiServer.host"},
		{"ports.metrics=10256", "ports.healthz and ports.metrics"},
		{"linux.enabled=false,windows.enabled=false", "install nothing"},
		{"takeover.enabled=true,linux.enabled=false,ports.healthz=10356,ports.metrics=10349", "takeover.enabled needs linux.enabled"},
		{"takeover.enabled=true", "kube-proxy holds ports 10256 (healthz) and 10249"},
		{"takeover.enabled=true,ports.healthz=10356", "kube-proxy holds ports 10256 (healthz) and 10249"},
		// Issue 37: what the proxy or the API server would refuse later.
		{"linux.config.detectLocalMode=BridgeInterface", "linux.config.detectLocal.bridgeInterface is empty"},
		{"linux.config.detectLocalMode=InterfaceNamePrefix", "linux.config.detectLocal.interfaceNamePrefix is empty"},
		{"linux.config.detectLocalMode=BridgeInterface,linux.config.detectLocal.bridgeInterface=averyveryverylong0", "bridgeInterface"},
		{"linux.config.minSyncPeriod=2m", "linux.config.minSyncPeriod 2m is longer than linux.config.syncPeriod 30s"},
		{"windows.config.minSyncPeriod=31s", "windows.config.minSyncPeriod 31s is longer than windows.config.syncPeriod 30s"},
		{"linux.config.clusterCIDR=10.244.0.0/33", "clusterCIDR"},
		{"linux.config.clusterCIDR=300.244.0.0/16", "clusterCIDR"},
		{"linux.config.nodePortAddresses={10.0.0.0/40}", "nodePortAddresses"},
		{"windows.config.sourceVip=999.1.1.1", "sourceVip"},
		{"updateStrategy.rollingUpdate.maxSurge=1", "updateStrategy.rollingUpdate.maxSurge is 1: it must be 0"},
		{"updateStrategy.rollingUpdate.maxUnavailable=0", "updateStrategy.rollingUpdate.maxUnavailable is 0"},
		{"updateStrategy.type=Recreate", "type"},
		{"podLabels.app\\.kubernetes\\.io/name=x", "podLabels.app.kubernetes.io/name"},
		{"podAnnotations.crossproxy\\.io/config-hash=x", "podAnnotations.crossproxy.io/config-hash"},
		{"imagePullSecrets[0].secret=x", "imagePullSecrets"},
		{"linux.affinity.nodeSelector=x", "affinity"},
		{"logVerbosity=11", "logVerbosity"},
		{"fullSyncPeriod=1d", "fullSyncPeriod"},
		{"takeover.enabled=true,takeover.restore=true,ports.healthz=10356,ports.metrics=10349", "takeover.enabled and takeover.restore are both true"},
		{"monitoring.rules.runbookBaseURL=runbooks", "runbookBaseURL"},
	}
	for _, c := range cases {
		out, err := template(t, "--set", c.set)
		if err == nil {
			t.Errorf("--set %s: rendered, want a refusal\n%.300s", c.set, out)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: refused without naming %q: %v", c.set, c.want, err)
		}
	}
	// And good values pass: the API server address, an image digest, a
	// minute syncPeriod, IPv6 CIDRs.
	mustTemplate(t, "--set", "apiServer.host=192.0.2.10,apiServer.port=6443,linux.config.syncPeriod=1m",
		"--set", "linux.image=registry.example:5000/xp@sha256:"+strings.Repeat("a", 64),
		"--set", "linux.config.clusterCIDR=10.244.0.0/16\\,fd00:10:244::/56")
}

func daemonSet(t *testing.T, out, os_ string) object {
	t.Helper()
	o, ok := objects(t, out)["DaemonSet/kube-system/crossproxy-"+os_]
	if !ok {
		t.Fatalf("no crossproxy-%s DaemonSet", os_)
	}
	return o
}

func container(ds object) map[string]any {
	spec := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
	return spec["containers"].([]any)[0].(map[string]any)
}

// TestValuesReachThePods: each value lands where the binary reads it: the
// config file, the flags, the environment, the pod spec.
func TestValuesReachThePods(t *testing.T) {
	out := mustTemplate(t,
		"--set", "apiServer.host=192.0.2.10,apiServer.port=6443",
		"--set", "linux.config.clusterCIDR=10.244.0.0/16,linux.config.detectLocalMode=NodeCIDR,linux.config.masqueradeAll=true",
		"--set", "linux.config.syncPeriod=1m,linux.config.minSyncPeriod=500ms,linux.config.nodePortAddresses={10.0.0.0/8}",
		"--set", "windows.config.networkName=vxlan0,windows.config.sourceVip=10.244.3.2,windows.config.enableDSR=true",
		"--set", "windows.resources.limits.memory=1Gi,linux.resources.limits.memory=256Mi",
		"--set", "extraArgs={--log-level=debug},linux.extraArgs={--masquerade-all}",
		"--set", "priorityClassName=high,tolerations[0].key=k,tolerations[0].operator=Exists",
		"--set", "windows.image=registry.example/xp-win:1")
	objs := objects(t, out)
	checkKnobs(t)
	cfg := func(os_ string) map[string]any {
		data := objs["ConfigMap/kube-system/crossproxy-"+os_]["data"].(map[string]any)
		if data["apiserver-host"] != "192.0.2.10" || data["apiserver-port"] != "6443" {
			t.Errorf("%s ConfigMap apiserver keys: %v %v", os_, data["apiserver-host"], data["apiserver-port"])
		}
		var c map[string]any
		if err := yaml.Unmarshal([]byte(data["config.yaml"].(string)), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	lc, wc := cfg("linux"), cfg("windows")
	for k, v := range map[string]any{"clusterCIDR": "10.244.0.0/16", "detectLocalMode": "NodeCIDR", "masqueradeAll": true,
		"syncPeriod": "1m", "minSyncPeriod": "500ms", "nodePortAddresses": []any{"10.0.0.0/8"}} {
		if !reflect.DeepEqual(lc[k], v) {
			t.Errorf("linux config %s = %v, want %v", k, lc[k], v)
		}
	}
	wk := wc["winkernel"].(map[string]any)
	if wk["networkName"] != "vxlan0" || wk["sourceVip"] != "10.244.3.2" || wk["enableDSR"] != true {
		t.Errorf("windows winkernel = %v", wk)
	}
	for _, os_ := range []string{"linux", "windows"} {
		ds := daemonSet(t, out, os_)
		c := container(ds)
		args := fmt.Sprint(c["args"])
		if !strings.Contains(args, "--log-level=debug") || (os_ == "linux") != strings.Contains(args, "--masquerade-all") {
			t.Errorf("%s args %s", os_, args)
		}
		env, _ := json.Marshal(c["env"])
		if !strings.Contains(string(env), `"name":"GOMEMLIMIT","valueFrom":{"resourceFieldRef":{"containerName":"crossproxy","resource":"limits.memory"}}`) {
			t.Errorf("%s: no GOMEMLIMIT from the memory limit: %s", os_, env)
		}
		spec, _ := json.Marshal(ds["spec"].(map[string]any)["template"].(map[string]any)["spec"])
		if !strings.Contains(string(spec), `"priorityClassName":"high"`) || !strings.Contains(string(spec), `"key":"k"`) {
			t.Errorf("%s pod spec lacks the priority class or toleration: %s", os_, spec)
		}
	}
	if img := container(daemonSet(t, out, "windows"))["image"]; img != "registry.example/xp-win:1" {
		t.Errorf("windows image %v", img)
	}
	if img := container(daemonSet(t, out, "linux"))["image"]; img != repo+":"+version {
		t.Errorf("linux image %v", img)
	}
	// No memory limit, no GOMEMLIMIT (the default Windows pod).
	if env, _ := json.Marshal(container(daemonSet(t, mustTemplate(t), "windows"))["env"]); strings.Contains(string(env), "GOMEMLIMIT") {
		t.Errorf("windows without a memory limit has GOMEMLIMIT: %s", env)
	}
	// A changed config changes the pods' config-hash, so helm upgrade rolls them.
	hash := func(out string) any {
		return daemonSet(t, out, "linux")["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)["crossproxy.io/config-hash"]
	}
	if hash(out) == hash(mustTemplate(t)) {
		t.Error("config-hash did not change with the config")
	}
}

// TestMonitoringObjects: the Prometheus Operator objects appear with
// monitoring.enabled=true, or "auto" when the cluster serves the API, and
// not otherwise.
func TestMonitoringObjects(t *testing.T) {
	has := func(out, key string) bool { _, ok := objects(t, out)[key]; return ok }
	if out := mustTemplate(t); has(out, "PodMonitor/kube-system/crossproxy") || has(out, "PrometheusRule/kube-system/crossproxy") {
		t.Error("auto without the monitoring API rendered monitors")
	}
	out := mustTemplate(t, "--api-versions", "monitoring.coreos.com/v1")
	if !has(out, "PodMonitor/kube-system/crossproxy") || !has(out, "PrometheusRule/kube-system/crossproxy") {
		t.Error("auto with monitoring.coreos.com/v1: no PodMonitor and PrometheusRule")
	}
	if out := mustTemplate(t, "--api-versions", "monitoring.coreos.com/v1", "--set", "monitoring.enabled=false"); has(out, "PodMonitor/kube-system/crossproxy") {
		t.Error("monitoring.enabled=false rendered a PodMonitor")
	}
	out = mustTemplate(t, "--set", "monitoring.enabled=true,monitoring.kind=ServiceMonitor,monitoring.dashboard.enabled=true")
	for _, k := range []string{"ServiceMonitor/kube-system/crossproxy", "Service/kube-system/crossproxy-metrics", "ConfigMap/kube-system/crossproxy-dashboard"} {
		if !has(out, k) {
			t.Errorf("no %s", k)
		}
	}
	dash := objects(t, out)["ConfigMap/kube-system/crossproxy-dashboard"]["data"].(map[string]any)["crossproxy.json"].(string)
	var d map[string]any
	if err := json.Unmarshal([]byte(dash), &d); err != nil {
		t.Fatalf("dashboard in the ConfigMap is not JSON: %v", err)
	}
}

// rulesFile writes the PrometheusRule's spec (the chart's alerts as rendered
// with the given values) as a Prometheus rule file.
func rulesFile(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out := mustTemplate(t, append([]string{"--set", "monitoring.enabled=true"}, args...)...)
	pr, ok := objects(t, out)["PrometheusRule/kube-system/crossproxy"]
	if !ok {
		t.Fatal("no PrometheusRule")
	}
	b, err := yaml.Marshal(pr["spec"])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "crossproxy.rules.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAlertRules: promtool check rules and promtool test rules (the cases in
// testdata/alerts_test.yaml: each alert fires when its condition holds and
// stays quiet on a healthy proxy) against the rules the chart renders.
func TestAlertRules(t *testing.T) {
	promtool := tool(t, "PROMTOOL")
	dir := t.TempDir()
	rules := rulesFile(t, dir)
	if out, err := run(promtool, "check", "rules", rules); err != nil {
		t.Fatalf("%v\n%s", err, out)
	} else {
		t.Log(strings.TrimSpace(out))
	}
	tests, err := os.ReadFile("testdata/alerts_test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(dir, "alerts_test.yaml")
	if err := os.WriteFile(tf, tests, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(promtool, "test", "rules", tf)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Log(strings.TrimSpace(out))
	// The stall threshold follows syncPeriod: at 1m the 90 s stall of the
	// test data is healthy, so the same tests must fail.
	rulesFile(t, dir, "--set", "linux.config.syncPeriod=1m,windows.config.syncPeriod=1m")
	if out, err := run(promtool, "test", "rules", tf); err == nil {
		t.Errorf("promtool test rules passed with syncPeriod 1m; the stall alert ignores syncPeriod\n%s", out)
	}
}

// TestDashboardQueries: every query of the dashboard is valid PromQL
// (promtool checks it as a recording rule, Grafana's variables replaced) and
// names only metrics the binary exports (platform/metrics, or the Go and
// process collectors).
func TestDashboardQueries(t *testing.T) {
	promtool := tool(t, "PROMTOOL")
	b, err := os.ReadFile(filepath.Join(chart, "files/dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	exprs := dashboardExprs(t, b)
	if len(exprs) < 10 {
		t.Fatalf("%d queries in the dashboard", len(exprs))
	}
	src, err := os.ReadFile("../../platform/metrics/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		fmt.Fprintf(&rules, "  - record: dashboard:q%d\n    expr: %q\n", i, e)
		for _, m := range regexp.MustCompile(`\b(kubeproxy|crossproxy)_[a-z_]+`).FindAllString(e, -1) {
			name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")
			short := strings.TrimPrefix(name, "kubeproxy_")
			if !strings.Contains(string(src), `"`+short+`"`) {
				t.Errorf("dashboard query %q: %s is not a metric in platform/metrics", e, m)
			}
		}
	}
	p := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(p, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(promtool, "check", "rules", p); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// dashboardExprs returns the dashboard's queries with Grafana's variables
// replaced by what Grafana would send.
func dashboardExprs(t *testing.T, b []byte) []string {
	t.Helper()
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			e := strings.ReplaceAll(tg.Expr, "$__rate_interval", "2m")
			out = append(out, strings.ReplaceAll(e, "$instance", ".*"))
		}
	}
	return out
}

// TestTakeoverRendered: takeover.enabled renders the hook Job and its RBAC
// (nothing without it), the Job runs files/takeover.sh, which parses as
// POSIX sh, and its Role may delete only kube-proxy's named DaemonSet and
// ConfigMap.
func TestTakeoverRendered(t *testing.T) {
	if _, ok := objects(t, mustTemplate(t))["Job/kube-system/crossproxy-takeover"]; ok {
		t.Fatal("takeover Job rendered without takeover.enabled")
	}
	out := mustTemplate(t, "--set", "takeover.enabled=true,ports.healthz=10356,ports.metrics=10349,takeover.kubeProxy.daemonSet=kp")
	objs := objects(t, out)
	job, ok := objs["Job/kube-system/crossproxy-takeover"]
	if !ok {
		t.Fatal("no takeover Job")
	}
	md := job["metadata"].(map[string]any)["annotations"].(map[string]any)
	if md["helm.sh/hook"] != "post-install,post-upgrade" {
		t.Errorf("takeover Job hook %v", md["helm.sh/hook"])
	}
	script := container(map[string]any{"spec": map[string]any{"template": job["spec"].(map[string]any)["template"]}})["args"].([]any)[0].(string)
	want, err := os.ReadFile(filepath.Join(chart, "files/takeover.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(script) != strings.TrimSpace(string(want)) {
		t.Error("the Job's script is not files/takeover.sh")
	}
	if out, err := run("sh", "-n", filepath.Join(chart, "files/takeover.sh")); err != nil {
		t.Errorf("takeover.sh does not parse: %v %s", err, out)
	}
	role, _ := json.Marshal(objs["Role/kube-system/crossproxy-takeover"]["rules"])
	for _, w := range []string{`"resourceNames":["kp","kube-proxy-windows"],"resources":["daemonsets"],"verbs":["get","delete","patch"]`,
		`"resourceNames":["kube-proxy"],"resources":["configmaps"]`} {
		if !strings.Contains(string(role), w) {
			t.Errorf("takeover Role %s lacks %s", role, w)
		}
	}
	env, _ := json.Marshal(container(map[string]any{"spec": map[string]any{"template": job["spec"].(map[string]any)["template"]}})["env"])
	for _, w := range []string{`{"name":"KP_WINDOWS_DAEMONSET","value":"kube-proxy-windows"}`, `{"name":"BACKUP","value":"crossproxy-kube-proxy-backup"}`} {
		if !strings.Contains(string(env), w) {
			t.Errorf("takeover Job env %s lacks %s", env, w)
		}
	}
	// A release that took over restores kube-proxy before helm uninstall.
	restore, ok := objs["Job/kube-system/crossproxy-restore"]
	if !ok {
		t.Fatal("takeover.enabled: no restore Job for helm uninstall")
	}
	if h := restore["metadata"].(map[string]any)["annotations"].(map[string]any)["helm.sh/hook"]; h != "pre-delete" {
		t.Errorf("restore Job of a takeover release runs at %v, want pre-delete", h)
	}
}

// TestRestoreRendered: takeover.restore=true runs files/restore.sh (valid
// POSIX sh) before the upgrade and before uninstall, requires a backup, and
// renders no DaemonSets, so the upgrade removes them only after the hook
// brought kube-proxy back; the ConfigMaps and RBAC stay for the pods'
// cleanup-on-delete containers.
func TestRestoreRendered(t *testing.T) {
	objs := objects(t, mustTemplate(t, "--set", "takeover.restore=true"))
	job, ok := objs["Job/kube-system/crossproxy-restore"]
	if !ok {
		t.Fatal("no restore Job")
	}
	if h := job["metadata"].(map[string]any)["annotations"].(map[string]any)["helm.sh/hook"]; h != "pre-upgrade,pre-delete" {
		t.Errorf("restore Job hook %v, want pre-upgrade,pre-delete", h)
	}
	c := container(map[string]any{"spec": map[string]any{"template": job["spec"].(map[string]any)["template"]}})
	want, err := os.ReadFile(filepath.Join(chart, "files/restore.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(c["args"].([]any)[0].(string)) != strings.TrimSpace(string(want)) {
		t.Error("the restore Job's script is not files/restore.sh")
	}
	if out, err := run("sh", "-n", filepath.Join(chart, "files/restore.sh")); err != nil {
		t.Errorf("restore.sh does not parse: %v %s", err, out)
	}
	if env, _ := json.Marshal(c["env"]); !strings.Contains(string(env), `{"name":"RESTORE_REQUIRED","value":"1"}`) {
		t.Errorf("restore=true does not require a backup: %s", env)
	}
	for _, k := range []string{"DaemonSet/kube-system/crossproxy-linux", "DaemonSet/kube-system/crossproxy-windows", "Job/kube-system/crossproxy-takeover"} {
		if _, ok := objs[k]; ok {
			t.Errorf("restore=true renders %s", k)
		}
	}
	for _, k := range []string{"ConfigMap/kube-system/crossproxy-linux", "ServiceAccount/kube-system/crossproxy", "Role/kube-system/crossproxy"} {
		if _, ok := objs[k]; !ok {
			t.Errorf("restore=true drops %s, which the terminating pods still use", k)
		}
	}
	if _, ok := objects(t, mustTemplate(t))["Job/kube-system/crossproxy-restore"]; ok {
		t.Error("a release that never took over renders a restore Job")
	}
}

// TestCleanupOnDeleteContainer: each DaemonSet's pods run the uninstall
// container beside the proxy, naming their own DaemonSet; without it
// (cleanupOnDelete.enabled=false) the proxy runs alone.
func TestCleanupOnDeleteContainer(t *testing.T) {
	out := mustTemplate(t, "--namespace", "net-system")
	for _, os_ := range []string{"linux", "windows"} {
		ds, ok := objects(t, out)["DaemonSet/net-system/crossproxy-"+os_]
		if !ok {
			t.Fatalf("no %s DaemonSet in net-system", os_)
		}
		cs := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)
		if len(cs) != 2 {
			t.Fatalf("%s: %d containers", os_, len(cs))
		}
		args := fmt.Sprint(cs[1].(map[string]any)["args"])
		if !strings.Contains(args, "cleanup-on-delete --daemonset=net-system/crossproxy-"+os_+" --config=") {
			t.Errorf("%s cleanup container args %s", os_, args)
		}
	}
	ds := daemonSet(t, mustTemplate(t, "--set", "cleanupOnDelete.enabled=false"), "linux")
	if cs := ds["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any); len(cs) != 1 {
		t.Errorf("cleanupOnDelete.enabled=false: %d containers", len(cs))
	}
}

// TestNoClusterDNS: neither DaemonSet depends on cluster DNS (issue 37: a
// rebooted node resolves a DNS-name API server with its own resolver, as
// kubeadm's kube-proxy, whose DaemonSet sets no dnsPolicy).
func TestNoClusterDNS(t *testing.T) {
	out := mustTemplate(t)
	for _, os_ := range []string{"linux", "windows"} {
		spec := daemonSet(t, out, os_)["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
		if p, ok := spec["dnsPolicy"]; ok && p != "ClusterFirst" && p != "Default" {
			t.Errorf("%s dnsPolicy %v: a host-network proxy must not resolve through cluster DNS", os_, p)
		}
	}
}

// checkKnobs: the pod-level knobs (issue 37) land in both DaemonSets' pod
// templates: podAnnotations and podLabels beside the chart's own, affinity
// per OS, imagePullSecrets, updateStrategy, --full-sync-period.
func checkKnobs(t *testing.T) {
	t.Helper()
	out := mustTemplate(t,
		"--set", "podAnnotations.example\\.com/team=net,podLabels.tier=node",
		"--set", "imagePullSecrets[0].name=regcred,fullSyncPeriod=30m,updateStrategy.rollingUpdate.maxUnavailable=10%",
		"--set-json", `linux.affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"NotIn","values":["gpu"]}]}]}}}`)
	for _, os_ := range []string{"linux", "windows"} {
		ds := daemonSet(t, out, os_)
		tmpl := ds["spec"].(map[string]any)["template"].(map[string]any)
		md := tmpl["metadata"].(map[string]any)
		if a := md["annotations"].(map[string]any); a["example.com/team"] != "net" || a["crossproxy.io/config-hash"] == nil {
			t.Errorf("%s pod annotations %v", os_, a)
		}
		if l := md["labels"].(map[string]any); l["tier"] != "node" || l["app.kubernetes.io/component"] != os_ {
			t.Errorf("%s pod labels %v", os_, l)
		}
		spec := tmpl["spec"].(map[string]any)
		if s, _ := json.Marshal(spec["imagePullSecrets"]); string(s) != `[{"name":"regcred"}]` {
			t.Errorf("%s imagePullSecrets %s", os_, s)
		}
		if _, ok := spec["affinity"]; ok != (os_ == "linux") {
			t.Errorf("%s affinity %v (given for linux only)", os_, spec["affinity"])
		}
		if u, _ := json.Marshal(ds["spec"].(map[string]any)["updateStrategy"]); string(u) != `{"rollingUpdate":{"maxSurge":0,"maxUnavailable":"10%"},"type":"RollingUpdate"}` {
			t.Errorf("%s updateStrategy %s", os_, u)
		}
		if args := fmt.Sprint(container(ds)["args"]); !strings.Contains(args, "--full-sync-period=30m") {
			t.Errorf("%s args %s", os_, args)
		}
	}
	// OnDelete renders no rollingUpdate (the API server refuses one).
	u, _ := json.Marshal(daemonSet(t, mustTemplate(t, "--set", "updateStrategy.type=OnDelete"), "linux")["spec"].(map[string]any)["updateStrategy"])
	if string(u) != `{"type":"OnDelete"}` {
		t.Errorf("OnDelete updateStrategy %s", u)
	}
}

// repoURL is where the repository's files are published (the module path);
// the default runbook base URL points into it.
const repoURL = "https://github.com/crossproxy/crossproxy/blob/main/"

// TestAlertRunbooks: every alert the chart renders carries a runbook_url
// whose page is a file of this repository, titled with the alert's name and
// saying what it means, how to confirm it and how to fix it; every relative
// link of the runbooks and the troubleshooting page leads to a file. A
// changed base URL reaches every alert.
func TestAlertRunbooks(t *testing.T) {
	type rule struct {
		Alert       string            `json:"alert"`
		Annotations map[string]string `json:"annotations"`
	}
	alerts := func(args ...string) []rule {
		var spec struct {
			Groups []struct{ Rules []rule } `json:"groups"`
		}
		out := mustTemplate(t, append([]string{"--set", "monitoring.enabled=true"}, args...)...)
		b, _ := json.Marshal(objects(t, out)["PrometheusRule/kube-system/crossproxy"]["spec"])
		if err := json.Unmarshal(b, &spec); err != nil {
			t.Fatal(err)
		}
		var rs []rule
		for _, g := range spec.Groups {
			rs = append(rs, g.Rules...)
		}
		return rs
	}
	rs := alerts()
	if len(rs) < 6 {
		t.Fatalf("%d alerts rendered", len(rs))
	}
	pages := map[string]bool{"installer/docs/troubleshooting.md": true}
	for _, r := range rs {
		u := r.Annotations["runbook_url"]
		rel, ok := strings.CutPrefix(u, repoURL)
		if !ok {
			t.Errorf("%s: runbook_url %q is not a page of %s", r.Alert, u, repoURL)
			continue
		}
		b, err := os.ReadFile(filepath.Join("../..", rel))
		if err != nil {
			t.Errorf("%s: runbook_url %s: %v", r.Alert, u, err)
			continue
		}
		pages[rel] = true
		page := string(b)
		if !strings.HasPrefix(page, "# "+r.Alert+"\n") {
			t.Errorf("%s: %s is not titled with the alert's name", r.Alert, rel)
		}
		for _, part := range []string{"**Meaning.**", "**Confirm.**", "**Fix.**", "```sh"} {
			if !strings.Contains(page, part) {
				t.Errorf("%s: %s has no %s", r.Alert, rel, part)
			}
		}
	}
	for p := range pages {
		b, err := os.ReadFile(filepath.Join("../..", p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`).FindAllStringSubmatch(string(b), -1) {
			target := filepath.Join("../..", filepath.Dir(p), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", p, m[1])
			}
		}
	}
	for _, r := range alerts("--set", "monitoring.rules.runbookBaseURL=https://mirror.example/rb/") {
		if want := "https://mirror.example/rb/" + r.Alert + ".md"; r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q with a changed base, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
	}
}

// TestKubeVersionRange: the chart installs on the supported API servers
// (README.md: v1.34 to v1.37, vendor builds included) and refuses the
// others, naming the range.
func TestKubeVersionRange(t *testing.T) {
	for _, v := range []string{"v1.34.0", "v1.34.4", "v1.37.2", "v1.35.2-eks-1234", "v1.36.1+k3s1"} {
		if _, err := template(t, "--kube-version", v); err != nil {
			t.Errorf("Kubernetes %s refused: %v", v, err)
		}
	}
	for _, v := range []string{"v1.33.9", "v1.38.0", "v1.38.0-rc.1"} {
		_, err := template(t, "--kube-version", v)
		if err == nil || !strings.Contains(err.Error(), ">=1.34.0-0 <1.38.0-0") {
			t.Errorf("Kubernetes %s: %v, want a refusal naming the range", v, err)
		}
	}
}
