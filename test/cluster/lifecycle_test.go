//go:build cluster

// A node's whole life as shipped (issue 37), on the real cluster: a reboot
// with the API server given as a DNS name (and the same reboot failing with
// the old dnsPolicy), an uninstall that leaves no crossproxy table on any
// node while a rolling restart leaves every one, and the way back from a
// takeover to kube-proxy under traffic. TestUninstall runs in make
// test-cluster; TestReboot and TestRestore need a cluster whose pods resolve
// names as a kubeadm cluster's do and run with make test-lifecycle.
package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// apiName is the API server's DNS name in its certificate (cluster.sh).
const apiName = "api.xpc-cluster.internal"

// kubeDNS is the cluster DNS as a kubeadm cluster has it: a Service
// ClusterIP (the kubelets' clusterDNS under make test-lifecycle), reached
// only through the node's proxy rules, in front of the DNS server in xpc-cp.
const kubeDNS = `
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: 10.203.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-xpc-cp
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns, endpointslice.kubernetes.io/managed-by: xpc-test}
addressType: IPv4
endpoints:
- addresses: [10.201.0.1]
  conditions: {ready: true}
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
`

// kubeProxyWindows is the Windows kube-proxy DaemonSet as sig-windows-tools'
// HostProcess manifests (hostprocess/calico/kube-proxy) lay it out: it mounts
// kube-proxy's ConfigMap; this cluster has no Windows node, so it schedules
// no pod, and what is tested is that the takeover keeps it and the restore
// brings it back as it was.
const kubeProxyWindows = `
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-proxy-windows, namespace: kube-system, labels: {k8s-app: kube-proxy}}
spec:
  selector: {matchLabels: {k8s-app: kube-proxy-windows}}
  template:
    metadata: {labels: {k8s-app: kube-proxy-windows}}
    spec:
      serviceAccountName: kube-proxy
      securityContext: {windowsOptions: {hostProcess: true, runAsUserName: "NT AUTHORITY\\system"}}
      hostNetwork: true
      priorityClassName: system-node-critical
      containers:
      - name: kube-proxy
        image: sigwindowstools/kube-proxy:v1.37.2-calico-hostprocess
        args: ["$env:CONTAINER_SANDBOX_MOUNT_POINT/kube-proxy/start.ps1"]
        workingDir: "$env:CONTAINER_SANDBOX_MOUNT_POINT/kube-proxy/"
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
        volumeMounts: [{name: kube-proxy, mountPath: /var/lib/kube-proxy}]
      nodeSelector: {kubernetes.io/os: windows}
      tolerations: [{key: CriticalAddonsOnly, operator: Exists}, {operator: Exists}]
      volumes: [{name: kube-proxy, configMap: {name: kube-proxy}}]
`

// stateDir is the cluster's state directory (cluster.sh's $D).
func stateDir() string {
	if d := os.Getenv("XPC_DIR"); d != "" {
		return d
	}
	return "/var/lib/xpc-cluster"
}

// resetCrossproxy removes every crossproxy object a test before may have
// left (a Helm release, the plain manifests) and crossproxy's tables from
// both nodes, so each test starts from a node without crossproxy.
// deleteManifestObjects deletes what the plain manifests create, before the
// chart installs objects of the same names (Helm adopts nothing it did not
// create). The rules stay in the kernel meanwhile.
func (c *cluster) deleteManifestObjects() {
	c.t.Helper()
	c.kubectl("-n", "kube-system", "delete", "daemonset,configmap,serviceaccount", "-l", "app.kubernetes.io/name=crossproxy", "--ignore-not-found", "--wait=true")
	c.kubectl("delete", "clusterrole,clusterrolebinding", "crossproxy", "crossproxy-reader", "crossproxy-operator", "--ignore-not-found")
	c.kubectl("-n", "kube-system", "delete", "role,rolebinding", "crossproxy", "--ignore-not-found")
	c.kubectl("-n", "kube-system", "wait", "--for=delete", "pod", "-l", "app.kubernetes.io/name=crossproxy", "--timeout=2m")
}

func (c *cluster) resetCrossproxy() {
	c.t.Helper()
	if rel := c.helm("list", "--namespace", "kube-system", "-q"); strings.Contains(rel, "crossproxy") {
		c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "5m")
	}
	c.deleteManifestObjects()
	for _, n := range []string{"xpc-a", "xpc-b"} {
		if _, err := sh(context.Background(), env(c.t, "XP_CROSSPROXY_BIN"), "cleanup", "--netns", "/run/netns/"+n); err != nil {
			c.t.Fatal(err)
		}
		if tb := tables(c.t, n); strings.Contains(tb, "crossproxy") {
			c.t.Fatalf("%s still has crossproxy tables after cleanup:\n%s", n, tb)
		}
	}
}

// chartAndImages returns the chart's absolute path after loading the image
// archives named by the given variables into every node.
func (c *cluster) chartAndImages(archives ...string) string {
	c.t.Helper()
	chart, err := filepath.Abs(env(c.t, "XP_CHART"))
	if err != nil {
		c.t.Fatal(err)
	}
	for _, a := range archives {
		if _, err := sh(context.Background(), "bash", c.script, "load", env(c.t, a)); err != nil {
			c.t.Fatal(err)
		}
	}
	return chart
}

// crossproxyTables reports whether a node has any crossproxy table.
func crossproxyTables(t *testing.T, node string) bool {
	return strings.Contains(tables(t, node), "crossproxy")
}

// waitNoTables waits until neither node has a crossproxy table and returns
// how long that took.
func (c *cluster) waitNoTables(what string, timeout time.Duration) time.Duration {
	c.t.Helper()
	start := time.Now()
	c.eventually(what+": no crossproxy table left on either node", timeout, func() error {
		for _, n := range []string{"xpc-a", "xpc-b"} {
			if tb := tables(c.t, n); strings.Contains(tb, "crossproxy") {
				return fmt.Errorf("%s:\n%s", n, tb)
			}
		}
		return nil
	})
	return time.Since(start)
}

// waitTables waits until both nodes have crossproxy's table.
func (c *cluster) waitTables() {
	c.t.Helper()
	for _, n := range []string{"xpc-a", "xpc-b"} {
		c.eventually("crossproxy's table on "+n, 60*time.Second, func() error {
			if !crossproxyTables(c.t, n) {
				return fmt.Errorf("none yet")
			}
			return nil
		})
	}
}

// installRelease installs the chart with the test image and the given
// values, waiting for the pods, and returns helm's output (NOTES included).
func (c *cluster) installRelease(chart string, sets ...string) string {
	c.t.Helper()
	repo, tag := imageParts(env(c.t, "XP_IMAGE_REF"))
	args := []string{"install", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository=" + repo, "--set", "image.tag=" + tag,
		"--set", "linux.config.clusterCIDR=10.202.0.0/16"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return c.helm(append(args, "--wait", "--timeout", "5m")...)
}

// servedWithin polls a NodePort from xpc-cp (a new connection every 100 ms,
// 1 s each) until it answers or limit passes; it returns the time to the
// first answer and whether there was one.
func (c *cluster) servedWithin(url string, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < limit {
		if _, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-cp", c.netecho, "get", "-timeout", "1s", url); err == nil {
			return time.Since(start), true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start), false
}

// reboot makes node letter n look rebooted to crossproxy (cluster.sh reboot:
// kubelet stopped, crossproxy killed, its tables flushed, kubelet started)
// and checks the node lost its Service rules.
func (c *cluster) reboot(n string) {
	c.t.Helper()
	if out, err := sh(context.Background(), "bash", c.script, "reboot", n); err != nil {
		c.t.Fatalf("reboot %s: %v\n%s", n, err, out)
	}
}

func TestReboot(t *testing.T) {
	c := newCluster(t)
	if b, _ := os.ReadFile(filepath.Join(stateDir(), "cluster-dns")); strings.TrimSpace(string(b)) != "10.203.0.10" {
		t.Fatalf("the cluster's pods resolve through %q, not the kube-dns ClusterIP 10.203.0.10: run through make test-lifecycle", strings.TrimSpace(string(b)))
	}
	chart := c.chartAndImages("XP_IMAGE_ARCHIVE")
	c.resetCrossproxy()

	// The DNS server in xpc-cp: the nodes' own resolver (their resolv.conf
	// names 10.201.0.1) knows the API server's name; the pods' cluster DNS
	// is the same server behind the kube-dns ClusterIP.
	dns := exec.Command("nsenter", "--net=/run/netns/xpc-cp", env(t, "XP_CLUSTERDNS"),
		"--kubeconfig", filepath.Join(stateDir(), "pki", "admin.kubeconfig"),
		"--listen", "10.201.0.1:53", "--host", apiName+"=10.201.0.1")
	dnsLog, err := os.Create(filepath.Join(stateDir(), "logs", "clusterdns-lifecycle.log"))
	if err != nil {
		t.Fatal(err)
	}
	dns.Stdout, dns.Stderr = dnsLog, dnsLog
	if err := dns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Process.Kill(); _ = dns.Wait(); dnsLog.Close() })
	c.kubectlIn(kubeDNS, "apply", "-f", "-")

	out := c.installRelease(chart, "apiServer.host="+apiName, "apiServer.port=6443")
	if !strings.Contains(out, apiName+":6443, from the values") {
		t.Errorf("NOTES does not name the API server address it uses:\n%s", out)
	}
	_, nodePort := c.echoService()
	url := "http://10.201.0.12:" + nodePort + "/"

	// The default DaemonSet: no dnsPolicy, the node's resolver.
	c.reboot("b")
	d, ok := c.servedWithin(url, 60*time.Second)
	t.Logf("FIGURE reboot, no dnsPolicy, apiServer.host=%s: xpc-b serves its NodePort again %v after the kubelet started", apiName, d.Round(100*time.Millisecond))
	if !ok || d > 10*time.Second {
		t.Errorf("after a reboot xpc-b served its Services again after %v (served: %v), target 10 s", d, ok)
	}

	// The old DaemonSet: dnsPolicy ClusterFirstWithHostNet sends the API
	// server's name to the kube-dns ClusterIP. Its pods start while rules
	// are on the nodes; after a reboot there are none, and it never syncs.
	c.kubectl("-n", "kube-system", "patch", "daemonset", "crossproxy-linux", "--type", "json",
		"-p", `[{"op":"add","path":"/spec/template/spec/dnsPolicy","value":"ClusterFirstWithHostNet"}]`)
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	c.reboot("b")
	d, ok = c.servedWithin(url, 45*time.Second)
	t.Logf("FIGURE reboot, dnsPolicy ClusterFirstWithHostNet: served again: %v (waited %v)", ok, d.Round(100*time.Millisecond))
	if ok {
		t.Errorf("with the old dnsPolicy xpc-b came back after %v: the test does not show the deadlock it guards against", d)
	}
	pods := c.podsOn("kube-system", "app.kubernetes.io/component=linux")
	if len(pods["xpc-b"]) == 1 {
		if log, err := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "logs", pods["xpc-b"][0], "-c", "crossproxy"); err == nil {
			lines := strings.Split(strings.TrimSpace(log), "\n")
			t.Logf("crossproxy on xpc-b with the old dnsPolicy (last lines):\n%s", strings.Join(lines[max(0, len(lines)-8):], "\n"))
		}
	}

	// Back to the shipped DaemonSet: the pod on xpc-b is replaced first
	// (it is the unavailable one) and the node serves again.
	start := time.Now()
	c.kubectl("-n", "kube-system", "patch", "daemonset", "crossproxy-linux", "--type", "json",
		"-p", `[{"op":"remove","path":"/spec/template/spec/dnsPolicy"}]`)
	d, ok = c.servedWithin(url, 3*time.Minute)
	t.Logf("FIGURE recovery from the deadlock by rolling out the shipped dnsPolicy: %v", time.Since(start).Round(100*time.Millisecond))
	if !ok {
		t.Errorf("xpc-b did not serve again after the shipped DaemonSet rolled out (%v)", d)
	}
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	// Gone while the DNS server that names the API server still runs.
	c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "5m")
	c.waitNoTables("uninstall after the reboot test", 60*time.Second)
}

func TestUninstall(t *testing.T) {
	c := newCluster(t)
	chart := c.chartAndImages("XP_IMAGE_ARCHIVE")
	// In make test-cluster this follows TestHelm and takes over its release
	// (helm install and upgrade under traffic there already ran with the
	// cleanup-on-delete containers in every pod); alone, it installs one.
	rel := c.helm("list", "--namespace", "kube-system", "-q")
	host, _ := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "get", "configmap", "crossproxy-linux",
		"-o", "jsonpath={.data.apiserver-host}")
	if !strings.Contains(rel, "crossproxy") || host != "10.201.0.1" {
		c.resetCrossproxy()
		c.installRelease(chart, "apiServer.host=10.201.0.1", "apiServer.port=6443")
	}
	c.waitTables()
	// What the uninstall container costs on a node, idle (its request in
	// values.yaml: 32Mi).
	for _, m := range cleanupContainerMemory(t) {
		t.Logf("FIGURE cleanup-on-delete container, idle: %s", m)
	}

	// A rolling restart (what an upgrade, a drain or an eviction look like
	// to a pod: stopped while its DaemonSet stays) never removes the rules:
	// the tables are sampled every 200 ms on both nodes while each pod is
	// replaced.
	var missing, samples atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			for _, n := range []string{"xpc-a", "xpc-b"} {
				out, err := sh(context.Background(), "nsenter", "--net=/run/netns/"+n, "nft", "list", "tables")
				samples.Add(1)
				if err != nil || !strings.Contains(out, "crossproxy") {
					missing.Add(1)
				}
			}
		}
	}()
	start := time.Now()
	c.kubectl("-n", "kube-system", "rollout", "restart", "daemonset/crossproxy-linux")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
	close(stop)
	wg.Wait()
	t.Logf("FIGURE rolling restart (%v): %d table samples, %d without crossproxy's table", time.Since(start).Round(100*time.Millisecond), samples.Load(), missing.Load())
	if missing.Load() != 0 || samples.Load() < 10 {
		t.Errorf("a rolling restart removed crossproxy's rules in %d of %d samples", missing.Load(), samples.Load())
	}

	// helm uninstall: every node clean.
	start = time.Now()
	c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "5m")
	helmTook := time.Since(start)
	d := c.waitNoTables("helm uninstall", 60*time.Second)
	t.Logf("FIGURE helm uninstall: %v, then no crossproxy table on either node %v later", helmTook.Round(100*time.Millisecond), d.Round(100*time.Millisecond))

	// The plain manifests: kubectl delete -f (the RBAC first, as the file
	// lists it, so only the watch opened before can tell the pods) leaves
	// clean nodes too.
	manifest := env(t, "XP_MANIFEST")
	c.deployCrossproxy(manifest, true)
	c.waitTables()
	start = time.Now()
	c.kubectl("delete", "-f", manifest, "--wait=true")
	c.waitNoTables("kubectl delete -f", 60*time.Second)
	t.Logf("FIGURE kubectl delete -f the Linux manifest: no crossproxy table on either node %v after the delete began", time.Since(start).Round(100*time.Millisecond))
}

func TestRestore(t *testing.T) {
	c := newCluster(t)
	chart := c.chartAndImages("XP_IMAGE_ARCHIVE", "XP_KUBETOOLS_ARCHIVE")
	c.resetCrossproxy()
	// kube-proxy as kubeadm deploys it (takeover_test.go's objects).
	c.kubectlIn(kubeProxyObjects+"---"+kubeProxyWindows, "apply", "-f", "-")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=3m")
	origConfig := c.kubectl("-n", "kube-system", "get", "configmap", "kube-proxy", "-o", `jsonpath={.data.config\.conf}`)
	windowsSpec := func() string {
		return c.kubectl("-n", "kube-system", "get", "daemonset", "kube-proxy-windows", "-o", "jsonpath={.spec.template.spec}")
	}
	origWindows := windowsSpec()
	clusterIP, nodePort := c.echoService()

	// The takeover, without apiServer.host: the chart takes the address
	// from kube-proxy's kubeconfig.
	tr := c.startTraffic("takeover", clusterIP, "10.201.0.12", nodePort)
	out := c.installRelease(chart, "ports.healthz=10356", "ports.metrics=10349",
		"takeover.enabled=true", "takeover.image=localhost/xpc/kubetools:1",
		"takeover.imagePullPolicy=Never", "takeover.timeoutSeconds=300")
	tr.stop()
	if !strings.Contains(out, "10.201.0.1:6443, from kube-proxy's kubeconfig") {
		t.Errorf("NOTES does not say the address came from kube-proxy's kubeconfig:\n%s", out)
	}
	if h := c.kubectl("-n", "kube-system", "get", "configmap", "crossproxy-linux", "-o", "jsonpath={.data.apiserver-host}"); h != "10.201.0.1" {
		t.Errorf("apiserver-host %q, want 10.201.0.1 from kube-proxy's kubeconfig", h)
	}
	keys := c.kubectl("-n", "kube-system", "get", "configmap", "crossproxy-kube-proxy-backup", "-o", `go-template={{range $k, $v := .data}}{{$k}} {{end}}`)
	if strings.TrimSpace(keys) != "configmap.json daemonset-linux.json daemonset-windows.json" {
		t.Errorf("backup keys %q, want kube-proxy's ConfigMap and both DaemonSets", keys)
	}
	if o, _ := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "get", "daemonset/kube-proxy", "daemonset/kube-proxy-windows", "--ignore-not-found", "-o", "name"); strings.TrimSpace(o) != "" {
		t.Errorf("kube-proxy's DaemonSets after the takeover: %s", o)
	}

	// Back to kube-proxy under traffic.
	tr = c.startTraffic("restore", clusterIP, "10.201.0.12", nodePort)
	start := time.Now()
	out = c.helm("upgrade", "crossproxy", chart, "--namespace", "kube-system", "--reuse-values",
		"--set", "takeover.enabled=false", "--set", "takeover.restore=true", "--wait", "--timeout", "8m")
	helmTook := time.Since(start)
	d := c.waitNoTables("restore", 90*time.Second)
	tr.stop()
	t.Logf("FIGURE restore to kube-proxy (helm upgrade takeover.restore=true): %v, crossproxy's tables gone %v later", helmTook.Round(100*time.Millisecond), d.Round(100*time.Millisecond))
	if log, err := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "logs", "job/crossproxy-restore"); err == nil {
		t.Logf("restore Job log:\n%s", log)
	}
	if got := c.kubectl("-n", "kube-system", "get", "configmap", "kube-proxy", "-o", `jsonpath={.data.config\.conf}`); got != origConfig {
		t.Errorf("kube-proxy's config after the restore:\n%s\nwant\n%s", got, origConfig)
	}
	if pods := c.podsOn("kube-system", "k8s-app=kube-proxy"); len(pods["xpc-a"]) != 1 || len(pods["xpc-b"]) != 1 {
		t.Errorf("kube-proxy pods after the restore: %v", pods)
	}
	if got := windowsSpec(); got != origWindows {
		t.Errorf("kube-proxy-windows after the restore:\n%s\nwant\n%s", got, origWindows)
	}
	for _, n := range []string{"xpc-a", "xpc-b"} {
		if tb := tables(t, n); !strings.Contains(tb, "kube-proxy") {
			t.Errorf("%s has no kube-proxy table after the restore:\n%s", n, tb)
		}
	}
	if o, _ := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "get", "configmap/crossproxy-kube-proxy-backup", "daemonset/crossproxy-linux", "--ignore-not-found", "-o", "name"); strings.TrimSpace(o) != "" {
		t.Errorf("left after the restore: %s", o)
	}
	c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "5m")
}

// cleanupContainerMemory reads VmRSS and VmHWM of every running
// `crossproxy cleanup-on-delete` process on this host (the nodes' pods).
func cleanupContainerMemory(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.HasPrefix(string(b), "/usr/local/bin/crossproxy\x00cleanup-on-delete\x00") {
			continue
		}
		st, err := os.ReadFile(filepath.Join(filepath.Dir(f), "status"))
		if err != nil {
			continue
		}
		var fields []string
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "VmRSS:") || strings.HasPrefix(l, "VmHWM:") {
				fields = append(fields, strings.Join(strings.Fields(l), " "))
			}
		}
		out = append(out, filepath.Base(filepath.Dir(f))+": "+strings.Join(fields, ", "))
	}
	if len(out) == 0 {
		t.Error("no cleanup-on-delete process found on the nodes")
	}
	return out
}
