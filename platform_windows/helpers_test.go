package hns

import (
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

var ip = netip.MustParseAddr

// port builds a ClusterIP Service port default/<name>:http/TCP/v4 with the
// given cluster endpoints; options adjust it.
func port(name string, cip string, eps []core.Endpoint, opts ...func(*core.ServicePort)) *core.ServicePort {
	fam := v1.IPv4Protocol
	if ip(cip).Is6() {
		fam = v1.IPv6Protocol
	}
	p := &core.ServicePort{
		Key:              core.PortKey{Service: types.NamespacedName{Namespace: "default", Name: name}, PortName: "http", Protocol: v1.ProtocolTCP, Family: fam},
		ClusterIP:        ip(cip),
		Port:             80,
		Protocol:         v1.ProtocolTCP,
		Frontends:        []core.Frontend{{Kind: core.FrontendClusterIP, Addr: ip(cip), Port: 80}},
		ClusterEndpoints: eps,
	}
	for _, e := range eps {
		if e.Local {
			p.LocalEndpoints = append(p.LocalEndpoints, e)
		}
	}
	if len(eps) == 0 {
		p.InternalEmpty, p.ExternalEmpty = core.VerdictReject, core.VerdictReject
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func local(a string, port uint16) core.Endpoint {
	return core.Endpoint{Addr: ip(a), Port: port, Place: &core.EndpointPlace{NodeName: "win-1"}, Ready: true, Serving: true, Local: true}
}

func remote(a string, port uint16) core.Endpoint {
	return core.Endpoint{Addr: ip(a), Port: port, Place: &core.EndpointPlace{NodeName: "lin-1"}, Ready: true, Serving: true}
}

func withNodePort(np uint16, addrs ...string) func(*core.ServicePort) {
	return func(p *core.ServicePort) {
		p.NodePort = np
		for _, a := range addrs {
			p.Frontends = append(p.Frontends, core.Frontend{Kind: core.FrontendNodePort, Addr: ip(a), Port: np})
		}
	}
}

func withFrontend(kind core.FrontendKind, a string) func(*core.ServicePort) {
	return func(p *core.ServicePort) {
		p.Frontends = append(p.Frontends, core.Frontend{Kind: kind, Addr: ip(a), Port: p.Port})
	}
}

func state(ports ...*core.ServicePort) *core.NodeState {
	s := &core.NodeState{Node: core.NodeInfo{Name: "win-1"}, Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, Ports: map[core.PortKey]*core.ServicePort{}}
	for _, p := range ports {
		s.Ports[p.Key] = p
	}
	return s
}

// overlay is the test network: this node's pods in 10.244.1.0/24, a Linux
// node's in 10.244.2.0/24 behind provider address 192.168.0.12.
var overlay = Network{Name: "vxlan0", Type: NetworkOverlay, RemoteSubnets: []RemoteSubnet{
	{Prefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: ip("192.168.0.12")},
	{Prefix: netip.MustParsePrefix("fd00:2::/64"), ProviderAddress: ip("192.168.0.12")},
}}

// l2bridge is an L2Bridge network: remote endpoints need no provider address.
var l2bridge = Network{Name: "cbr0", Type: NetworkL2Bridge}

func mustEqual(t *testing.T, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}
