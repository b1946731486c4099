package winoracle

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/Microsoft/hnslib/hcn"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/winkernel"
	fakehcn "k8s.io/kubernetes/pkg/proxy/winkernel/testing"
)

// winkernelNode is kube-proxy's winkernel proxier (one per IP family, as
// kube-proxy runs it) over winkernel's own HCN mock.
type winkernelNode struct {
	mock     *fakehcn.HcnMock
	proxiers []*winkernel.Proxier
	// cni are the ids of the endpoints the CNI made (not the proxy's).
	cni map[string]bool
}

func newWinkernelNode(sc *scenario) (*winkernelNode, error) {
	nw := &hcn.HostComputeNetwork{Id: networkID, Name: sc.networkName(), Type: hcn.NetworkType(sc.networkType())}
	for _, rs := range sc.remoteSubnets() {
		settings, err := json.Marshal(hcn.RemoteSubnetRoutePolicySetting{DestinationPrefix: rs.prefix, IsolationId: 4096, ProviderAddress: rs.pa, DistributedRouterMacAddress: "00-15-5d-00-00-01"})
		if err != nil {
			return nil, err
		}
		nw.Policies = append(nw.Policies, hcn.NetworkPolicy{Type: hcn.RemoteSubnetRoute, Settings: settings})
	}
	// NewHcnMock resets the mock's (package-level) HNS state.
	n := &winkernelNode{mock: fakehcn.NewHcnMock(nw), cni: map[string]bool{}}
	for i, ip := range sc.Locals {
		id := fmt.Sprintf("CNI-%d", i)
		plen := uint8(24)
		if strings.Contains(ip, ":") {
			plen = 64
		}
		n.mock.PopulateQueriedEndpoints(id, networkID, ip, conjureMAC("00-15", ip), plen)
		n.cni[id] = true
	}
	if sc.Root != "" {
		// The mock names a populated endpoint by its id.
		n.mock.PopulateQueriedEndpoints(rootEndpointName, networkID, sc.Root, conjureMAC("00-15", sc.Root), 24)
		n.cni[rootEndpointName] = true
	}
	// kube-proxy runs dual-stack only where winkernel's DualStackCompatible
	// says so: never on overlay networks.
	families := []v1.IPFamily{v1.IPv4Protocol}
	if sc.DualStack && !sc.Overlay {
		families = append(families, v1.IPv6Protocol)
	}
	for _, fam := range families {
		cfg := kubeproxyconfig.KubeProxyWinkernelConfiguration{NetworkName: sc.networkName(), EnableDSR: sc.DSR, SourceVip: sc.sourceVIP(),
			ForwardHealthCheckVip: sc.HealthCheckVIP, RootHnsEndpointName: rootEndpointName}
		nodeIP := net.ParseIP(nodeIPv4)
		if fam == v1.IPv6Protocol {
			nodeIP = net.ParseIP(nodeIPv6)
		}
		p, err := winkernel.NewOracleProxier(fam, nodeName, nodeIP, n.mock, hostMAC, healthzPort, cfg)
		if err != nil {
			return nil, fmt.Errorf("winkernel %s proxier: %w", fam, err)
		}
		n.proxiers = append(n.proxiers, p)
	}
	return n, nil
}

// apply feeds one step's objects through winkernel's event handlers: the
// first step as informers deliver the initial lists (adds, then the
// Synced calls, which run the first sync), later steps as updates and
// deletes followed by one sync.
func (n *winkernelNode) apply(prev, cur *objects) error {
	for _, p := range n.proxiers {
		if prev == nil {
			for _, s := range cur.services {
				p.OnServiceAdd(s)
			}
			for _, s := range cur.slices {
				p.OnEndpointSliceAdd(s)
			}
			p.OnServiceSynced()
			p.OnEndpointSlicesSynced()
			continue
		}
		diffObjects(prev.services, cur.services, p.OnServiceAdd, p.OnServiceUpdate, p.OnServiceDelete)
		diffObjects(prev.slices, cur.slices, p.OnEndpointSliceAdd, func(old, s *discovery.EndpointSlice) { p.OnEndpointSliceUpdate(old, s) }, p.OnEndpointSliceDelete)
		if err := p.OracleSync(); err != nil {
			return fmt.Errorf("winkernel sync: %w", err)
		}
	}
	return nil
}

// programmed reads the mock's HNS state back.
func (n *winkernelNode) programmed() (Programmed, error) {
	eps, err := n.mock.ListEndpoints()
	if err != nil {
		return Programmed{}, err
	}
	ipOf := map[string]string{}
	var out Programmed
	seen := map[string]bool{}
	for _, ep := range eps {
		if seen[ep.Id] { // the mock lists an endpoint under its id and its name
			continue
		}
		seen[ep.Id] = true
		var ips []string
		for _, c := range ep.IpConfigurations {
			ips = append(ips, c.IpAddress)
		}
		ipOf[strings.ToLower(ep.Id)] = strings.Join(ips, ",")
		if n.cni[ep.Id] {
			continue
		}
		e := Endpoint{IP: ipOf[strings.ToLower(ep.Id)], Remote: ep.Flags&hcn.EndpointFlagsRemoteEndpoint != 0, MAC: ep.MacAddress}
		for _, pol := range ep.Policies {
			if pol.Type == hcn.NetworkProviderAddress {
				var s hcn.ProviderAddressEndpointPolicySetting
				if err := json.Unmarshal(pol.Settings, &s); err != nil {
					return out, fmt.Errorf("endpoint %s provider address policy: %w", ep.Id, err)
				}
				e.ProviderAddress = s.ProviderAddress
			}
		}
		out.Endpoints = append(out.Endpoints, e)
	}
	lbs, err := n.mock.ListLoadBalancers()
	if err != nil {
		return out, err
	}
	for _, lb := range lbs {
		if len(lb.PortMappings) != 1 {
			return out, fmt.Errorf("load balancer %s has %d port mappings", lb.Id, len(lb.PortMappings))
		}
		pm := lb.PortMappings[0]
		o := LB{VIPs: slices.Sorted(slices.Values(lb.FrontendVIPs)), Protocol: protocolName(pm.Protocol), ExternalPort: pm.ExternalPort, InternalPort: pm.InternalPort, SourceVIP: lb.SourceVIP}
		o.LBFlags = bitNames(uint32(lb.Flags), []flagName{{uint32(hcn.LoadBalancerFlagsDSR), "DSR"}, {2, "IPv6"}})
		o.PortMappingFlags = bitNames(uint32(pm.Flags), []flagName{
			{uint32(hcn.LoadBalancerPortMappingFlagsILB), "ILB"},
			{uint32(hcn.LoadBalancerPortMappingFlagsLocalRoutedVIP), "LocalRoutedVIP"},
			{uint32(hcn.LoadBalancerPortMappingFlagsUseMux), "UseMux"},
			{uint32(hcn.LoadBalancerPortMappingFlagsPreserveDIP), "PreserveDIP"},
			{16, "VipExternalIP"},
		})
		switch pm.DistributionType {
		case hcn.LoadBalancerDistributionNone:
			o.Distribution = "None"
		case hcn.LoadBalancerDistributionSourceIP:
			o.Distribution = "SourceIP"
		default:
			o.Distribution = fmt.Sprintf("distribution-%d", pm.DistributionType)
		}
		o.Backends = backendIPs(lb.HostComputeEndpoints, ipOf)
		out.LBs = append(out.LBs, o)
	}
	return out, nil
}

type flagName struct {
	bit  uint32
	name string
}

// bitNames names the set bits of v; a bit with no name shows as its value.
func bitNames(v uint32, names []flagName) []string {
	var out []string
	for _, f := range names {
		if v&f.bit != 0 {
			out = append(out, f.name)
			v &^= f.bit
		}
	}
	for b := uint32(1); v != 0; b <<= 1 {
		if v&b != 0 {
			out = append(out, fmt.Sprintf("bit-%d", b))
			v &^= b
		}
	}
	slices.Sort(out)
	return out
}

func protocolName(p uint32) string {
	switch p {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	}
	return fmt.Sprintf("proto-%d", p)
}
