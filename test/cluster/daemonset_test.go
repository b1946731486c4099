//go:build cluster

// The shipped DaemonSet on the real two-node cluster: run through
// `make test-cluster`, which starts the cluster (cluster.sh up), passes the
// built images and manifests in XP_* variables, and tears it all down after.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const ns = "xpc-test"

func env(t *testing.T, k string) string {
	t.Helper()
	v := os.Getenv(k)
	if v == "" {
		t.Fatalf("%s is not set: run this through make test-cluster", k)
	}
	return v
}

// sh runs a command with a deadline and returns its stdout; stderr goes into
// the error.
func sh(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}

type cluster struct {
	t       *testing.T
	script  string
	netecho string // the host-built netecho binary, for requests from a namespace
}

func newCluster(t *testing.T) *cluster {
	script, err := filepath.Abs("cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("XPC_DIR")
	if dir == "" {
		dir = "/var/lib/xpc-cluster"
	}
	c := &cluster{t: t, script: script, netecho: filepath.Join(dir, "images", "netecho")}
	if _, err := os.Stat(c.netecho); err != nil {
		t.Fatalf("no cluster running (%v): start it with test/cluster/cluster.sh up", err)
	}
	return c
}

func (c *cluster) kubectl(args ...string) string {
	c.t.Helper()
	out, err := sh(context.Background(), "bash", append([]string{c.script, "kubectl"}, args...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

func (c *cluster) kubectlIn(stdin string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command("bash", append([]string{c.script, "kubectl"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// get fetches a URL from inside a network namespace of the cluster (xpc-cp:
// outside every node, like a client of a NodePort).
func (c *cluster) get(netns, url string) (string, error) {
	return sh(context.Background(), "nsenter", "--net=/run/netns/"+netns, c.netecho, "get", "-timeout", "3s", url)
}

// execGet fetches a URL from inside a pod, through the kubelet's exec.
func (c *cluster) execGet(pod, url string) (string, error) {
	return sh(context.Background(), "bash", c.script, "kubectl", "-n", ns, "exec", pod, "--", "/netecho", "get", "-timeout", "3s", url)
}

func (c *cluster) eventually(what string, timeout time.Duration, f func() error) {
	c.t.Helper()
	var err error
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(time.Second) {
		if err = f(); err == nil {
			return
		}
	}
	c.t.Fatalf("%s: still failing after %v: %v", what, timeout, err)
}

// podsOn maps node name to the names of the pods matching selector there.
func (c *cluster) podsOn(namespace, selector string) map[string][]string {
	out := c.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o",
		`jsonpath={range .items[*]}{.spec.nodeName} {.metadata.name}{"\n"}{end}`)
	m := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			m[f[0]] = append(m[f[0]], f[1])
		}
	}
	return m
}

// deployCrossproxy applies a rendered manifest as shipped. The first time,
// the RBAC and the ConfigMap go first and the ConfigMap gets the API
// server's address (the documented apiserver-host/port keys: a node without
// a proxy cannot reach the kubernetes Service's ClusterIP), then the file as
// a whole; re-applying keeps those keys, as they are not in the file.
func (c *cluster) deployCrossproxy(manifest string, first bool) {
	if first {
		c.kubectl("apply", "-f", manifest, "-l", "app.kubernetes.io/component!=linux")
		c.kubectl("-n", "kube-system", "patch", "configmap", "crossproxy-linux", "--type", "merge",
			"-p", `{"data":{"apiserver-host":"10.201.0.1","apiserver-port":"6443"}}`)
	}
	c.kubectl("apply", "-f", manifest)
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/crossproxy-linux", "--timeout=4m")
}

const workloads = `
apiVersion: v1
kind: Namespace
metadata: {name: xpc-test}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: echo, namespace: xpc-test}
spec:
  replicas: 4
  selector: {matchLabels: {app: echo}}
  template:
    metadata: {labels: {app: echo}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: echo}}}
      terminationGracePeriodSeconds: 5
      containers:
      - name: echo
        image: localhost/xpc/netecho:1
        imagePullPolicy: Never
        args: [serve]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: echo, namespace: xpc-test}
spec:
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: echo-np, namespace: xpc-test}
spec:
  type: NodePort
  selector: {app: echo}
  ports: [{port: 80, targetPort: 8080}]
`

// clientPod is a netecho pod pinned to a node; args is its command line.
func clientPod(name, node string, args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = strconv.Quote(a)
	}
	return fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: xpc-test, labels: {app: client}}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 5
  containers:
  - name: c
    image: localhost/xpc/netecho:1
    imagePullPolicy: Never
    args: [%s]
`, name, node, strings.Join(q, ", "))
}

var clientCounts = regexp.MustCompile(`netecho-client ok=(\d+) failed=(\d+)`)

// counts reads the last ok/failed line a netecho client printed.
func counts(log string) (ok, failed int, found bool) {
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		if m := clientCounts.FindStringSubmatch(sc.Text()); m != nil {
			ok, _ = strconv.Atoi(m[1])
			failed, _ = strconv.Atoi(m[2])
			found = true
		}
	}
	return ok, failed, found
}

func TestDaemonSet(t *testing.T) {
	c := newCluster(t)
	manifest := env(t, "XP_MANIFEST")
	ref := env(t, "XP_IMAGE_REF")
	upManifest := env(t, "XP_UPGRADE_MANIFEST")
	upRef := env(t, "XP_UPGRADE_REF")
	if _, err := sh(context.Background(), "bash", c.script, "load", env(t, "XP_IMAGE_ARCHIVE")); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	c.deployCrossproxy(manifest, true)
	t.Logf("FIGURE daemonset rollout (apply to both pods Ready): %v", time.Since(start).Round(100*time.Millisecond))
	pods := c.podsOn("kube-system", "app.kubernetes.io/name=crossproxy")
	if len(pods["xpc-a"]) != 1 || len(pods["xpc-b"]) != 1 {
		t.Fatalf("crossproxy pods by node: %v, want one on each", pods)
	}
	if img := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=crossproxy",
		"-o", "jsonpath={.items[*].spec.containers[0].image}"); strings.Fields(img)[0] != ref {
		t.Fatalf("crossproxy pods run %q, want %s", img, ref)
	}
	// The probes' endpoint, on each node's address, as the kubelet sees it.
	for _, ip := range []string{"10.201.0.11", "10.201.0.12"} {
		if out, err := c.get("xpc-cp", "http://"+ip+":10256/healthz"); err != nil {
			t.Errorf("healthz on %s: %v", ip, err)
		} else {
			t.Logf("healthz %s: %s", ip, strings.TrimSpace(out))
		}
	}

	c.kubectlIn(workloads, "apply", "-f", "-")
	c.kubectlIn(clientPod("client-a", "xpc-a", "serve")+"---"+clientPod("client-b", "xpc-b", "serve"), "apply", "-f", "-")
	c.kubectl("-n", ns, "rollout", "status", "deployment/echo", "--timeout=3m")
	c.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/client-a", "pod/client-b", "--timeout=2m")
	echo := c.podsOn(ns, "app=echo")
	if len(echo["xpc-a"]) != 2 || len(echo["xpc-b"]) != 2 {
		t.Fatalf("echo pods by node %v, want two on each", echo)
	}
	clusterIP := strings.TrimSpace(c.kubectl("-n", ns, "get", "svc", "echo", "-o", "jsonpath={.spec.clusterIP}"))
	nodePort := strings.TrimSpace(c.kubectl("-n", ns, "get", "svc", "echo-np", "-o", "jsonpath={.spec.ports[0].nodePort}"))

	// ClusterIP from a pod on each node reaches backends on both nodes.
	backendNode := map[string]string{}
	for node, names := range echo {
		for _, n := range names {
			backendNode[n] = node
		}
	}
	for _, client := range []string{"client-a", "client-b"} {
		seen := map[string]bool{}
		c.eventually(client+" -> ClusterIP "+clusterIP+" reaches both nodes", 60*time.Second, func() error {
			out, err := c.execGet(client, "http://"+clusterIP+"/")
			if err != nil {
				return err
			}
			f := strings.Fields(out)
			node, ok := backendNode[f[0]]
			if !ok {
				return fmt.Errorf("answer %q is from no echo pod", out)
			}
			seen[node] = true
			if !seen["xpc-a"] || !seen["xpc-b"] {
				return fmt.Errorf("backends seen on %v so far", seen)
			}
			return nil
		})
	}
	// NodePort on each node's address, from outside the nodes and from a pod.
	for _, ip := range []string{"10.201.0.11", "10.201.0.12"} {
		url := "http://" + ip + ":" + nodePort + "/"
		c.eventually("NodePort "+url+" from xpc-cp", 30*time.Second, func() error { _, err := c.get("xpc-cp", url); return err })
		c.eventually("NodePort "+url+" from client-a", 30*time.Second, func() error { _, err := c.execGet("client-a", url); return err })
	}

	// Rolling upgrade under traffic: a client pod on each node through the
	// ClusterIP and one in xpc-cp through a NodePort, each opening a new
	// connection every 50 ms.
	c.kubectlIn(clientPod("traffic-a", "xpc-a", "client", "-interval", "50ms", "http://"+clusterIP+"/")+"---"+
		clientPod("traffic-b", "xpc-b", "client", "-interval", "50ms", "http://"+clusterIP+"/"), "apply", "-f", "-")
	c.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/traffic-a", "pod/traffic-b", "--timeout=2m")
	npClient := exec.Command("nsenter", "--net=/run/netns/xpc-cp", c.netecho, "client", "-interval", "50ms",
		"http://10.201.0.12:"+nodePort+"/")
	var npOut bytes.Buffer
	npClient.Stdout, npClient.Stderr = &npOut, &npOut
	if err := npClient.Start(); err != nil {
		t.Fatal(err)
	}
	npDone := false
	stopNP := func() {
		if !npDone {
			npDone = true
			_ = npClient.Process.Signal(os.Interrupt)
			_ = npClient.Wait()
		}
	}
	defer stopNP()
	time.Sleep(3 * time.Second)
	if _, err := sh(context.Background(), "bash", c.script, "load", env(t, "XP_UPGRADE_ARCHIVE")); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	c.deployCrossproxy(upManifest, false)
	t.Logf("FIGURE rolling upgrade (apply to both new pods Ready): %v", time.Since(start).Round(100*time.Millisecond))
	time.Sleep(3 * time.Second)
	stopNP()
	if img := c.kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=crossproxy",
		"-o", "jsonpath={.items[*].spec.containers[0].image}"); strings.Join(strings.Fields(img), " ") != upRef+" "+upRef {
		t.Errorf("after the upgrade crossproxy pods run %q, want %s on both", img, upRef)
	}
	total := 0
	for _, p := range []string{"traffic-a", "traffic-b"} {
		log := c.kubectl("-n", ns, "logs", p)
		ok, failed, found := counts(log)
		if !found || ok == 0 {
			t.Errorf("%s: no successful requests counted:\n%s", p, log)
		}
		t.Logf("FIGURE upgrade traffic %s (pod -> ClusterIP): ok=%d failed=%d", p, ok, failed)
		total += failed
		if failed > 0 {
			t.Logf("%s failures:\n%s", p, log)
		}
	}
	ok, failed, found := counts(npOut.String())
	if !found || ok == 0 {
		t.Errorf("NodePort client: no successful requests:\n%s", npOut.String())
	}
	t.Logf("FIGURE upgrade traffic xpc-cp -> NodePort 10.201.0.12:%s: ok=%d failed=%d", nodePort, ok, failed)
	total += failed
	t.Logf("FIGURE upgrade failed connections, total: %d", total)
	if total != 0 {
		t.Errorf("%d connections failed during the rolling upgrade (target 0)", total)
	}
	// The Service still answers on both nodes after the upgrade.
	for _, client := range []string{"client-a", "client-b"} {
		if _, err := c.execGet(client, "http://"+clusterIP+"/"); err != nil {
			t.Errorf("after upgrade, %s -> ClusterIP: %v", client, err)
		}
	}
}
