package nft

import (
	"fmt"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// BenchmarkBuildPlan10k measures the userspace part of a full sync at 10,000
// Services x 10 endpoints: model and plan, no kernel.
func BenchmarkBuildPlan10k(b *testing.B) {
	st := scaleStateN(10000, 10)
	b.ReportAllocs()
	for b.Loop() {
		rs := build(st, Config{})
		planRuleset(rs, nil, false)
	}
}

// benchNodes is the number of nodes scaleStateN spreads endpoints over, one
// of them node-a, the node the state is computed for.
const benchNodes = 500

// scaleStateN is n ClusterIP Services with eps endpoints each, the shape of
// the performance targets. Endpoints run on benchNodes nodes in turn, as the
// EndpointSlice controller names them, so node-a, whose state this is, runs
// one in benchNodes.
func scaleStateN(n, eps int) *core.NodeState {
	places := make([]*core.EndpointPlace, benchNodes)
	for i := range places {
		places[i] = &core.EndpointPlace{NodeName: fmt.Sprintf("node-%d", i)}
	}
	places[0].NodeName = "node-a"
	st := &core.NodeState{
		Node:     core.NodeInfo{Name: "node-a"},
		Families: []v1.IPFamily{v1.IPv4Protocol},
		LocalDetect: map[v1.IPFamily]core.FamilyLocalDetect{
			v1.IPv4Protocol: {Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}},
		},
		Ports: make(map[core.PortKey]*core.ServicePort, n),
	}
	for i := 0; i < n; i++ {
		k := key(fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i), "http", v1.ProtocolTCP, v1.IPv4Protocol)
		cip := netip.AddrFrom4([4]byte{10, 96 + byte(i>>16), byte(i >> 8), byte(i)})
		p := &core.ServicePort{Key: k, ClusterIP: cip, Port: 80, Protocol: v1.ProtocolTCP,
			Frontends:  []core.Frontend{{Kind: core.FrontendClusterIP, Addr: cip, Port: 80}},
			Masquerade: core.Masquerade{OffClusterInternal: true, External: true}}
		for e := 0; e < eps; e++ {
			j := i*eps + e
			e := ep(netip.AddrFrom4([4]byte{10, 128 + byte(j>>16), byte(j >> 8), byte(j)}).String(), 8080, j%benchNodes == 0)
			e.Place = places[j%benchNodes]
			p.ClusterEndpoints = append(p.ClusterEndpoints, e)
		}
		st.Ports[k] = p
	}
	return st
}
