package hnsemu

import (
	"encoding/json"
	"net/netip"
	"strings"
)

// hnsCall answers vmcompute.dll's HNSCall, HNS' V1 JSON API. The answer is
// always a response document (the HRESULT is S_OK): {"Success":true,
// "Output":…} or {"Success":false,"Error":…,"ErrorCode":…}, which hcsshim
// parses (hcn/hcnglobals.go and internal/hns/hnsfuncs.go hnsCall).
// Emulated: GET /globals/version (hcn GetGlobals: Output is the Version
// itself), GET /endpoints/ and /endpoints/<id> (hcsshim
// GetHNSEndpointByName lists and matches by name; GetHNSEndpointByID), GET
// /networks/ and /networks/<id>, and GET /policylists/: V1's policy lists
// (the load balancers before V2) are never made here, so the list is empty;
// kube-proxy asks for it once at start as its Windows kernel check
// (k8s.io/kubernetes pkg/proxy/winkernel/supported.go IsCompatible,
// hnslib HNSListPolicyListRequest). Anything else answers not implemented.
func (e *Emulator) hnsCall(n *node, method, path, request string) string {
	ok := func(v any) string {
		b, _ := json.Marshal(struct {
			Success bool
			Output  any
		}{true, v})
		return string(b)
	}
	failed := func(err *hnsError) string { return err.resultJSON() }
	if !strings.EqualFold(method, "GET") {
		return failed(fail(hrNotImpl, "emulator: V1 %s %s is not emulated", method, path))
	}
	p := strings.TrimSuffix(strings.ToLower(path), "/")
	switch {
	case p == "/globals/version":
		return ok(n.profile.Version)
	case p == "/policylists":
		return ok([]struct{}{})
	case p == "/endpoints":
		out := []v1Endpoint{}
		for _, id := range n.ids(kindEndpoint) {
			out = append(out, n.v1Endpoint(n.endpoints[id]))
		}
		return ok(out)
	case strings.HasPrefix(p, "/endpoints/"):
		id := canonGUID(strings.TrimPrefix(p, "/endpoints/"))
		ep := n.endpoints[id]
		if ep == nil {
			return failed(notFound(kindEndpoint, strings.TrimPrefix(path, "/endpoints/")))
		}
		return ok(n.v1Endpoint(ep))
	case p == "/networks":
		out := []v1Network{}
		for _, id := range n.ids(kindNetwork) {
			out = append(out, v1NetworkOf(n.networks[id]))
		}
		return ok(out)
	case strings.HasPrefix(p, "/networks/"):
		id := canonGUID(strings.TrimPrefix(p, "/networks/"))
		nw := n.networks[id]
		if nw == nil {
			return failed(notFound(kindNetwork, strings.TrimPrefix(path, "/networks/")))
		}
		return ok(v1NetworkOf(nw))
	}
	return failed(fail(hrNotImpl, "emulator: V1 %s %s is not emulated", method, path))
}

// v1Endpoint is hcsshim's HNSEndpoint (internal/hns/hnsendpoint.go) as far
// as the emulator fills it; the provider address is the V1 policy
// {"Type":"PA","PA":…} (hcsshim hnspolicy.go PaPolicy; recorded in
// platform_windows/testdata/hns-recorded/endpoint-v1-flannel-remote.json).
type v1Endpoint struct {
	ID                 string            `json:"ID"`
	Name               string            `json:",omitempty"`
	VirtualNetwork     string            `json:",omitempty"`
	VirtualNetworkName string            `json:",omitempty"`
	Policies           []json.RawMessage `json:",omitempty"`
	MacAddress         string            `json:",omitempty"`
	IPAddress          string            `json:",omitempty"`
	IPv6Address        string            `json:",omitempty"`
	PrefixLength       uint8             `json:",omitempty"`
	IsRemoteEndpoint   bool              `json:",omitempty"`
}

func (n *node) v1Endpoint(ep *Endpoint) v1Endpoint {
	out := v1Endpoint{ID: ep.ID, Name: ep.Name, VirtualNetwork: ep.HostComputeNetwork, MacAddress: ep.MacAddress,
		IsRemoteEndpoint: ep.Flags&endpointFlagRemote != 0}
	if nw := n.networks[strings.ToUpper(ep.HostComputeNetwork)]; nw != nil {
		out.VirtualNetworkName = nw.Name
	}
	for _, c := range ep.IpConfigurations {
		a, err := netip.ParseAddr(c.IpAddress)
		if err != nil {
			continue
		}
		if a.Is4() && out.IPAddress == "" {
			out.IPAddress, out.PrefixLength = a.String(), c.PrefixLength
		} else if a.Is6() && out.IPv6Address == "" {
			out.IPv6Address = a.String()
		}
	}
	for _, p := range ep.Policies {
		if !strings.EqualFold(p.Type, "ProviderAddress") && !strings.EqualFold(p.Type, "PA") {
			continue
		}
		var s struct{ ProviderAddress, PA string }
		_ = json.Unmarshal(p.Settings, &s)
		pa := s.ProviderAddress
		if pa == "" {
			pa = s.PA
		}
		b, _ := json.Marshal(struct{ PA, Type string }{pa, "PA"})
		out.Policies = append(out.Policies, b)
	}
	return out
}

// v1Network is hcsshim's HNSNetwork (internal/hns/hnsnetwork.go), reduced.
type v1Network struct {
	ID      string     `json:"ID"`
	Name    string     `json:",omitempty"`
	Type    string     `json:",omitempty"`
	Subnets []v1Subnet `json:",omitempty"`
}

type v1Subnet struct {
	AddressPrefix  string `json:",omitempty"`
	GatewayAddress string `json:",omitempty"`
}

func v1NetworkOf(nw *Network) v1Network {
	out := v1Network{ID: nw.ID, Name: nw.Name, Type: nw.Type}
	for _, ipam := range nw.Ipams {
		for _, s := range ipam.Subnets {
			sub := v1Subnet{AddressPrefix: s.IpAddressPrefix}
			for _, r := range s.Routes {
				if r.DestinationPrefix == "0.0.0.0/0" {
					sub.GatewayAddress = r.NextHop
				}
			}
			out.Subnets = append(out.Subnets, sub)
		}
	}
	return out
}
