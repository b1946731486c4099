package nft

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func ep(addr string, port uint16, local bool) core.Endpoint {
	return core.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Ready: true, Serving: true, Local: local}
}

func key(ns, name, port string, proto v1.Protocol, fam v1.IPFamily) core.PortKey {
	return core.PortKey{Service: types.NamespacedName{Namespace: ns, Name: name}, PortName: port, Protocol: proto, Family: fam}
}

func fe(kind core.FrontendKind, addr string, port uint16) core.Frontend {
	return core.Frontend{Kind: kind, Addr: netip.MustParseAddr(addr), Port: port}
}

// testState is a node with one of each shape the builder knows.
func testState() *core.NodeState {
	st := &core.NodeState{
		Node:     core.NodeInfo{Name: "node-a"},
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		LocalDetect: map[v1.IPFamily]core.FamilyLocalDetect{
			v1.IPv4Protocol: {Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
			v1.IPv6Protocol: {Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00:244::/64")}},
		},
		Ports: map[core.PortKey]*core.ServicePort{},
	}
	add := func(p *core.ServicePort) { st.Ports[p.Key] = p }
	web := []core.Endpoint{ep("10.244.1.5", 8080, false), ep("10.244.2.6", 8080, true)}
	add(&core.ServicePort{
		Key: key("default", "web", "http", v1.ProtocolTCP, v1.IPv4Protocol), ClusterIP: netip.MustParseAddr("10.96.0.10"),
		Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP,
		Frontends:        []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.10", 80), fe(core.FrontendNodePort, "192.168.1.10", 30080), fe(core.FrontendExternalIP, "203.0.113.7", 80)},
		ClusterEndpoints: web, LocalEndpoints: web[1:],
		Masquerade: core.Masquerade{OffClusterInternal: true, External: true},
	})
	add(&core.ServicePort{
		Key: key("default", "dns", "dns", v1.ProtocolUDP, v1.IPv4Protocol), ClusterIP: netip.MustParseAddr("10.96.0.53"),
		Port: 53, Protocol: v1.ProtocolUDP,
		Frontends:        []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.53", 53)},
		ClusterEndpoints: []core.Endpoint{ep("10.244.1.9", 53, false)},
		Affinity:         core.Affinity{ClientIP: true, TimeoutSeconds: 60},
		Masquerade:       core.Masquerade{OffClusterInternal: true},
	})
	add(&core.ServicePort{
		Key: key("shop", "lb", "", v1.ProtocolTCP, v1.IPv4Protocol), ClusterIP: netip.MustParseAddr("10.96.0.20"),
		Port: 443, NodePort: 30443, Protocol: v1.ProtocolTCP,
		Frontends:           []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.20", 443), fe(core.FrontendNodePort, "192.168.1.10", 30443), fe(core.FrontendLoadBalancer, "198.51.100.1", 443)},
		SourceRanges:        []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		ExternalPolicyLocal: true,
		ClusterEndpoints:    []core.Endpoint{ep("10.244.1.7", 8443, false)},
		ExternalEmpty:       core.VerdictDrop,
		Masquerade:          core.Masquerade{OffClusterInternal: true},
		HealthCheckNodePort: 32000,
	})
	add(&core.ServicePort{
		Key: key("default", "empty", "", v1.ProtocolTCP, v1.IPv4Protocol), ClusterIP: netip.MustParseAddr("10.96.0.30"),
		Port: 80, Protocol: v1.ProtocolTCP,
		Frontends:     []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.30", 80)},
		InternalEmpty: core.VerdictReject, ExternalEmpty: core.VerdictReject,
		Masquerade: core.Masquerade{OffClusterInternal: true, External: true},
	})
	add(&core.ServicePort{
		Key: key("default", "web", "http", v1.ProtocolTCP, v1.IPv6Protocol), ClusterIP: netip.MustParseAddr("fd00:96::10"),
		Port: 80, Protocol: v1.ProtocolTCP,
		Frontends:        []core.Frontend{fe(core.FrontendClusterIP, "fd00:96::10", 80)},
		ClusterEndpoints: []core.Endpoint{ep("fd00:244::5", 8080, false)},
		Masquerade:       core.Masquerade{All: true, External: true},
	})
	return st
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update): %v", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file; got:\n%s", name, got)
	}
}

func TestRenderGolden(t *testing.T) {
	golden(t, "render.nft", Build(testState(), Config{LocalhostNodePorts: true}).Text())
}

// TestBuildSkipsInexpressiblePorts: a port the kernel would refuse is left
// out of the ruleset and named, with why, in the rendered text.
func TestBuildSkipsInexpressiblePorts(t *testing.T) {
	st := testState()
	p := *st.Ports[key("default", "web", "http", v1.ProtocolTCP, v1.IPv4Protocol)]
	p.Key = key("default", strings.Repeat("n", 250), "http", v1.ProtocolTCP, v1.IPv4Protocol)
	st.Ports[p.Key] = &p
	rs := Build(st, Config{})
	if len(rs.Skipped) != 1 || rs.Skipped[0].Key != p.Key || len(rs.Ports) != len(st.Ports)-1 {
		t.Fatalf("skipped %+v, kept %d of %d", rs.Skipped, len(rs.Ports), len(st.Ports))
	}
	if txt := rs.Text(); !strings.Contains(txt, "# not programmed: default/nnn") || strings.Contains(txt, "svc-"+strings.Split(portChainName("svc", &p), "-")[1]) {
		t.Errorf("render does not name the skipped port, or holds it:\n%.300s", txt)
	}
}
