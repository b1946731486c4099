//go:build windows

package hns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/Microsoft/hcsshim"
	"github.com/Microsoft/hcsshim/hcn"
)

// GetEndpointByName implements HNS. It asks the V2 API first and, when that
// does not answer with the endpoint, the V1 API: endpoints a CNI created
// through V1 (Calico's Calico_ep, calico dataplane_windows.go
// createAndAttachVxlanHostEP; flannel host-gw's cbr0_ep; the SDN scripts'
// cbr0) are not always visible to V2 queries (kubernetes #110591, #110592:
// winkernel's V2 query failed to retrieve dockershim CNIs' V1 endpoints).
// V1 is asked after any V2 failure, not only "not found", because that
// issue does not say whether V2 returned nothing or an error. Only when V2
// said "not found" does V1's "not found" make the answer ErrNotFound; after
// another V2 failure the result carries V2's error, so a failing HNS is never
// reported as a missing endpoint. Both answers go through pure conversions,
// endpointFromHCNNamed and endpointFromV1, tested on JSON.
func (HCN) GetEndpointByName(ctx context.Context, name string) (Endpoint, error) {
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	ep, v2err := hcn.GetEndpointByName(name)
	if v2err == nil {
		return endpointFromHCNNamed(ep), nil
	}
	if err := ctx.Err(); err != nil {
		return Endpoint{}, err
	}
	v1, v1err := hcsshim.GetHNSEndpointByName(name)
	switch {
	case v1err == nil:
		return endpointFromV1(v1), nil
	case isNotFound(v2err):
		return Endpoint{}, fmt.Errorf("get endpoint named %q (V2, then V1 API): %w", name, mapErr(v1err))
	}
	return Endpoint{}, fmt.Errorf("get endpoint named %q: V2 API: %w (V1 API: %v)", name, mapErr(v2err), v1err)
}

// isNotFound reports whether an hcn or hcsshim error says the object is not
// there (after mapErr, as every other method sees it).
func isNotFound(err error) bool { return errors.Is(mapErr(err), ErrNotFound) }

// endpointFromHCNNamed is the one Endpoint a by-name lookup returns for a V2
// endpoint: its first usable IP configuration. An endpoint without any usable
// address is still returned (id, name, MAC, provider address) with an invalid
// IP, because the caller asked whether the name exists, and an address-less
// endpoint can serve no load balancer, which the caller checks with IsValid.
func endpointFromHCNNamed(ep *hcn.HostComputeEndpoint) Endpoint {
	if all := endpointsFromHCN(ep); len(all) > 0 {
		return all[0]
	}
	return Endpoint{ID: strings.ToLower(ep.Id), Name: ep.Name, Remote: ep.Flags&hcn.EndpointFlagsRemoteEndpoint != 0, MAC: ep.MacAddress,
		ProviderAddress: providerAddressOfPolicies(ep.Policies)}
}

// endpointFromV1 converts an endpoint the V1 API reports. V1 has one IPv4
// and one IPv6 field; the IPv4 address is preferred as crossproxy's overlay
// networks (the only place V1 endpoints matter: Calico's VXLAN Calico_ep)
// are IPv4. The provider address is the V1 policy {"Type":"PA","PA":"…"}
// Calico writes (calico dataplane_windows.go createAndAttachVxlanHostEP,
// hcsshim hnspolicy.go PaPolicy); an endpoint without it has an invalid
// ProviderAddress, meaning "not reported".
func endpointFromV1(ep *hcsshim.HNSEndpoint) Endpoint {
	out := Endpoint{ID: strings.ToLower(ep.Id), Name: ep.Name, Remote: ep.IsRemoteEndpoint, MAC: ep.MacAddress}
	for _, raw := range []([]byte){ep.IPAddress, ep.IPv6Address} {
		if a, ok := netip.AddrFromSlice(raw); ok && !a.IsUnspecified() {
			out.IP = a.Unmap()
			break
		}
	}
	for _, raw := range ep.Policies {
		var p struct {
			Type string
			PA   string
		}
		if json.Unmarshal(raw, &p) != nil || !strings.EqualFold(p.Type, string(hcsshim.PA)) {
			continue
		}
		if a, err := netip.ParseAddr(p.PA); err == nil {
			out.ProviderAddress = a.Unmap()
		}
	}
	return out
}
