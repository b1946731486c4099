//go:build cluster

// The Helm chart (installer/helm/crossproxy) on the real two-node cluster:
// `helm install`, Services from both nodes, and `helm upgrade` to a new image
// under traffic, which must lose no connection. Run through make
// test-cluster, after TestDaemonSet (whose objects it removes first).
package cluster

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helm runs the Helm CLI (XP_HELM) as cluster admin from xpc-cp, where the
// API server is.
func (c *cluster) helm(args ...string) string {
	c.t.Helper()
	out, err := c.helmErr(args...)
	if err != nil {
		c.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// helmErr runs the Helm CLI like helm, returning its output and error
// instead of failing the test.
func (c *cluster) helmErr(args ...string) (string, error) {
	dir := os.Getenv("XPC_DIR")
	if dir == "" {
		dir = "/var/lib/xpc-cluster"
	}
	full := append([]string{"--net=/run/netns/xpc-cp", env(c.t, "XP_HELM"),
		"--kubeconfig", filepath.Join(dir, "pki", "admin.kubeconfig")}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", full...).CombinedOutput()
	return string(out), err
}

// imageParts splits an image reference into repository and tag.
func imageParts(ref string) (string, string) {
	i := strings.LastIndex(ref, ":")
	return ref[:i], ref[i+1:]
}

func TestHelm(t *testing.T) {
	c := newCluster(t)
	chart, err := filepath.Abs(env(t, "XP_CHART"))
	if err != nil {
		t.Fatal(err)
	}
	ref, upRef := env(t, "XP_IMAGE_REF"), env(t, "XP_UPGRADE_REF")
	repo, tag := imageParts(ref)
	upRepo, upTag := imageParts(upRef)
	if repo != upRepo {
		t.Fatalf("upgrade image %s is not in %s", upRef, repo)
	}
	for _, a := range []string{"XP_IMAGE_ARCHIVE", "XP_UPGRADE_ARCHIVE"} {
		if _, err := sh(context.Background(), "bash", c.script, "load", env(t, a)); err != nil {
			t.Fatal(err)
		}
	}
	// TestDaemonSet's objects (same names) go first: Helm adopts nothing it
	// did not create. The rules stay in the kernel meanwhile.
	c.deleteManifestObjects()

	start := time.Now()
	out := c.helm("install", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "apiServer.host=10.201.0.1", "--set", "apiServer.port=6443",
		"--set", "linux.config.clusterCIDR=10.202.0.0/16",
		"--wait", "--timeout", "4m")
	t.Logf("FIGURE helm install --wait (both Linux pods Ready): %v", time.Since(start).Round(100*time.Millisecond))
	t.Logf("helm install:\n%s", out)
	pods := c.podsOn("kube-system", "app.kubernetes.io/name=crossproxy")
	if len(pods["xpc-a"]) != 1 || len(pods["xpc-b"]) != 1 {
		t.Fatalf("crossproxy pods by node after helm install: %v, want one on each", pods)
	}
	// Both OSes from one release: the Windows DaemonSet exists, with no
	// Windows node to run on.
	if n := c.kubectl("-n", "kube-system", "get", "daemonset", "crossproxy-windows", "-o", "jsonpath={.status.desiredNumberScheduled}"); n != "0" {
		t.Errorf("crossproxy-windows wants %s pods on a cluster without Windows nodes", n)
	}
	if h := c.kubectl("-n", "kube-system", "get", "configmap", "crossproxy-linux", "-o", "jsonpath={.data.apiserver-host}"); h != "10.201.0.1" {
		t.Errorf("apiserver-host %q in the chart's ConfigMap", h)
	}

	clusterIP, nodePort := c.echoService()

	// helm upgrade to the next image under traffic.
	tr := c.startTraffic("helm-upgrade", clusterIP, "10.201.0.11", nodePort)
	start = time.Now()
	out = c.helm("upgrade", "crossproxy", chart, "--namespace", "kube-system", "--reuse-values",
		"--set", "image.tag="+upTag, "--wait", "--timeout", "4m")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	t.Logf("FIGURE helm upgrade --wait (both new pods Ready): %v", time.Since(start).Round(100*time.Millisecond))
	t.Logf("helm upgrade:\n%s", out)
	// The rollout is done when the new pods are Ready; an old pod may still
	// be terminating then (its cleanup-on-delete container waits for the
	// proxy beside it to stop before it decides to keep the rules), so the
	// pods are listed until only the two new ones are left.
	var img string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		img = strings.Join(strings.Fields(c.kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=crossproxy",
			"-o", "jsonpath={.items[*].spec.containers[0].image}")), " ")
		if img == upRef+" "+upRef || time.Now().After(deadline) {
			break
		}
	}
	if img != upRef+" "+upRef {
		t.Errorf("a minute after helm upgrade crossproxy pods run %q, want %s on both", img, upRef)
	}
	if rev := c.helm("history", "crossproxy", "--namespace", "kube-system", "--max", "1", "-o", "json"); !strings.Contains(rev, `"revision":2`) || !strings.Contains(rev, `"status":"deployed"`) {
		t.Errorf("helm history after the upgrade: %s", rev)
	}
	tr.stop()
}

// traffic is a set of probes opening a new connection every 50 ms each: a
// client pod on each node through the ClusterIP and one in xpc-cp through a
// NodePort on nodeIP.
type traffic struct {
	c       *cluster
	name    string
	pods    []string
	np      *exec.Cmd
	npOut   bytes.Buffer
	npURL   string
	stopped bool
}

func (c *cluster) startTraffic(name, clusterIP, nodeIP, nodePort string) *traffic {
	c.t.Helper()
	tr := &traffic{c: c, name: name, pods: []string{name + "-a", name + "-b"}, npURL: "http://" + nodeIP + ":" + nodePort + "/"}
	c.kubectlIn(clientPod(tr.pods[0], "xpc-a", "client", "-interval", "50ms", "http://"+clusterIP+"/")+"---"+
		clientPod(tr.pods[1], "xpc-b", "client", "-interval", "50ms", "http://"+clusterIP+"/"), "apply", "-f", "-")
	c.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/"+tr.pods[0], "pod/"+tr.pods[1], "--timeout=2m")
	tr.np = exec.Command("nsenter", "--net=/run/netns/xpc-cp", c.netecho, "client", "-interval", "50ms", tr.npURL)
	tr.np.Stdout, tr.np.Stderr = &tr.npOut, &tr.npOut
	if err := tr.np.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(tr.stopNodePort)
	time.Sleep(3 * time.Second)
	return tr
}

func (tr *traffic) stopNodePort() {
	if !tr.stopped {
		tr.stopped = true
		_ = tr.np.Process.Signal(os.Interrupt)
		_ = tr.np.Wait()
	}
}

// stop ends the probes, logs each one's counts as FIGURE lines and fails the
// test when any connection failed or a probe never succeeded.
func (tr *traffic) stop() {
	t := tr.c.t
	t.Helper()
	time.Sleep(3 * time.Second)
	tr.stopNodePort()
	tried, total := 0, 0
	count := func(what, log string) {
		ok, failed, found := counts(log)
		if !found || ok == 0 {
			t.Errorf("%s: no successful requests counted:\n%s", what, log)
		}
		t.Logf("FIGURE %s traffic %s: ok=%d failed=%d", tr.name, what, ok, failed)
		if failed > 0 {
			t.Logf("%s failures:\n%s", what, log)
		}
		tried += ok + failed
		total += failed
	}
	for _, p := range tr.pods {
		count(p+" (pod -> ClusterIP)", tr.c.kubectl("-n", ns, "logs", p))
	}
	count("xpc-cp -> NodePort "+tr.npURL, tr.npOut.String())
	t.Logf("FIGURE %s connections: %d tried, %d failed", tr.name, tried, total)
	if total != 0 {
		t.Errorf("%d connections failed during %s (target 0)", total, tr.name)
	}
	tr.c.kubectl("-n", ns, "delete", "pod", tr.pods[0], tr.pods[1], "--wait=false")
}

// echoService applies the echo workload and returns its ClusterIP and
// NodePort once the NodePort answers on both nodes from xpc-cp.
func (c *cluster) echoService() (clusterIP, nodePort string) {
	c.t.Helper()
	c.kubectlIn(workloads, "apply", "-f", "-")
	c.kubectl("-n", ns, "rollout", "status", "deployment/echo", "--timeout=3m")
	clusterIP = strings.TrimSpace(c.kubectl("-n", ns, "get", "svc", "echo", "-o", "jsonpath={.spec.clusterIP}"))
	nodePort = strings.TrimSpace(c.kubectl("-n", ns, "get", "svc", "echo-np", "-o", "jsonpath={.spec.ports[0].nodePort}"))
	for _, ip := range []string{"10.201.0.11", "10.201.0.12"} {
		url := "http://" + ip + ":" + nodePort + "/"
		c.eventually("NodePort "+url+" from xpc-cp", 60*time.Second, func() error { _, err := c.get("xpc-cp", url); return err })
	}
	return clusterIP, nodePort
}
