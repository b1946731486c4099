package nft

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/golden"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/internal/teststate"
)

func ep(addr string, port uint16, local bool) core.Endpoint {
	return core.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Ready: true, Serving: true, Local: local}
}

func key(ns, name, port string, proto v1.Protocol, fam v1.IPFamily) core.PortKey {
	return core.PortKey{Service: types.NamespacedName{Namespace: ns, Name: name}, PortName: port, Protocol: proto, Family: fam}
}

func fe(kind core.FrontendKind, addr string, port uint16) core.Frontend {
	return core.Frontend{Kind: kind, Addr: netip.MustParseAddr(addr), Port: port}
}

// testState is node-a of a kubeadm cluster with flannel (pods in
// 10.244.0.0/16, node-a's 10.244.2.0/24; Services in 10.96.0.0/12 and
// fd00:96::/112), computed by the core from one Service of each shape the
// builder knows: a dual-stack NodePort with an ExternalIP (default/web), a
// UDP Service with ClientIP affinity (default/dns), a LoadBalancer with
// source ranges and the Local policy whose endpoint is on another node
// (shop/lb), and a Service without endpoints (default/empty).
func testState(t testing.TB) *core.NodeState {
	t.Helper()
	opts := core.Options{
		IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		LocalDetect: core.LocalDetect{Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/64")}},
	}
	node := testobj.Node("node-a", "", "192.168.1.10")

	web := testobj.Service("default", "web", "10.96.0.10")
	web.Spec.Type = v1.ServiceTypeNodePort
	web.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
	web.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	web.Spec.Ports[0].NodePort = 30080
	web.Spec.ExternalIPs = []string{"203.0.113.7"}
	webV4 := testobj.Slice("default", "web-v4", "web", testobj.Endpoint("10.244.1.5", "node-b"), testobj.Endpoint("10.244.2.6", "node-a"))
	webV6 := testobj.Slice("default", "web-v6", "web", testobj.Endpoint("fd00:244::5", "node-b"))
	webV6.AddressType = discovery.AddressTypeIPv6

	dns := testobj.Service("default", "dns", "10.96.0.53")
	dns.Spec.Ports = []v1.ServicePort{{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(53)}}
	dns.Spec.SessionAffinity = v1.ServiceAffinityClientIP
	dns.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: testobj.Ptr(int32(60))}}
	dnsEps := testobj.Slice("default", "dns-1", "dns", testobj.Endpoint("10.244.1.9", "node-b"))
	dnsEps.Ports = []discovery.EndpointPort{testobj.SlicePort("dns", v1.ProtocolUDP, 53)}

	lb := testobj.Service("shop", "lb", "10.96.0.20")
	lb.Spec.Type = v1.ServiceTypeLoadBalancer
	lb.Spec.Ports = []v1.ServicePort{{Port: 443, NodePort: 30443, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)}}
	lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	lb.Spec.HealthCheckNodePort = 32000
	lb.Spec.LoadBalancerSourceRanges = []string{"198.51.100.0/24"}
	lb.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "198.51.100.1"}}
	lbEps := testobj.Slice("shop", "lb-1", "lb", testobj.Endpoint("10.244.1.7", "node-b"))
	lbEps.Ports = []discovery.EndpointPort{{Port: testobj.Ptr(int32(8443)), Protocol: testobj.Ptr(v1.ProtocolTCP), Name: testobj.Ptr("")}}

	empty := testobj.Service("default", "empty", "10.96.0.30")
	empty.Spec.Ports[0].Name = ""

	return teststate.Compute(t, opts, node, web, webV4, webV6, dns, dnsEps, lb, lbEps, empty)
}

func TestRenderGolden(t *testing.T) {
	golden.Check(t, filepath.Join("testdata", "render.nft"), build(testState(t), Config{LocalhostNodePorts: true}).Text())
}

// TestBuildSkipsInexpressiblePorts: a port the kernel would refuse is left
// out of the ruleset and named, with why, in the rendered text.
func TestBuildSkipsInexpressiblePorts(t *testing.T) {
	st := testState(t)
	p := *st.Ports[key("default", "web", "http", v1.ProtocolTCP, v1.IPv4Protocol)]
	p.Key = key("default", strings.Repeat("n", 250), "http", v1.ProtocolTCP, v1.IPv4Protocol)
	st.Ports[p.Key] = &p
	rs := build(st, Config{})
	if len(rs.Skipped) != 1 || rs.Skipped[0].Key != p.Key || len(rs.Ports) != len(st.Ports)-1 {
		t.Fatalf("skipped %+v, kept %d of %d", rs.Skipped, len(rs.Ports), len(st.Ports))
	}
	if txt := rs.Text(); !strings.Contains(txt, "# not programmed: default/nnn") || strings.Contains(txt, "svc-"+strings.Split(portChainName("svc", &p), "-")[1]) {
		t.Errorf("render does not name the skipped port, or holds it:\n%.300s", txt)
	}
}
