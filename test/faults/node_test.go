//go:build faults && linux

package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/test/harness"
	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// The two proxies the suite compares.
const (
	crossproxy = "crossproxy"
	kubeProxy  = "kube-proxy"
)

// Where a proxy serves inside the node namespace: kube-proxy's default
// ports, which crossproxy shares.
const (
	healthzAddr = "127.0.0.1:10256"
	metricsAddr = "127.0.0.1:10249"
)

// node is one test's world: an API server, a lab node registered as a Node
// object, and the forwarder through which the node reaches the API server.
type node struct {
	t     testing.TB
	api   *harness.Server
	lab   *lab
	admin kubernetes.Interface
	name  string
	ctx   context.Context
	// fwdPort is the port of the node loopback's forwarder to the API
	// server at upstream; fwdLn and fwdOpen are its listener and
	// connections.
	fwdPort    int
	upstream   string
	fwdMu      sync.Mutex
	fwdLn      net.Listener
	fwdOpen    []net.Conn
	kubeconfig string
	client     *http.Client
	// env is added to the proxies' environment (GOMEMLIMIT, for one).
	env []string
}

func newNode(t testing.TB, opts harness.Options) *node {
	t.Helper()
	n := &node{t: t, api: harness.New(t, opts), lab: newLab(t), ctx: context.Background()}
	n.admin = kubernetes.NewForConfigOrDie(n.api.AdminConfig())
	n.name = "xpf-node-" + n.lab.ID
	n.client = httpClientIn(n.lab.Node)
	no, err := n.admin.CoreV1().Nodes().Create(n.ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create node: %v", err)
	}
	no.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeAddr}}
	if _, err := n.admin.CoreV1().Nodes().UpdateStatus(n.ctx, no, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("node status: %v", err)
	}
	n.lab.servePods(t, 8080)
	n.forward()
	return n
}

// forward starts the node loopback's forwarder to the API server and writes
// the admin kubeconfig pointing at it: both proxies run inside the node
// namespace (kube-proxy has no --netns), where the API server's host
// loopback address does not exist. The forwarder stands for the node's
// route to the control plane: a rule in the node namespace that drops its
// packets (cut) cuts the node off as a network partition does, and closing
// it (refuse) is a control plane that refuses connections, as a restarting
// API server's host does.
func (n *node) forward() {
	t := n.t
	u, err := url.Parse(n.api.AdminConfig().Host)
	if err != nil {
		t.Fatal(err)
	}
	n.upstream = u.Host
	n.listen(0)
	t.Cleanup(n.refuse)
	kc, err := n.api.Kubeconfig(harness.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.ReplaceAll(string(data), "://"+u.Host, fmt.Sprintf("://127.0.0.1:%d", n.fwdPort))
	if moved == string(data) {
		t.Fatalf("kubeconfig %s does not name the API server %s", kc, u.Host)
	}
	n.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig-node")
	if err := os.WriteFile(n.kubeconfig, []byte(moved), 0o600); err != nil {
		t.Fatal(err)
	}
}

// listen starts forwarding on port (0: any) of the node's loopback.
func (n *node) listen(port int) {
	var ln net.Listener
	err := netnsrun.Do(n.lab.Node, func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		return err
	})
	if err != nil {
		n.t.Fatalf("listen in node namespace: %v", err)
	}
	n.fwdPort = ln.Addr().(*net.TCPAddr).Port
	n.fwdMu.Lock()
	n.fwdLn = ln
	n.fwdMu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", n.upstream)
			if err != nil {
				c.Close()
				continue
			}
			n.fwdMu.Lock()
			n.fwdOpen = append(n.fwdOpen, c, up)
			n.fwdMu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// refuse closes the forwarder and every connection through it: the node's
// connections to the API server end and new ones are refused.
func (n *node) refuse() {
	n.fwdMu.Lock()
	defer n.fwdMu.Unlock()
	if n.fwdLn != nil {
		n.fwdLn.Close()
		n.fwdLn = nil
	}
	for _, c := range n.fwdOpen {
		c.Close()
	}
	n.fwdOpen = nil
}

// accept ends refuse: the forwarder listens on its port again.
func (n *node) accept() { n.listen(n.fwdPort) }

// cut drops every packet between the node and the API server (both
// directions, on the node's loopback where the forwarder listens), as a
// partition does: open connections see no reset, only silence.
func (n *node) cut() {
	n.t.Helper()
	rules := fmt.Sprintf("table inet xpf-cut {\n chain out {\n  type filter hook output priority -400; policy accept;\n"+
		"  tcp dport %d drop\n  tcp sport %d drop\n }\n}\n", n.fwdPort, n.fwdPort)
	cmd := exec.Command("ip", "netns", "exec", n.lab.Node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("cut the node off: %v\n%s", err, out)
	}
}

// heal ends cut.
func (n *node) heal() { n.lab.nft(n.t, "delete", "table", "inet", "xpf-cut") }

// service creates a Service (port 80 → 8080) with mutations applied.
func (n *node) service(name string, mutate ...func(*v1.Service)) *v1.Service {
	n.t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}
	for _, m := range mutate {
		m(svc)
	}
	out, err := n.admin.CoreV1().Services("default").Create(n.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		n.t.Fatalf("create service %s: %v", name, err)
	}
	return out
}

func nodePort(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort }

func clusterAddr(svc *v1.Service) string { return net.JoinHostPort(svc.Spec.ClusterIP, "80") }

func nodePortAddr(svc *v1.Service) string {
	return net.JoinHostPort(nodeAddr, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
}

// slice builds a ready EndpointSlice of service on this node, port 8080.
func (n *node) slice(service, name string, addrs ...string) *discovery.EndpointSlice {
	port, proto := int32(8080), v1.ProtocolTCP
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels: map[string]string{discovery.LabelServiceName: service}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		ready, nodeName := true, n.name
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &nodeName})
	}
	return s
}

func (n *node) createSlice(s *discovery.EndpointSlice) {
	n.t.Helper()
	if _, err := n.admin.DiscoveryV1().EndpointSlices("default").Create(n.ctx, s, metav1.CreateOptions{}); err != nil {
		n.t.Fatalf("create endpointslice %s: %v", s.Name, err)
	}
}

// setEndpoints replaces the endpoints of slice name with addrs.
func (n *node) setEndpoints(service, name string, addrs ...string) {
	n.t.Helper()
	cur, err := n.admin.DiscoveryV1().EndpointSlices("default").Get(n.ctx, name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatalf("get endpointslice %s: %v", name, err)
	}
	cur.Endpoints = n.slice(service, name, addrs...).Endpoints
	if _, err := n.admin.DiscoveryV1().EndpointSlices("default").Update(n.ctx, cur, metav1.UpdateOptions{}); err != nil {
		n.t.Fatalf("update endpointslice %s: %v", name, err)
	}
}

// proc is a proxy process running in the node namespace.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	n    *node
}

// start runs the named proxy inside the node namespace against the API
// server, with the deployment defaults of both (--min-sync-period 1 s,
// kube-proxy's syncPeriod 30 s) and its health and metrics on the node's
// loopback; extra are flags of that proxy.
func (n *node) start(which string, extra ...string) *proc {
	n.t.Helper()
	var args []string
	switch which {
	case crossproxy:
		args = append([]string{"--net=" + n.lab.NetNS(), binary, "run",
			"--kubeconfig", n.kubeconfig,
			"--hostname-override", n.name,
			"--ip-families", "IPv4",
			"--healthz-bind-address", healthzAddr,
			"--metrics-bind-address", metricsAddr,
		}, extra...)
	case kubeProxy:
		path := harness.KubeProxyBinary()
		if path == "" {
			n.t.Skip("no kube-proxy binary in ${CROSSPROXY_CLUSTER_BIN_DIR:-~/.cache/crossproxy/cluster-bin}: run `make cluster-bin`")
		}
		cfg := harness.KubeProxyConfig(n.name, n.kubeconfig, healthzAddr, metricsAddr, "1s")
		cfgPath := filepath.Join(n.t.TempDir(), "kube-proxy.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			n.t.Fatal(err)
		}
		// Single-stack IPv4, as crossproxy's --ip-families IPv4, instead
		// of a second, IPv6 proxier (test/cluster/kubeproxy.sh does the same).
		run(n.t, "ip", "netns", "exec", n.lab.Node, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
		args = append([]string{"--net=" + n.lab.NetNS(), path, "--config", cfgPath, "--v=2"}, extra...)
	default:
		n.t.Fatalf("unknown proxy %q", which)
	}
	logPath := filepath.Join(n.api.Dir, fmt.Sprintf("%s-%d.log", which, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		n.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", args...)
	cmd.Env = append(os.Environ(), n.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start %s: %v", which, err)
	}
	p := &proc{name: which, cmd: cmd, log: logPath, done: make(chan struct{}), n: n}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	n.t.Cleanup(func() {
		p.stop()
		if n.t.Failed() {
			n.t.Logf("%s log %s (tail):\n%s", which, logPath, tail(p.logText(), 6000))
		}
	})
	return p
}

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *proc) stop() { harness.Terminate(p.cmd.Process, p.done) }

func (p *proc) logText() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

// alive fails the test when the proxy has exited.
func (p *proc) alive(t testing.TB, when string) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited %s: %v\n%s", p.name, when, p.err, tail(p.logText(), 3000))
	default:
	}
}

// cpu is the CPU time the proxy and the children it waited for (kube-proxy's
// nft runs) have used.
func (p *proc) cpu(t testing.TB) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s stat: %v", p.name, err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ 100
}

// metric sums the samples of series (any labels) on the proxy's /metrics;
// ok is false when the series is absent or /metrics did not answer.
func (p *proc) metric(series string) (float64, bool) {
	resp, err := p.n.client.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	found := false
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, " ")
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			name = line[:i]
			_, rest, ok = strings.Cut(line[i:], "} ")
		}
		if !ok || name != series {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// waitMetric waits until series is at least want.
func (p *proc) waitMetric(t testing.TB, series string, want float64, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		v, _ := p.metric(series)
		if v >= want {
			return
		}
		p.alive(t, "waiting for "+series)
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v after %v, want >= %v\n%s", p.name, series, v, limit, want, tail(p.logText(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthz is the proxy's /healthz status code and body.
func (p *proc) healthz() (int, string) {
	resp, err := p.n.client.Get("http://" + healthzAddr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// httpClientIn is an HTTP client whose connections start in namespace ns.
func httpClientIn(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netnsrun.Do(ns, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// Full syncs, as both proxies count them.
const fullSyncs = "kubeproxy_sync_full_proxy_rules_duration_seconds_count"
