//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strings"

	"github.com/Microsoft/hcsshim/hcn"
)

// HCN is the real HNS, reached through github.com/Microsoft/hcsshim/hcn. It
// only converts between hcn's types and this package's; every decision is
// made by the planner, differ and applier, which are tested with Fake.
//
// hcn's calls take no context and cannot be abandoned safely (HNS would
// finish a create nobody records), so each method checks its context before
// it calls HNS: a cancelled sync makes no further call.
type HCN struct{}

// portMappingFlagsVipExternalIP is HNS' port mapping flag 16, which hcn
// v0.15.0 does not name (kube-proxy defines it the same way).
const portMappingFlagsVipExternalIP hcn.LoadBalancerPortMappingFlags = 16

var _ HNS = HCN{}

// Features implements HNS from the HNS version and the tables of the
// versions each feature needs (hcn's, and crossproxy's own for in-place
// modify). It asks HNS every time: hcn's own cached
// query would remember a failure (HNS not started yet at boot) forever.
func (HCN) Features(ctx context.Context) (Features, error) {
	if err := ctx.Err(); err != nil {
		return Features{}, err
	}
	g, err := hcn.GetGlobals()
	if err != nil {
		return Features{}, fmt.Errorf("query HNS version: %w", mapErr(err))
	}
	return featuresOf(g.Version), nil
}

// featuresOf says what an HNS version supports.
func featuresOf(v hcn.Version) Features {
	return Features{
		APIV2:              inRanges(v, hcn.V2ApiSupport),
		DSR:                inRanges(v, hcn.DSRVersion),
		IPv6DualStack:      inRanges(v, hcn.IPv6DualStackVersion),
		ModifyLoadBalancer: inRanges(v, modifyLoadBalancerVersions),
		SessionAffinity:    inRanges(v, hcn.SessionAffinityVersion),
		RemoteSubnet:       inRanges(v, hcn.RemoteSubnetVersion),
	}
}

// modifyLoadBalancerVersions are the HNS versions whose in-place
// ModifyLoadBalancer keeps what it is given: 15.5 and later within 15.x, and
// 16.0 and later. It is crossproxy's own table, not hcsshim v0.15.0's
// hcn.ModifyLoadbalancerVersion (15.4 and later): HNS 15.4 (Windows Server
// 2025) accepts the modify and keeps the load balancer's old endpoints
// (kubernetes #131466), so on 15.4 crossproxy must delete and create. The
// ranges are microsoft/hnslib's hcn/hcnglobals.go ModifyLoadbalancerVersion
// after its commits ae833b3 (15.5 to 15.x, taken into kube-proxy by
// kubernetes #131506) and 1fbf93f (16.0 and later).
var modifyLoadBalancerVersions = hcn.VersionRanges{
	{MinVersion: hcn.Version{Major: 15, Minor: 5}, MaxVersion: hcn.Version{Major: 15, Minor: math.MaxInt32}},
	{MinVersion: hcn.Version{Major: 16, Minor: 0}, MaxVersion: hcn.Version{Major: math.MaxInt32, Minor: math.MaxInt32}},
}

func inRanges(v hcn.Version, ranges hcn.VersionRanges) bool {
	for _, r := range ranges {
		above := v.Major > r.MinVersion.Major || (v.Major == r.MinVersion.Major && v.Minor >= r.MinVersion.Minor)
		below := v.Major < r.MaxVersion.Major || (v.Major == r.MaxVersion.Major && v.Minor <= r.MaxVersion.Minor)
		if above && below {
			return true
		}
	}
	return false
}

// GetNetwork implements HNS.
func (HCN) GetNetwork(ctx context.Context, name string) (Network, error) {
	if err := ctx.Err(); err != nil {
		return Network{}, err
	}
	nw, err := hcn.GetNetworkByName(name)
	if err != nil {
		return Network{}, fmt.Errorf("get network %q: %w", name, mapErr(err))
	}
	return networkFromHCN(nw)
}

// ListNetworks implements HNS. A network whose policies do not convert is
// listed with its name and type only: it is a candidate to name, not one to
// program.
func (HCN) ListNetworks(ctx context.Context) ([]Network, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nws, err := hcn.ListNetworks()
	if err != nil {
		return nil, fmt.Errorf("list networks: %w", mapErr(err))
	}
	out := make([]Network, 0, len(nws))
	for i := range nws {
		nw, err := networkFromHCN(&nws[i])
		if err != nil {
			nw = Network{ID: nws[i].Id, Name: nws[i].Name, Type: NetworkType(nws[i].Type)}
		}
		out = append(out, nw)
	}
	return out, nil
}

// ListEndpoints implements HNS. An endpoint with several IP configurations
// (dual-stack pods) is returned once per address, with the same id.
func (HCN) ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	eps, err := hcn.ListEndpointsOfNetwork(networkID)
	if err != nil {
		return nil, fmt.Errorf("list endpoints of network %s: %w", networkID, mapErr(err))
	}
	var out []Endpoint
	for i := range eps {
		out = append(out, endpointsFromHCN(&eps[i])...)
	}
	return out, nil
}

// CreateRemoteEndpoint implements HNS.
func (HCN) CreateRemoteEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error) {
	ep.Remote = true
	return createEndpoint(ctx, networkID, ep)
}

// CreateLocalEndpoint implements HNS.
func (HCN) CreateLocalEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error) {
	ep.Remote = false
	return createEndpoint(ctx, networkID, ep)
}

func createEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	req, err := endpointToHCN(ep)
	if err != nil {
		return Endpoint{}, err
	}
	nw := &hcn.HostComputeNetwork{Id: networkID}
	got, err := nw.CreateEndpoint(req)
	if err != nil {
		return Endpoint{}, fmt.Errorf("create endpoint %s: %w", ep.IP, mapErr(err))
	}
	for _, e := range endpointsFromHCN(got) {
		if e.IP == ep.IP {
			return e, nil
		}
	}
	return Endpoint{}, fmt.Errorf("create endpoint %s: HNS returned endpoint %s without that address", ep.IP, got.Id)
}

// DeleteEndpoint implements HNS.
func (HCN) DeleteEndpoint(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := (&hcn.HostComputeEndpoint{Id: id}).Delete(); err != nil {
		return fmt.Errorf("delete endpoint %s: %w", id, mapErr(err))
	}
	return nil
}

// ListLoadBalancers implements HNS.
func (HCN) ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lbs, err := hcn.ListLoadBalancers()
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", mapErr(err))
	}
	out := make([]LoadBalancer, 0, len(lbs))
	for i := range lbs {
		out = append(out, loadBalancerFromHCN(&lbs[i]))
	}
	return out, nil
}

// CreateLoadBalancer implements HNS.
func (HCN) CreateLoadBalancer(ctx context.Context, lb LoadBalancer) (LoadBalancer, error) {
	if err := ctx.Err(); err != nil {
		return LoadBalancer{}, err
	}
	got, err := loadBalancerToHCN(lb).Create()
	if err != nil {
		return LoadBalancer{}, fmt.Errorf("create load balancer %s: %w", lb.frontend(), mapErr(err))
	}
	return loadBalancerFromHCN(got), nil
}

// UpdateLoadBalancer implements HNS with HNS' in-place modify.
func (HCN) UpdateLoadBalancer(ctx context.Context, id string, lb LoadBalancer) (LoadBalancer, error) {
	if err := ctx.Err(); err != nil {
		return LoadBalancer{}, err
	}
	got, err := loadBalancerToHCN(lb).Update(id)
	if err != nil {
		return LoadBalancer{}, fmt.Errorf("modify load balancer %s (%s): %w", lb.frontend(), id, mapErr(err))
	}
	return loadBalancerFromHCN(got), nil
}

// DeleteLoadBalancer implements HNS.
func (HCN) DeleteLoadBalancer(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := (&hcn.HostComputeLoadBalancer{Id: id}).Delete(); err != nil {
		return fmt.Errorf("delete load balancer %s: %w", id, mapErr(err))
	}
	return nil
}

func networkFromHCN(nw *hcn.HostComputeNetwork) (Network, error) {
	// The id stays as HNS gave it: it is passed back in HNS queries.
	out := Network{ID: nw.Id, Name: nw.Name, Type: NetworkType(nw.Type)}
	for _, ipam := range nw.Ipams {
		for _, s := range ipam.Subnets {
			// A prefix HNS reports but Go cannot read serves no source VIP:
			// skipped, so the Node's pod CIDRs stand in rather than the
			// network failing every sync.
			if p, err := netip.ParsePrefix(s.IpAddressPrefix); err == nil {
				out.Subnets = append(out.Subnets, p.Masked())
			}
		}
	}
	for _, p := range nw.Policies {
		if p.Type != hcn.RemoteSubnetRoute {
			continue
		}
		var s hcn.RemoteSubnetRoutePolicySetting
		if err := json.Unmarshal(p.Settings, &s); err != nil {
			return Network{}, fmt.Errorf("network %q: RemoteSubnetRoute policy: %w", nw.Name, err)
		}
		prefix, err1 := netip.ParsePrefix(s.DestinationPrefix)
		pa, err2 := netip.ParseAddr(s.ProviderAddress)
		if err := errors.Join(err1, err2); err != nil {
			return Network{}, fmt.Errorf("network %q: RemoteSubnetRoute policy: %w", nw.Name, err)
		}
		out.RemoteSubnets = append(out.RemoteSubnets, RemoteSubnet{Prefix: prefix.Masked(), ProviderAddress: pa})
	}
	return out, nil
}

// endpointsFromHCN converts an endpoint HNS reports, once per usable address.
// Ids are lower-cased (HNS writes them in either case; kubernetes #67827 and
// projectcalico/calico #4682 show upper-case ones); the provider address is
// read by providerAddressOfPolicies.
func endpointsFromHCN(ep *hcn.HostComputeEndpoint) []Endpoint {
	base := Endpoint{ID: strings.ToLower(ep.Id), Name: ep.Name, Remote: ep.Flags&hcn.EndpointFlagsRemoteEndpoint != 0, MAC: ep.MacAddress,
		ProviderAddress: providerAddressOfPolicies(ep.Policies)}
	var out []Endpoint
	for _, c := range ep.IpConfigurations {
		a, err := netip.ParseAddr(c.IpAddress)
		if err != nil {
			continue // an endpoint without a usable address cannot back a load balancer
		}
		e := base
		e.IP = a.Unmap()
		out = append(out, e)
	}
	return out
}

// providerAddressOfPolicies reads a V2 endpoint's provider address in each
// shape it is known to take: the V2 policy hcn defines and kube-proxy and
// crossproxy send, {"Type":"ProviderAddress","Settings":{"ProviderAddress":
// "…"}} (hcsshim hcnpolicy.go ProviderAddressEndpointPolicySetting), and the
// V1 policy's type and key, "PA", for an endpoint a CNI created through V1
// (Calico's Calico_ep, flannel's remote endpoints: {"Type":"PA","PA":"…"},
// flannel-io/flannel backend/vxlan/vxlan_network_windows_test.go) should HNS
// report it under Settings. A V1 policy whose address sits beside Type,
// outside Settings, does not survive hcn's EndpointPolicy type and so reads
// as absent. Absent or unreadable gives an invalid address, which callers
// take as "HNS did not say", never as "no provider address": a remote
// endpoint is not stale merely because HNS left its PA out of a listing.
func providerAddressOfPolicies(policies []hcn.EndpointPolicy) netip.Addr {
	for _, p := range policies {
		if !strings.EqualFold(string(p.Type), string(hcn.NetworkProviderAddress)) && !strings.EqualFold(string(p.Type), "PA") {
			continue
		}
		var s struct {
			ProviderAddress string
			PA              string
		}
		if len(p.Settings) == 0 || json.Unmarshal(p.Settings, &s) != nil {
			continue
		}
		for _, v := range []string{s.ProviderAddress, s.PA} {
			if a, err := netip.ParseAddr(v); err == nil && !a.IsUnspecified() {
				return a.Unmap()
			}
		}
	}
	return netip.Addr{}
}

// endpointToHCN converts an endpoint to create: a remote one (flagged) or a
// local one (the overlay source VIP), both with their provider address.
func endpointToHCN(ep Endpoint) (*hcn.HostComputeEndpoint, error) {
	out := &hcn.HostComputeEndpoint{
		Name:             ep.Name,
		IpConfigurations: []hcn.IpConfig{{IpAddress: ep.IP.String()}},
		MacAddress:       ep.MAC,
		SchemaVersion:    hcn.V2SchemaVersion(),
	}
	if ep.Remote {
		out.Flags = hcn.EndpointFlagsRemoteEndpoint
	}
	if ep.ProviderAddress.IsValid() {
		s, err := json.Marshal(hcn.ProviderAddressEndpointPolicySetting{ProviderAddress: ep.ProviderAddress.String()})
		if err != nil {
			return nil, fmt.Errorf("remote endpoint %s: provider address policy: %w", ep.IP, err)
		}
		out.Policies = append(out.Policies, hcn.EndpointPolicy{Type: hcn.NetworkProviderAddress, Settings: s})
	}
	return out, nil
}

func loadBalancerToHCN(lb LoadBalancer) *hcn.HostComputeLoadBalancer {
	out := &hcn.HostComputeLoadBalancer{
		HostComputeEndpoints: append([]string(nil), lb.EndpointIDs...),
		SchemaVersion:        hcn.V2SchemaVersion(),
		Flags:                hcn.LoadBalancerFlagsNone,
	}
	if lb.SourceVIP.IsValid() {
		out.SourceVIP = lb.SourceVIP.String()
	}
	for _, v := range lb.FrontendVIPs {
		out.FrontendVIPs = append(out.FrontendVIPs, v.String())
	}
	if lb.Flags.DSR {
		out.Flags |= hcn.LoadBalancerFlagsDSR
	}
	if lb.Flags.IPv6 {
		out.Flags |= hcn.LoadBalancerFlagsIPv6
	}
	pm := hcn.LoadBalancerPortMapping{Protocol: uint32(lb.Protocol), InternalPort: lb.InternalPort, ExternalPort: lb.ExternalPort}
	if lb.Flags.LocalRoutedVIP {
		pm.Flags |= hcn.LoadBalancerPortMappingFlagsLocalRoutedVIP
	}
	if lb.Flags.PreserveDIP {
		pm.Flags |= hcn.LoadBalancerPortMappingFlagsPreserveDIP
	}
	if lb.Flags.VipExternalIP {
		pm.Flags |= portMappingFlagsVipExternalIP
	}
	if lb.SourceIPAffinity {
		pm.DistributionType = hcn.LoadBalancerDistributionSourceIP
	}
	out.PortMappings = []hcn.LoadBalancerPortMapping{pm}
	return out
}

// loadBalancerFromHCN converts what HNS reports into what crossproxy would
// have sent for it, so that an unchanged load balancer compares equal to the
// plan and is not rewritten on every full sync:
//   - only the flag bits crossproxy sets are kept: HNS may report others
//     (ILB, UseMux, bits newer than hcn), which crossproxy never asks for;
//   - a SourceVIP of 0.0.0.0 or :: is no source VIP (crossproxy sends none
//     on L2Bridge, and an unspecified address is never a usable one);
//   - ids are lower-cased and the endpoint ids sorted;
//   - a NodePort load balancer is reported without frontend VIPs.
//
// The last is a choice with a risk. crossproxy (and kube-proxy, winkernel
// proxier.go) create NodePort load balancers without VIPs, meaning every
// host address, and mark them, and only them, with the port mapping flag
// LocalRoutedVIP. kube-proxy's PR #78874 records that HNS "replaces the empty
// VIP with NodeIP" in V1; should V2 report that address back, the load
// balancer's identity (frontend(): "TCP/*/30080") would change to the node
// IP's and crossproxy would neither adopt nor match its own load balancer,
// deleting and creating it on every full sync. So the VIPs of a
// LocalRoutedVIP load balancer are dropped. The risk: a foreign load
// balancer with LocalRoutedVIP and real VIPs (no proxy known to crossproxy
// makes one) is then seen as a wildcard NodePort on its protocol and port.
// crossproxy then treats it as holding its NodePort's frontend (a refused
// frontend, reported), and, should crossproxy's own load balancer on that
// port have vanished from HNS or its create have been interrupted, adopts it
// by that frontend (adopt.go adopt) and may later modify or delete it. The
// recordings (testdata/hns-recorded: calico #7305's NodePort load balancer
// read back without VIPs, and its variant with the node IP) read the same.
func loadBalancerFromHCN(lb *hcn.HostComputeLoadBalancer) LoadBalancer {
	out := LoadBalancer{
		ID:    strings.ToLower(lb.Id),
		Flags: LBFlags{DSR: lb.Flags&hcn.LoadBalancerFlagsDSR != 0, IPv6: lb.Flags&hcn.LoadBalancerFlagsIPv6 != 0},
	}
	if a, err := netip.ParseAddr(lb.SourceVIP); err == nil && !a.IsUnspecified() {
		out.SourceVIP = a.Unmap()
	}
	nodePort := len(lb.PortMappings) > 0 && lb.PortMappings[0].Flags&hcn.LoadBalancerPortMappingFlagsLocalRoutedVIP != 0
	for _, v := range lb.FrontendVIPs {
		if nodePort {
			break
		}
		if a, err := netip.ParseAddr(v); err == nil {
			out.FrontendVIPs = append(out.FrontendVIPs, a.Unmap())
		}
	}
	sort.Slice(out.FrontendVIPs, func(i, j int) bool { return out.FrontendVIPs[i].Less(out.FrontendVIPs[j]) })
	for _, id := range lb.HostComputeEndpoints {
		out.EndpointIDs = append(out.EndpointIDs, strings.ToLower(id))
	}
	sort.Strings(out.EndpointIDs)
	if len(lb.PortMappings) > 0 {
		pm := lb.PortMappings[0]
		out.Protocol = Protocol(pm.Protocol)
		out.InternalPort, out.ExternalPort = pm.InternalPort, pm.ExternalPort
		out.Flags.LocalRoutedVIP = pm.Flags&hcn.LoadBalancerPortMappingFlagsLocalRoutedVIP != 0
		out.Flags.PreserveDIP = pm.Flags&hcn.LoadBalancerPortMappingFlagsPreserveDIP != 0
		out.Flags.VipExternalIP = pm.Flags&portMappingFlagsVipExternalIP != 0
		out.SourceIPAffinity = pm.DistributionType == hcn.LoadBalancerDistributionSourceIP
	}
	return out
}
