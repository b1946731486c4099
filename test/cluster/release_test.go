//go:build cluster

// The released chart installed the way an operator installs it: two `make
// release` directories (XP_RELEASES, the older first) pushed to a real
// registry (distribution v3, the registry Docker Hub and GHCR descend from)
// on this host, the chart pulled from it as an OCI chart with only the API
// server's address set, the image pulled from it by the nodes' containerd.
// Then `helm upgrade` to the second release and `helm rollback` to the first,
// each under traffic that must lose no connection, each timed.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	// registryAddr is where the test registry listens: the control plane's
	// bridge address in xpc-cp, which every node reaches (the API server's).
	registryAddr = "10.201.0.1:5000"
	// chartImageRepo is the chart's default image repository
	// (installer/helm/crossproxy/values.yaml): the nodes resolve its
	// registry to registryAddr, as a site mirroring ghcr.io does.
	chartImageRepo = "ghcr.io/crossproxy/crossproxy"
)

// release is one `make release` directory and what the test reads from it.
type release struct {
	dir, version, chartVersion, digest string
}

func readRelease(t *testing.T, dir string) release {
	t.Helper()
	v := filepath.Base(dir)
	b, err := os.ReadFile(filepath.Join(dir, "crossproxy-"+v+"-image.digest"))
	if err != nil {
		t.Fatalf("release %s: %v (make release VERSION=%s)", dir, err, v)
	}
	return release{dir: dir, version: v, chartVersion: strings.TrimPrefix(v, "v"), digest: strings.TrimSpace(string(b))}
}

// startRegistry runs the registry (test/release/tool.sh builds it from
// tools/release's pinned distribution v3) in xpc-cp on registryAddr, plain
// HTTP, storing into a temporary directory, until the test ends.
func (c *cluster) startRegistry(scripts string) {
	t := c.t
	t.Helper()
	bin, err := sh(context.Background(), "bash", filepath.Join(scripts, "tool.sh"), "registry")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), registryAddr)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/xpc-cp", strings.TrimSpace(bin), "serve", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("registry log:\n%s", tail(string(b), 40))
		}
	})
	c.eventually("the registry at "+registryAddr, 30*time.Second, func() error {
		_, err := c.get("xpc-cp", "http://"+registryAddr+"/v2/")
		return err
	})
}

// mirrorRegistry points every node's containerd at the test registry for
// the chart's image registry (containerd's hosts.toml, read at each pull;
// cluster.sh sets config_path), with it as the only server, the fallback
// too: no pull leaves the host. containerd 1.6 refuses a hosts.toml without
// a [host] table ("invalid `host` tree") and then resolves the registry's
// own name, hence both.
func (c *cluster) mirrorRegistry() {
	t := c.t
	t.Helper()
	dir := os.Getenv("XPC_DIR")
	if dir == "" {
		dir = "/var/lib/xpc-cluster"
	}
	host := strings.SplitN(chartImageRepo, "/", 2)[0]
	for _, n := range c.linuxNodes() {
		d := filepath.Join(dir, "node-"+strings.TrimPrefix(n, "xpc-"), "certs.d", host)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", registryAddr)), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(d) })
	}
}

// linuxNodes lists the cluster's Linux nodes.
func (c *cluster) linuxNodes() []string {
	c.t.Helper()
	return strings.Fields(c.kubectl("get", "nodes", "-l", "kubernetes.io/os=linux", "-o", "jsonpath={.items[*].metadata.name}"))
}

// push pushes a release's image and chart with test/release/push.sh from
// xpc-cp and returns the digest the registry serves for the image's tag.
func (c *cluster) push(scripts string, r release) string {
	c.t.Helper()
	cmd := exec.Command("nsenter", "--net=/run/netns/xpc-cp", "bash", filepath.Join(scripts, "push.sh"),
		r.dir, r.version, registryAddr+"/"+strings.SplitN(chartImageRepo, "/", 2)[1], registryAddr+"/charts")
	cmd.Env = append(os.Environ(), "PLAIN_HTTP=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("push %s: %v\n%s", r.version, err, errb.String())
	}
	return strings.TrimSpace(string(out))
}

// podImage is one crossproxy pod's node, readiness, image and imageID.
type podImage struct {
	Node, Image, ImageID string
	Ready                bool
}

func (c *cluster) crossproxyPods() map[string]podImage {
	c.t.Helper()
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
			Status struct {
				ContainerStatuses []struct {
					Name    string `json:"name"`
					Image   string `json:"image"`
					ImageID string `json:"imageID"`
					Ready   bool   `json:"ready"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	out := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=crossproxy,app.kubernetes.io/component=linux", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		c.t.Fatalf("pods: %v", err)
	}
	m := map[string]podImage{}
	for _, p := range list.Items {
		pi := podImage{Node: p.Spec.NodeName}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "crossproxy" {
				pi.Image, pi.ImageID, pi.Ready = s.Image, s.ImageID, s.Ready && p.Metadata.DeletionTimestamp == nil
			}
		}
		m[p.Metadata.Name] = pi
	}
	return m
}

// runsRelease checks, for up to a minute (an old pod may still be
// terminating after --wait returns), that every Linux node runs exactly one
// Ready crossproxy pod whose image is the release's tag and whose image ID
// (the digest containerd pulled) is the release's index digest, and that the
// binary in it reports the release's version.
func (c *cluster) runsRelease(r release) {
	t := c.t
	t.Helper()
	nodes := c.linuxNodes()
	wantImage, wantID := chartImageRepo+":"+r.version, chartImageRepo+"@"+r.digest
	var problem string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		pods := c.crossproxyPods()
		problem = ""
		byNode := map[string]int{}
		for name, p := range pods {
			byNode[p.Node]++
			switch {
			case !p.Ready:
				problem = fmt.Sprintf("pod %s on %s is not Ready", name, p.Node)
			case p.Image != wantImage:
				problem = fmt.Sprintf("pod %s runs %s, want %s", name, p.Image, wantImage)
			case p.ImageID != wantID:
				problem = fmt.Sprintf("pod %s's image ID is %s, want the release's %s", name, p.ImageID, wantID)
			}
		}
		for _, n := range nodes {
			if byNode[n] != 1 {
				problem = fmt.Sprintf("%d crossproxy pods on %s, want 1 (%v)", byNode[n], n, pods)
			}
		}
		if problem == "" {
			for name := range pods {
				out := c.kubectl("-n", "kube-system", "exec", name, "-c", "crossproxy", "--", "/usr/local/bin/crossproxy", "version")
				if first := strings.SplitN(out, "\n", 2)[0]; !strings.HasPrefix(first, "crossproxy "+r.version+" linux/") {
					t.Errorf("crossproxy version in %s: %q, want %s", name, first, r.version)
				}
			}
			t.Logf("every Linux node (%s) runs %s, image ID %s", strings.Join(nodes, ", "), wantImage, wantID)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("release %s is not what runs: %s", r.version, problem)
		}
	}
}

func TestRelease(t *testing.T) {
	c := newCluster(t)
	dirs := strings.Fields(env(t, "XP_RELEASES"))
	if len(dirs) != 2 {
		t.Fatalf("XP_RELEASES names %d release directories, want two (the first installed, the second the upgrade)", len(dirs))
	}
	first, second := readRelease(t, dirs[0]), readRelease(t, dirs[1])
	scripts, err := filepath.Abs("../release")
	if err != nil {
		t.Fatal(err)
	}
	c.resetCrossproxy()
	c.startRegistry(scripts)
	c.mirrorRegistry()
	for _, r := range []release{first, second} {
		start := time.Now()
		if got := c.push(scripts, r); got != r.digest {
			t.Fatalf("the registry serves %s as %s, the release's index is %s", r.version, got, r.digest)
		}
		t.Logf("FIGURE push %s (image index and chart) to the host registry: %v", r.version, time.Since(start).Round(100*time.Millisecond))
	}

	chart := "oci://" + registryAddr + "/charts/crossproxy"
	start := time.Now()
	out := c.helm("install", "crossproxy", chart, "--version", first.chartVersion, "--plain-http",
		"--namespace", "kube-system", "--set", "apiServer.host=10.201.0.1", "--set", "apiServer.port=6443",
		"--wait", "--timeout", "5m")
	t.Logf("FIGURE helm install %s --version %s (image pulled from the registry, every Linux pod Ready): %v",
		chart, first.chartVersion, time.Since(start).Round(100*time.Millisecond))
	t.Logf("helm install:\n%s", tail(out, 600))
	c.runsRelease(first)
	// The release's app version, as Helm recorded it from the pulled chart.
	if l := c.helm("list", "--namespace", "kube-system", "-o", "json"); !strings.Contains(l, `"app_version":"`+first.version+`"`) || !strings.Contains(l, `"chart":"crossproxy-`+first.chartVersion+`"`) {
		t.Errorf("helm list after the install: %s", l)
	}

	clusterIP, nodePort := c.echoService()

	tr := c.startTraffic("release-upgrade", clusterIP, "10.201.0.11", nodePort)
	start = time.Now()
	c.helm("upgrade", "crossproxy", chart, "--version", second.chartVersion, "--plain-http",
		"--namespace", "kube-system", "--reuse-values", "--wait", "--timeout", "5m")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	t.Logf("FIGURE helm upgrade %s -> %s (every new pod Ready): %v", first.version, second.version, time.Since(start).Round(100*time.Millisecond))
	c.runsRelease(second)
	tr.stop()

	tr = c.startTraffic("release-rollback", clusterIP, "10.201.0.11", nodePort)
	start = time.Now()
	c.helm("rollback", "crossproxy", "1", "--namespace", "kube-system", "--wait", "--timeout", "5m")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	t.Logf("FIGURE helm rollback %s -> %s (every pod Ready): %v", second.version, first.version, time.Since(start).Round(100*time.Millisecond))
	c.runsRelease(first)
	tr.stop()
	if h := c.helm("history", "crossproxy", "--namespace", "kube-system", "-o", "json"); !strings.Contains(h, `"revision":3`) || !strings.Contains(h, `"description":"Rollback to 1"`) {
		t.Errorf("helm history after the rollback: %s", h)
	}
	c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "5m")
}
