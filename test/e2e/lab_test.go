//go:build e2e && linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/internal/testenv"
	"github.com/crossproxy/crossproxy/test/netnsrun"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Addresses of the lab. Pods sit on a bridge in the node namespace; the
// outside client reaches the node over its own link.
const (
	nodeName   = "node-a"
	nodeZone   = "zone-a"
	nodeV4     = "192.168.50.1"
	nodeV6     = "fd00:50::1"
	extV4      = "192.168.50.2"
	extV4Other = "192.168.50.3"
	extV6      = "fd00:50::2"
	bridgeV4   = "10.244.0.1"
	clientV4   = "10.244.0.2"
	clientV6   = "fd00:244::2"
	echoPort   = 8080
)

// backends are the pod namespaces that run echo servers.
var backends = []struct{ name, v4, v6 string }{
	{"b1", "10.244.0.11", "fd00:244::11"},
	{"b2", "10.244.0.12", "fd00:244::12"},
	{"b3", "10.244.0.13", "fd00:244::13"},
	{"b4", "10.244.0.14", "fd00:244::14"},
}

// lab is one topology with crossproxy running in its node namespace.
type lab struct {
	t       *testing.T
	id      string
	dir     string
	bin     string
	mu      sync.Mutex
	objects map[string]any // file content by key, written as one manifest file
	proxy   *exec.Cmd
	// proxyDone is closed when the proxy process has exited.
	proxyDone chan struct{}
	logPath   string
	// extra are flags after the lab's own for `crossproxy run`; a flag given
	// twice takes the later value.
	extra []string
}

func (l *lab) ns(role string) string { return nsPrefix + "e2e" + l.id + "-" + role }

func run(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// buildCrossproxy compiles the binary under test once per run, unless
// CROSSPROXY_E2E_BINARY names one already built (the kernel matrix's guests
// have no Go toolchain).
var buildOnce struct {
	sync.Once
	path string
	err  error
}

func crossproxyBinary(t *testing.T) string {
	buildOnce.Do(func() {
		if p := os.Getenv("CROSSPROXY_E2E_BINARY"); p != "" {
			buildOnce.path = p
			return
		}
		dir, err := os.MkdirTemp("", "xpl-e2e-bin")
		if err != nil {
			buildOnce.err = err
			return
		}
		buildOnce.path = filepath.Join(dir, "crossproxy")
		out, err := exec.Command("go", "build", "-o", buildOnce.path, "../../cmd/crossproxy").CombinedOutput()
		if err != nil {
			buildOnce.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildOnce.err != nil {
		t.Fatal(buildOnce.err)
	}
	return buildOnce.path
}

// newLab builds the namespaces and starts crossproxy; everything is removed
// when the test ends, also on failure.
func newLab(t *testing.T) *lab { return newLabWith(t, "") }

// newLabWith is newLab with its own namespace names (suffix) and extra flags
// for crossproxy.
func newLabWith(t *testing.T, suffix string, extra ...string) *lab {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	l := &lab{t: t, id: fmt.Sprintf("%d%s", os.Getpid(), suffix), dir: t.TempDir(), objects: map[string]any{}, extra: extra}
	l.bin = crossproxyBinary(t)
	node, ext, client := l.ns("node"), l.ns("ext"), l.ns("c1")
	all := []string{node, ext, client}
	for _, b := range backends {
		all = append(all, l.ns(b.name))
	}
	t.Cleanup(func() {
		for _, n := range all {
			_ = exec.Command("ip", "netns", "del", n).Run()
		}
	})
	for _, n := range all {
		run(t, "ip", "netns", "add", n)
		run(t, "ip", "-n", n, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", node, "link", "add", "br0", "type", "bridge")
	run(t, "ip", "-n", node, "addr", "add", bridgeV4+"/24", "dev", "br0")
	run(t, "ip", "-n", node, "addr", "add", "fd00:244::1/64", "dev", "br0", "nodad")
	run(t, "ip", "-n", node, "link", "set", "br0", "up")
	pod := func(name, ns, v4, v6 string) {
		run(t, "ip", "-n", node, "link", "add", "v-"+name, "type", "veth", "peer", "name", "eth0", "netns", ns)
		run(t, "ip", "-n", node, "link", "set", "v-"+name, "master", "br0", "up")
		// As the bridge CNI plugin's hairpinMode does: with br_netfilter a
		// pod's DNATed connection to itself is bridged back out its own port.
		run(t, "ip", "-n", node, "link", "set", "v-"+name, "type", "bridge_slave", "hairpin", "on")
		run(t, "ip", "-n", ns, "addr", "add", v4+"/24", "dev", "eth0")
		run(t, "ip", "-n", ns, "addr", "add", v6+"/64", "dev", "eth0", "nodad")
		run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
		run(t, "ip", "-n", ns, "route", "add", "default", "via", bridgeV4)
		run(t, "ip", "-n", ns, "-6", "route", "add", "default", "via", "fd00:244::1")
	}
	pod("c1", client, clientV4, clientV6)
	for _, b := range backends {
		pod(b.name, l.ns(b.name), b.v4, b.v6)
	}
	run(t, "ip", "-n", node, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0", "netns", ext)
	run(t, "ip", "-n", node, "addr", "add", nodeV4+"/24", "dev", "ext0")
	run(t, "ip", "-n", node, "addr", "add", nodeV6+"/64", "dev", "ext0", "nodad")
	run(t, "ip", "-n", node, "link", "set", "ext0", "up")
	run(t, "ip", "-n", ext, "addr", "add", extV4+"/24", "dev", "eth0")
	run(t, "ip", "-n", ext, "addr", "add", extV4Other+"/24", "dev", "eth0")
	run(t, "ip", "-n", ext, "addr", "add", extV6+"/64", "dev", "eth0", "nodad")
	run(t, "ip", "-n", ext, "link", "set", "eth0", "up")
	for _, r := range []string{"10.96.0.0/12", "203.0.113.0/24", "198.51.100.0/24"} {
		run(t, "ip", "-n", ext, "route", "add", r, "via", nodeV4)
	}
	run(t, "ip", "-n", ext, "-6", "route", "add", "fd00:96::/64", "via", nodeV6)
	// The node's own processes reach ClusterIPs through the pod bridge.
	run(t, "ip", "-n", node, "route", "add", "10.96.0.0/12", "dev", "br0")

	for _, b := range backends {
		l.startEcho(b.name)
	}
	// IPv6 neighbours and the bridge take a moment; start when every link
	// answers (a refused connection is an answer too).
	links := map[string][]string{client: {bridgeV4, "fd00:244::1"}, ext: {nodeV4, nodeV6}}
	for _, b := range backends {
		links[l.ns(b.name)] = []string{bridgeV4, "fd00:244::1"}
	}
	for ns, addrs := range links {
		for _, a := range addrs {
			eventually(t, "link "+ns+" -> "+a, func() error {
				_, err := tcp(ns, "", net.JoinHostPort(a, "9"), time.Second)
				if err == nil || isRefused(err) {
					return nil
				}
				return err
			})
		}
	}
	l.setNode()
	l.flush()
	l.startProxy()
	return l
}

// startEcho runs this test binary as an echo server in a pod namespace.
func (l *lab) startEcho(name string) {
	t := l.t
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", l.ns(name), self)
	cmd.Env = append(os.Environ(), echoEnv+"="+name, fmt.Sprintf("%s=%d,%d", echoPortsEnv, echoPort, echoPort+1))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("echo server %s did not start: %q %v", name, line, err)
	}
}

func (l *lab) startProxy() {
	t := l.t
	l.logPath = filepath.Join(l.dir, "crossproxy.log")
	logf, err := os.Create(l.logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", l.ns("node"), l.bin, "run",
		"--manifests", filepath.Join(l.dir, "manifests"),
		"--node", nodeName,
		"--cluster-cidr", "10.244.0.0/16,fd00:244::/56",
		"--ip-families", "IPv4,IPv6",
		"--nodeport-addresses", "192.168.50.0/24,fd00:50::/64",
		"--manifest-poll-interval", "100ms",
		"--min-sync-period", "50ms",
		"--sync-period", "4s",
		"--full-sync-period", "4s",
		"--localhost-nodeports",
		"--log-level", "debug")
	cmd.Args = append(cmd.Args, l.extra...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l.proxy = cmd
	l.proxyDone = make(chan struct{})
	go func() { _ = cmd.Wait(); close(l.proxyDone) }()
	t.Cleanup(func() {
		l.stopProxy()
		logf.Close()
		if t.Failed() {
			data, _ := os.ReadFile(l.logPath)
			t.Logf("crossproxy log:\n%s", lastLines(string(data), 80))
			out, _ := exec.Command("ip", "netns", "exec", l.ns("node"), "nft", "list", "ruleset").CombinedOutput()
			t.Logf("ruleset:\n%s", lastLines(string(out), 200))
		}
	})
	l.waitNFT("nat-prerouting", true)
}

// stopProxy interrupts the proxy and waits for it to exit (killing it after
// 5 s): its rules stay.
func (l *lab) stopProxy() {
	_ = l.proxy.Process.Signal(os.Interrupt)
	select {
	case <-l.proxyDone:
	case <-time.After(5 * time.Second):
		_ = l.proxy.Process.Kill()
		<-l.proxyDone
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// nft lists crossproxy's table in the node namespace.
func (l *lab) nft() string {
	out, _ := exec.Command("ip", "netns", "exec", l.ns("node"), "nft", "list", "ruleset").CombinedOutput()
	return string(out)
}

// waitNFT waits until the table does (or does not) contain s.
func (l *lab) waitNFT(s string, present bool) {
	l.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(l.nft(), s) == present {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Fatalf("table never %s %q", map[bool]string{true: "contained", false: "lost"}[present], s)
}

// --- manifests ---

func (l *lab) setNode() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.objects["node"] = &v1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: map[string]string{v1.LabelTopologyZone: nodeZone}},
		Spec:       v1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24", "fd00:244::/64"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: nodeV4}, {Type: v1.NodeInternalIP, Address: nodeV6}}},
	}
}

// svc describes a test Service; zero values mean Kubernetes defaults.
type svc struct {
	name         string
	clusterIPs   []string
	ports        []svcPort
	typ          v1.ServiceType
	externalIPs  []string
	lbIPs        []string
	sourceRanges []string
	etpLocal     bool
	affinity     int32 // ClientIP affinity timeout in seconds, 0 for none
}

type svcPort struct {
	name     string
	port     int32
	nodePort int32
	proto    v1.Protocol
}

// ep is an endpoint: a backend pod (by name) on a node.
type ep struct {
	pod  string
	node string
	// port is the endpoint's target port (0: echoPort); endpoints on other
	// ports go into a slice of their own, as the EndpointSlice controller does.
	port int32
	// state is "" (ready), "terminating" (serving and terminating) or
	// "notready" (neither ready nor serving).
	state string
	// zone, when set, is the endpoint's zone and its forZones hint.
	zone string
}

func backendByName(name string) (v4, v6 string) {
	for _, b := range backends {
		if b.name == name {
			return b.v4, b.v6
		}
	}
	panic("no backend " + name)
}

// setService writes the Service and its EndpointSlices (one per family it has).
func (l *lab) setService(s svc, eps []ep) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.putService(s, eps)
}

func (l *lab) putService(s svc, eps []ep) {
	obj := &v1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: "default"},
		Spec: v1.ServiceSpec{
			Type: v1.ServiceTypeClusterIP, ClusterIP: s.clusterIPs[0], ClusterIPs: s.clusterIPs,
			ExternalIPs: s.externalIPs, LoadBalancerSourceRanges: s.sourceRanges,
		},
	}
	var fams []v1.IPFamily
	for _, ip := range s.clusterIPs {
		if strings.Contains(ip, ":") {
			fams = append(fams, v1.IPv6Protocol)
		} else {
			fams = append(fams, v1.IPv4Protocol)
		}
	}
	obj.Spec.IPFamilies = fams
	if len(fams) > 1 {
		p := v1.IPFamilyPolicyRequireDualStack
		obj.Spec.IPFamilyPolicy = &p
	}
	if s.typ != "" {
		obj.Spec.Type = s.typ
	}
	if s.etpLocal {
		obj.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	} else if s.typ == v1.ServiceTypeNodePort || s.typ == v1.ServiceTypeLoadBalancer {
		obj.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyCluster
	}
	if s.affinity > 0 {
		obj.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		obj.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: &s.affinity}}
	}
	for _, ip := range s.lbIPs {
		obj.Status.LoadBalancer.Ingress = append(obj.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: ip})
	}
	var slicePorts []discovery.EndpointPort
	for _, p := range s.ports {
		proto := p.proto
		if proto == "" {
			proto = v1.ProtocolTCP
		}
		obj.Spec.Ports = append(obj.Spec.Ports, v1.ServicePort{Name: p.name, Port: p.port, NodePort: p.nodePort,
			Protocol: proto, TargetPort: intstr.FromInt32(echoPort)})
		name, port := p.name, int32(echoPort)
		slicePorts = append(slicePorts, discovery.EndpointPort{Name: &name, Port: &port, Protocol: &proto})
	}
	l.objects["svc/"+s.name] = obj
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		key := "slice/" + s.name + "/" + string(f)
		for k := range l.objects {
			if k == key || strings.HasPrefix(k, key+"/") {
				delete(l.objects, k)
			}
		}
		has := false
		for _, x := range fams {
			has = has || x == f
		}
		if !has {
			continue
		}
		sl := &discovery.EndpointSlice{
			TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: s.name + "-" + strings.ToLower(string(f)), Namespace: "default",
				Labels: map[string]string{discovery.LabelServiceName: s.name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       slicePorts,
			Endpoints:   []discovery.Endpoint{},
		}
		if f == v1.IPv6Protocol {
			sl.AddressType = discovery.AddressTypeIPv6
		}
		byPort := map[int32]*discovery.EndpointSlice{echoPort: sl}
		for _, e := range eps {
			target := sl
			if e.port != 0 && e.port != echoPort {
				if byPort[e.port] == nil {
					other := sl.DeepCopy()
					other.Name = fmt.Sprintf("%s-%d", sl.Name, e.port)
					other.Ports = nil
					for _, p := range sl.Ports {
						p.Port = &e.port
						other.Ports = append(other.Ports, p)
					}
					other.Endpoints = []discovery.Endpoint{}
					byPort[e.port] = other
				}
				target = byPort[e.port]
			}
			target.Endpoints = append(target.Endpoints, e.endpoint(f))
		}
		for port, s := range byPort {
			if port == echoPort {
				l.objects[key] = s
			} else {
				l.objects[fmt.Sprintf("%s/%d", key, port)] = s
			}
		}
	}
}

// endpoint is e as an EndpointSlice endpoint of family f.
func (e ep) endpoint(f v1.IPFamily) discovery.Endpoint {
	v4, v6 := backendByName(e.pod)
	addr := v4
	if f == v1.IPv6Protocol {
		addr = v6
	}
	node := e.node
	if node == "" {
		node = nodeName
	}
	ready, serving, terminating := true, true, false
	switch e.state {
	case "terminating":
		ready, terminating = false, true
	case "notready":
		ready, serving = false, false
	}
	out := discovery.Endpoint{Addresses: []string{addr}, NodeName: &node,
		Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating}}
	if e.zone != "" {
		zone := e.zone
		out.Zone = &zone
		out.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: e.zone}}}
	}
	return out
}

func (l *lab) deleteService(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.objects, "svc/"+name)
	for k := range l.objects {
		if strings.HasPrefix(k, "slice/"+name+"/") {
			delete(l.objects, k)
		}
	}
}

// flush writes every object to the manifest file atomically (write, rename).
func (l *lab) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.objects))
	for k := range l.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		data, err := yaml.Marshal(l.objects[k])
		if err != nil {
			l.t.Fatal(err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	dir := filepath.Join(l.dir, "manifests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		l.t.Fatal(err)
	}
	tmp := filepath.Join(l.dir, "all.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "all.yaml")); err != nil {
		l.t.Fatal(err)
	}
}

// --- clients ---

// reply is what an echo server answered.
type reply struct {
	Backend string
	Source  string // address only
}

func parseReply(s string) (reply, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return reply{}, fmt.Errorf("bad reply %q", s)
	}
	host, _, err := net.SplitHostPort(f[1])
	if err != nil {
		return reply{}, err
	}
	return reply{Backend: f[0], Source: host}, nil
}

// tcp connects from a namespace (optionally from a given source address) and
// returns the echo server's reply.
func tcp(ns, src, dst string, timeout time.Duration) (reply, error) {
	var r reply
	err := netnsrun.Do(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		if src != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		}
		c, err := d.Dial("tcp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		r, err = parseReply(line)
		return err
	})
	return r, err
}

// udpConn is a connected UDP socket opened in a namespace; it keeps its
// source port, so its conntrack entry stays the same across requests.
type udpConn struct{ c net.Conn }

func dialUDP(ns, dst string) (*udpConn, error) {
	var u *udpConn
	err := netnsrun.Do(ns, func() error {
		c, err := net.Dial("udp", dst)
		if err != nil {
			return err
		}
		u = &udpConn{c: c}
		return nil
	})
	return u, err
}

func (u *udpConn) ask(timeout time.Duration) (reply, error) {
	if _, err := u.c.Write([]byte("hi")); err != nil {
		return reply{}, err
	}
	_ = u.c.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 256)
	n, err := u.c.Read(buf)
	if err != nil {
		return reply{}, err
	}
	return parseReply(string(buf[:n]))
}

func (u *udpConn) Close() { u.c.Close() }

func udpOnce(ns, dst string, timeout time.Duration) (reply, error) {
	u, err := dialUDP(ns, dst)
	if err != nil {
		return reply{}, err
	}
	defer u.Close()
	return u.ask(timeout)
}

// eventually retries fn until it succeeds or the deadline passes.
func eventually(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func isRefused(err error) bool { return errors.Is(err, syscallECONNREFUSED) }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
}
