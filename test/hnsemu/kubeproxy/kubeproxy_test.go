//go:build hnsemu

// Package kubeproxy runs the real kube-proxy.exe (k8s.io/kubernetes v1.37.2
// cmd/kube-proxy, GOOS=windows, unmodified, winkernel mode) and the release
// crossproxy.exe under Wine, each on its own emulated Windows node of the HNS
// emulator (test/hnsemu), against one real kube-apiserver, and compares what
// each programs into HNS, field by field: issue 49's binary-level oracle.
// kube-proxy.exe is built by build.sh into the cache; the test skips naming
// the command when it is not there.
package kubeproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/crossproxy/crossproxy/test/harness"
	"github.com/crossproxy/crossproxy/test/hnsemu"
)

// kubeProxyExe is the cached kube-proxy.exe (build.sh), or a skip naming how
// to build it: the build takes minutes cold, so it is not part of the test.
func kubeProxyExe(t *testing.T) string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	exe := filepath.Join(cache, "crossproxy", "kube-proxy-windows", "kube-proxy.exe")
	if _, err := os.Stat(exe); err != nil {
		t.Skipf("no %s: run bash test/hnsemu/kubeproxy/build.sh first (%v)", exe, err)
	}
	return exe
}

func winPath(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

// emulator is what both tests start from: the repository's root, the
// emulator's Wine prefix (its wineserver ended when the test ends) and a
// running emulator on free ports.
func emulator(t *testing.T) (root, prefix string, srv *hnsemu.Server) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	prefix = winePrefix(t, root)
	t.Cleanup(func() {
		k := exec.Command("wineserver", "-k")
		k.Env = append(os.Environ(), "WINEPREFIX="+prefix)
		_ = k.Run()
	})
	srv, err = hnsemu.Start("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return root, prefix, srv
}

// winePrefix builds the DLL stand-ins (cached) and returns the emulator's prefix.
func winePrefix(t *testing.T, root string) string {
	out, err := exec.Command("bash", filepath.Join(root, "test/hnsemu/dll/build.sh")).Output()
	if err != nil {
		t.Fatalf("dll/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// node is one emulated Windows node running one proxy.
type node struct {
	name, network string
	cmd           *exec.Cmd
	logPath       string
	exited        chan struct{}
	err           error
}

// logText is what the proxy wrote so far.
func (n *node) logText() string {
	b, _ := os.ReadFile(n.logPath)
	return string(b)
}

// freePort is a TCP port free on 127.0.0.1 now (Wine's processes bind on
// the host's stack).
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

func startWine(t *testing.T, prefix, dllAddr, nodeName, exe string, env []string, args ...string) *node {
	cmd := exec.Command("wine", append([]string{exe}, args...)...)
	cmd.Env = append(os.Environ(), "WINEPREFIX="+prefix, "WINEDEBUG=-all", "WINEARCH=win64",
		"HNSEMU_ADDR="+dllAddr, "HNSEMU_NODE="+nodeName)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A file, not a pipe: a Windows process lives on in wineserver's care
	// after the wine launcher is killed, and would hold a pipe (and Wait) open.
	logf, err := os.CreateTemp(t.TempDir(), nodeName+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{name: nodeName, cmd: cmd, logPath: logf.Name(), exited: make(chan struct{})}
	go func() {
		n.err = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		k := exec.Command("wineserver", "-k")
		k.Env = cmd.Env
		_ = k.Run()
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			t.Logf("%s: the wine launcher did not exit within 10 s of wineserver -k", nodeName)
		}
		logf.Close()
	})
	return n
}

// TestKubeProxyOnEmulatedHNS is the binary-level oracle on an L2Bridge node
// (flannel host-gw's layout, Windows Server 2022): kube-proxy.exe and
// crossproxy.exe, each on its own emulated HNS node with the same CNI
// objects, both as the Kubernetes node win-1 against one kube-apiserver,
// program ClusterIP, NodePort and LoadBalancer (externalTrafficPolicy Local)
// Services with two local pods and one on a Linux node; the load balancers
// and remote endpoints each made are compared field by field.
func TestKubeProxyOnEmulatedHNS(t *testing.T) {
	for _, c := range []struct {
		name, layout, network string
		overlay               bool
	}{
		{"l2bridge", "flannel-host-gw", "cbr0", false},
		{"overlay", "flannel-vxlan", "flannel.4096", true},
	} {
		t.Run(c.name, func(t *testing.T) { oracle(t, c.layout, c.network, c.overlay) })
	}
}

// oracle runs both proxies on two emulated nodes of one layout and
// compares what each programmed. On overlay both get the source VIP
// 10.244.1.2 (kube-proxy needs it given; crossproxy takes it the same way
// here, host-local is not run), and the node's address is one of the
// host's, whose MAC Wine shows both proxies for the source VIP endpoint.
func oracle(t *testing.T, layout, network string, overlay bool) {
	exe := kubeProxyExe(t)
	root, prefix, srv := emulator(t)
	// pacedNode runs crossproxy.exe with --min-sync-period 0: syncs paced
	// by their cost (issue 51), for the endpoint-change latency only.
	const kpNode, xpNode, pacedNode = "hns-kube-proxy", "hns-crossproxy", "hns-crossproxy-paced"
	for _, n := range []string{kpNode, xpNode, pacedNode} {
		if _, err := srv.SetProfile(n, "ws2022", false); err != nil {
			t.Fatal(err)
		}
		req := hnsemu.CNINetwork{Node: n, Layout: layout, Name: network, Subnet: "10.244.1.0/24"}
		if overlay {
			req.RemoteSubnets = []hnsemu.RemoteSubnet{{Prefix: "10.244.2.0/24", ProviderAddress: "192.168.0.12"}}
		}
		if _, err := srv.CreateCNINetwork(req); err != nil {
			t.Fatal(err)
		}
		for _, ip := range []string{"10.244.1.5", "10.244.1.6"} {
			ep := hnsemu.CNIEndpoint{Node: n, Network: network, Name: "pod-" + ip, IP: ip}
			if overlay {
				a := net.ParseIP(ip).To4()
				ep.MAC = fmt.Sprintf("0E-2A-%02x-%02x-%02x-%02x", a[0], a[1], a[2], a[3]) // flannel's overlay pods
			}
			if _, err := srv.CreateCNIEndpoint(ep); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodeIP := "192.168.0.11"
	var kpArgs, xpArgs []string
	if overlay {
		nodeIP = hostAddress(t)
		kpArgs = []string{"--source-vip=10.244.1.2"}
		xpArgs = []string{"--source-vip", "10.244.1.2"}
	}

	api := harness.New(t, harness.Options{Logf: t.Logf})
	client := kubernetes.NewForConfigOrDie(api.AdminConfig())
	ctx := context.Background()
	mustCreate(t, ctx, client, nodeIP)
	kubeconfig, err := api.Kubeconfig(harness.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	xp := buildRelease(t, root)
	// crossproxy keeps its ledger in the prefix: one from an earlier run
	// names another emulator's load balancers.
	_ = os.RemoveAll(filepath.Join(prefix, "drive_c/ProgramData/crossproxy"))
	kp := startWine(t, prefix, srv.DLLAddr, kpNode, exe, []string{"KUBE_NETWORK=" + network},
		append([]string{"--kubeconfig=" + winPath(kubeconfig), "--hostname-override=" + winNode, "--proxy-mode=kernelspace",
			"--healthz-bind-address=127.0.0.1:" + freePort(t), "--metrics-bind-address=127.0.0.1:" + freePort(t), "--v=2"}, kpArgs...)...)
	cp := startWine(t, prefix, srv.DLLAddr, xpNode, xp, nil,
		append([]string{"run", "--kubeconfig", winPath(kubeconfig), "--node", winNode, "--network-name", network, "--ip-families", "IPv4",
			"--healthz-bind-address=127.0.0.1:" + freePort(t), "--metrics-bind-address=127.0.0.1:" + freePort(t)}, xpArgs...)...)
	paced := startWine(t, prefix, srv.DLLAddr, pacedNode, xp, nil,
		append([]string{"run", "--kubeconfig", winPath(kubeconfig), "--node", winNode, "--network-name", network, "--ip-families", "IPv4",
			"--min-sync-period", "0", "--healthz-bind-address=127.0.0.1:" + freePort(t), "--metrics-bind-address=127.0.0.1:" + freePort(t)}, xpArgs...)...)
	want := 6 // ClusterIP x3, NodePort x2, the ingress IP
	for _, p := range []*node{kp, cp, paced} {
		waitLBs(t, srv, p, want)
	}
	time.Sleep(3 * time.Second) // a sync more for either, should one come
	kpState, xpState := oracleView(srv.State(kpNode)), oracleView(srv.State(xpNode))
	t.Logf("kube-proxy.exe:\n%s\ncrossproxy.exe:\n%s", strings.Join(kpState, "\n"), strings.Join(xpState, "\n"))
	if d := diff(kpState, xpState); d != "" {
		t.Fatalf("kube-proxy.exe and crossproxy.exe programmed different HNS state (- kube-proxy, + crossproxy):\n%s", d)
	}

	// An endpoint change: the pod 10.244.1.6 leaves web's EndpointSlice.
	// The time from the API write to the change in each emulated HNS (the
	// web ClusterIP load balancer's endpoints), and the same state after.
	for i := range 5 {
		eps := []string{"10.244.1.5", "10.244.1.6", "10.244.2.7"}
		if i%2 == 0 {
			eps = []string{"10.244.1.5", "10.244.2.7"}
		}
		vip := clusterIP(t, ctx, client, "web")
		start := setSlice(t, ctx, client, "web", eps)
		lat := waitEndpoints(t, srv, []string{kpNode, xpNode, pacedNode}, vip, eps, start)
		t.Logf("endpoint change %d (web -> %v): in HNS after %s (kube-proxy.exe), %s (crossproxy.exe), %s (crossproxy.exe --min-sync-period 0)",
			i+1, eps, lat[0].Round(time.Millisecond), lat[1].Round(time.Millisecond), lat[2].Round(time.Millisecond))
		time.Sleep(time.Duration(i%3) * 700 * time.Millisecond) // changes at varied distances from the last sync
	}
	if overlay {
		// A node joins: flannel adds its RemoteSubnetRoute on each node, a
		// pod on it joins web; both proxies must give its remote endpoint
		// the new node's provider address.
		for _, n := range []string{kpNode, xpNode, pacedNode} {
			if err := srv.AddRemoteSubnet(n, network, hnsemu.RemoteSubnet{Prefix: "10.244.3.0/24", ProviderAddress: "192.168.0.13"}); err != nil {
				t.Fatal(err)
			}
		}
		eps := []string{"10.244.1.5", "10.244.2.7", "10.244.3.9"}
		vip := clusterIP(t, ctx, client, "web")
		lat := waitEndpoints(t, srv, []string{kpNode, xpNode, pacedNode}, vip, eps, setSlice(t, ctx, client, "web", eps))
		t.Logf("a pod on a node that joined: in HNS after %s (kube-proxy.exe), %s (crossproxy.exe), %s (paced)", lat[0].Round(time.Millisecond), lat[1].Round(time.Millisecond), lat[2].Round(time.Millisecond))
		for _, n := range []string{kpNode, xpNode} {
			if got := remotePA(srv.State(n), "10.244.3.9"); got != "192.168.0.13" {
				t.Errorf("%s: the joining node's pod has provider address %q, want 192.168.0.13", n, got)
			}
		}
	}
	time.Sleep(3 * time.Second)
	if d := diff(oracleView(srv.State(kpNode)), oracleView(srv.State(xpNode))); d != "" {
		t.Fatalf("after the endpoint changes the proxies' HNS state differs (- kube-proxy, + crossproxy):\n%s", d)
	}
}

// remotePA is the provider address of the remote endpoint at ip ("" when none).
func remotePA(st hnsemu.State, ip string) string {
	for _, ep := range st.Endpoints {
		if len(ep.IpConfigurations) == 0 || ep.IpConfigurations[0].IpAddress != ip || ep.Flags&1 == 0 {
			continue
		}
		for _, p := range ep.Policies {
			var s struct{ ProviderAddress string }
			if p.Type == "ProviderAddress" && json.Unmarshal(p.Settings, &s) == nil {
				return s.ProviderAddress
			}
		}
	}
	return ""
}

// setSlice rewrites the Service's EndpointSlice with ready endpoints at eps
// (pods of win-1 in 10.244.1.0/24, else of lin-1) and returns when it wrote.
func setSlice(t *testing.T, ctx context.Context, c kubernetes.Interface, svc string, eps []string) time.Time {
	s, err := c.DiscoveryV1().EndpointSlices("default").Get(ctx, svc+"-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints = nil
	for _, ip := range eps {
		node := "lin-1"
		switch {
		case strings.HasPrefix(ip, "10.244.1."):
			node = winNode
		case strings.HasPrefix(ip, "10.244.3."):
			node = "lin-2"
		}
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(node), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}})
	}
	start := time.Now()
	if _, err := c.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return start
}

func clusterIP(t *testing.T, ctx context.Context, c kubernetes.Interface, svc string) string {
	s, err := c.CoreV1().Services("default").Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.ClusterIP
}

// waitEndpoints polls the emulated nodes together until the load balancer
// on vip holds exactly eps on each, and returns each one's time since start.
func waitEndpoints(t *testing.T, srv *hnsemu.Server, nodes []string, vip string, eps []string, start time.Time) []time.Duration {
	out := make([]time.Duration, len(nodes))
	for time.Since(start) < 30*time.Second {
		done := true
		for i, n := range nodes {
			if out[i] == 0 {
				if holds(srv, n, vip, eps) {
					out[i] = time.Since(start)
				} else {
					done = false
				}
			}
		}
		if done {
			return out
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("the load balancers on %s do not hold %v 30 s after the change (%v: %v)", vip, eps, nodes, out)
	return nil
}

// holds reports whether the node's load balancer on vip has exactly eps.
func holds(srv *hnsemu.Server, node, vip string, eps []string) bool {
	want := fmt.Sprint(eps)
	{
		st := srv.State(node)
		addr := map[string]string{}
		for _, ep := range st.Endpoints {
			if len(ep.IpConfigurations) > 0 {
				addr[strings.ToLower(ep.ID)] = ep.IpConfigurations[0].IpAddress
			}
		}
		for _, lb := range st.LoadBalancers {
			if len(lb.FrontendVIPs) != 1 || lb.FrontendVIPs[0] != vip {
				continue
			}
			var got []string
			for _, id := range lb.HostComputeEndpoints {
				got = append(got, addr[strings.ToLower(id)])
			}
			sort.Strings(got)
			if fmt.Sprint(got) == want {
				return true
			}
		}
	}
	return false
}

const winNode = "win-1"

// waitLBs waits until the proxy's emulated node holds n load balancers.
func waitLBs(t *testing.T, srv *hnsemu.Server, p *node, n int) {
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		if len(srv.State(p.name).LoadBalancers) >= n {
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s: the proxy exited: %v\nits log:\n%s", p.name, p.err, tail(p.logText(), 6000))
		default:
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("%s: %d load balancers after 120 s, want %d; HNS calls %v\nits log:\n%s", p.name, len(srv.State(p.name).LoadBalancers), n,
		srv.State(p.name).Calls, tail(p.logText(), 6000))
}

// oracleView is what the oracle compares: each load balancer by frontend,
// with ports, flags, distribution, source VIP and its endpoints' addresses;
// each remote endpoint with its provider address. Ids, names and MACs
// differ by design (each proxy names its own objects).
func oracleView(st hnsemu.State) []string {
	addr := map[string]string{}
	var out []string
	for _, ep := range st.Endpoints {
		ip := ""
		if len(ep.IpConfigurations) > 0 {
			ip = ep.IpConfigurations[0].IpAddress
		}
		addr[strings.ToLower(ep.ID)] = ip
		if ep.Flags&1 != 0 { // remote
			out = append(out, fmt.Sprintf("remote endpoint %s %s", ip, string(policyJSON(ep.Policies))))
		}
	}
	for _, lb := range st.LoadBalancers {
		var eps []string
		for _, id := range lb.HostComputeEndpoints {
			eps = append(eps, addr[strings.ToLower(id)])
		}
		sort.Strings(eps)
		vips := append([]string(nil), lb.FrontendVIPs...)
		sort.Strings(vips)
		for _, pm := range lb.PortMappings {
			out = append(out, fmt.Sprintf("lb %v proto=%d %d->%d pmflags=%d dist=%d lbflags=%d src=%q eps=%v",
				vips, pm.Protocol, pm.ExternalPort, pm.InternalPort, pm.Flags, pm.DistributionType, lb.Flags, lb.SourceVIP, eps))
		}
	}
	sort.Strings(out)
	return out
}

func policyJSON(p any) []byte {
	b, _ := json.Marshal(p)
	return b
}

// diff lists the lines only one side has.
func diff(a, b []string) string {
	in := func(s []string, x string) bool { return slices.Contains(s, x) }
	var out []string
	for _, x := range a {
		if !in(b, x) {
			out = append(out, "- "+x)
		}
	}
	for _, x := range b {
		if !in(a, x) {
			out = append(out, "+ "+x)
		}
	}
	return strings.Join(out, "\n")
}

// buildRelease builds crossproxy.exe as the release does (no fakehns tag).
func buildRelease(t *testing.T, root string) string {
	dir := t.TempDir()
	exe := filepath.Join(dir, "crossproxy.exe")
	start := time.Now()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", exe, "./cmd/crossproxy")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release build: %v\n%s", err, out)
	}
	t.Logf("crossproxy.exe built as the release builds it in %s", time.Since(start).Round(time.Millisecond))
	return exe
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func mustCreate(t *testing.T, ctx context.Context, c kubernetes.Interface, nodeIP string) {
	t.Helper()
	for _, n := range []*v1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: winNode, Labels: map[string]string{v1.LabelOSStable: "windows"}},
			Spec:   v1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeIP}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lin-1", Labels: map[string]string{v1.LabelOSStable: "linux"}},
			Spec:   v1.NodeSpec{PodCIDR: "10.244.2.0/24", PodCIDRs: []string{"10.244.2.0/24"}},
			Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.168.0.12"}}}},
	} {
		created, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = n.Status
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	port := func(np int32) []v1.ServicePort {
		return []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: np}}
	}
	svcs := []*v1.Service{
		{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, Ports: port(0)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "default"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeNodePort, Ports: port(30080),
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyCluster}},
		{ObjectMeta: metav1.ObjectMeta{Name: "lb", Namespace: "default"}, Spec: v1.ServiceSpec{Type: v1.ServiceTypeLoadBalancer, Ports: port(30090),
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal}},
	}
	for _, svc := range svcs {
		created, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
			created.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "172.16.0.10"}}
			if _, err := c.CoreV1().Services("default").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: svc.Name + "-1", Namespace: "default", Labels: map[string]string{discovery.LabelServiceName: svc.Name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
			Endpoints: []discovery.Endpoint{
				{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To(winNode), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{"10.244.1.6"}, NodeName: ptr.To(winNode), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{"10.244.2.7"}, NodeName: ptr.To("lin-1"), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
			}}
		if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Logf("Service default/%s ClusterIP %s", svc.Name, created.Spec.ClusterIP)
	}
}

// hostAddress is hnsemu.HostAddress's address, or a skip.
func hostAddress(t *testing.T) string {
	ip, _, ok := hnsemu.HostAddress()
	if !ok {
		t.Skip("no host interface with an IPv4 address and a MAC for the overlay node's address")
	}
	return ip
}

// TestTakeoverAndBack plays installer/README.md's move from kube-proxy.exe
// to crossproxy.exe on one Windows node and back, with the release binaries
// on one emulated HNS (L2Bridge, Windows Server 2022). kube-proxy.exe
// programs the node; crossproxy.exe starts beside it and HNS refuses it
// every frontend; kube-proxy.exe stops and its load balancers are removed
// as step 4 says (hns.psm1's Get-HnsPolicyList | Remove-HnsPolicyList: every
// load balancer; kube-proxy v1.37's --cleanup "is not implemented on
// Windows"), and crossproxy takes every frontend by itself. The way back:
// kube-proxy.exe starts again (it deletes every load balancer at start,
// crossproxy's included), crossproxy stops and `crossproxy cleanup` runs,
// and kube-proxy.exe ends holding what it held before. Nothing the CNI made
// is touched.
func TestTakeoverAndBack(t *testing.T) {
	exe := kubeProxyExe(t)
	root, prefix, srv := emulator(t)
	const hnsNode, network = "hns-takeover", "cbr0"
	if _, err := srv.SetProfile(hnsNode, "ws2022", false); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.CreateCNINetwork(hnsemu.CNINetwork{Node: hnsNode, Layout: "flannel-host-gw", Name: network, Subnet: "10.244.1.0/24"}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range []string{"10.244.1.5", "10.244.1.6"} {
		if _, err := srv.CreateCNIEndpoint(hnsemu.CNIEndpoint{Node: hnsNode, Network: network, Name: "pod-" + ip, IP: ip}); err != nil {
			t.Fatal(err)
		}
	}
	cni := srv.State(hnsNode)
	api := harness.New(t, harness.Options{Logf: t.Logf})
	client := kubernetes.NewForConfigOrDie(api.AdminConfig())
	mustCreate(t, context.Background(), client, "192.168.0.11")
	kubeconfig, err := api.Kubeconfig(harness.AdminUser)
	if err != nil {
		t.Fatal(err)
	}
	xp := buildRelease(t, root)
	_ = os.RemoveAll(filepath.Join(prefix, "drive_c/ProgramData/crossproxy"))
	env := []string{"KUBE_NETWORK=" + network}
	kubeProxy := func() *node {
		return startWine(t, prefix, srv.DLLAddr, hnsNode, exe, env, "--kubeconfig="+winPath(kubeconfig), "--hostname-override="+winNode,
			"--proxy-mode=kernelspace", "--healthz-bind-address=127.0.0.1:"+freePort(t), "--metrics-bind-address=127.0.0.1:"+freePort(t), "--v=2")
	}
	// stop ends one proxy (its process group), leaving the others of the
	// prefix running (wineserver -k would end them all).
	stop := func(n *node) {
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not stop", n.name)
		}
	}
	run := func(what string, args ...string) {
		cmd := exec.Command("wine", args...)
		cmd.Env = append(os.Environ(), "WINEPREFIX="+prefix, "WINEDEBUG=-all", "WINEARCH=win64", "HNSEMU_ADDR="+srv.DLLAddr, "HNSEMU_NODE="+hnsNode)
		cmd.Env = append(cmd.Env, env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, tail(string(out), 3000))
		}
	}
	const want = 6 // ClusterIP x3, NodePort x2, the ingress IP
	settled := func(p *node) []string {
		waitLBs(t, srv, p, want)
		time.Sleep(3 * time.Second)
		return oracleView(srv.State(hnsNode))
	}
	// cniIntact fails when an endpoint or network the CNI made is gone.
	cniIntact := func(step string) {
		have := map[string]bool{}
		st := srv.State(hnsNode)
		for _, ep := range st.Endpoints {
			have[ep.ID] = true
		}
		for _, nw := range st.Networks {
			have[nw.ID] = true
		}
		for _, ep := range cni.Endpoints {
			if !have[ep.ID] {
				t.Fatalf("%s: the CNI's endpoint %s (%s) is gone", step, ep.Name, ep.ID)
			}
		}
		for _, nw := range cni.Networks {
			if !have[nw.ID] {
				t.Fatalf("%s: the CNI's network %s is gone", step, nw.Name)
			}
		}
	}

	kp := kubeProxy()
	first := settled(kp)

	start := time.Now()
	cp := startWine(t, prefix, srv.DLLAddr, hnsNode, xp, nil, "run", "--kubeconfig", winPath(kubeconfig), "--node", winNode, "--network-name", network,
		"--ip-families", "IPv4", "--healthz-bind-address=127.0.0.1:"+freePort(t), "--metrics-bind-address=127.0.0.1:"+freePort(t))
	time.Sleep(5 * time.Second) // crossproxy up beside kube-proxy: HNS refuses it the frontends
	if got := oracleView(srv.State(hnsNode)); diff(first, got) != "" {
		t.Fatalf("with both proxies running HNS no longer holds kube-proxy's state:\n%s", diff(first, got))
	}
	stop(kp)
	removed := time.Now()
	for _, lb := range srv.State(hnsNode).LoadBalancers {
		if err := srv.Delete(hnsNode, "loadbalancer", lb.ID); err != nil {
			t.Fatal(err)
		}
	}
	waitLBs(t, srv, cp, want)
	t.Logf("takeover: crossproxy.exe held every frontend %s after kube-proxy's load balancers were removed (%s after it started)",
		time.Since(removed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	taken := settled(cp)
	if d := diff(first, taken); d != "" {
		t.Fatalf("crossproxy.exe after the takeover programs other than kube-proxy.exe did (- kube-proxy, + crossproxy):\n%s", d)
	}
	cniIntact("takeover")

	kp = kubeProxy()
	time.Sleep(5 * time.Second)
	stop(cp)
	run("crossproxy cleanup", xp, "cleanup", "--network-name", network)
	cniIntact("crossproxy cleanup")
	back := time.Now()
	waitLBs(t, srv, kp, want)
	got := settled(kp)
	if d := diff(first, got); d != "" {
		t.Fatalf("kube-proxy.exe back on the node programs other than before (- before, + after):\n%s", d)
	}
	t.Logf("the way back: kube-proxy.exe held every frontend %s after crossproxy's cleanup", time.Since(back).Round(time.Millisecond))
	cniIntact("the way back")
}
