package hns

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/platform"
)

// Programmed implements platform.Backend by reading the Service's load
// balancers and their endpoints back from HNS.
func (b *Backend) Programmed(ctx context.Context, svc types.NamespacedName) (*platform.ProgrammedService, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	if err := b.prepare(ctx, false); err != nil {
		return nil, err
	}
	l, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	byID := map[string]Endpoint{}
	for _, ep := range l.endpoints {
		byID[strings.ToLower(ep.ID)] = ep
	}
	out := &platform.ProgrammedService{Service: svc}
	for _, lb := range l.lbs {
		o, ok := b.ledger.LoadBalancers[lb.ID]
		if !ok || o.Service() != svc {
			continue
		}
		if o.Kind == kindHealthCheck {
			// Not a frontend of the Service: the cloud's probe, forwarded to the host.
			for _, vip := range lb.FrontendVIPs {
				out.Notes = append(out.Notes, fmt.Sprintf("HealthCheckVIP: %s %s forwarded to the host endpoint %s (forwardHealthCheckVip)",
					o.Protocol, netip.AddrPortFrom(vip, lb.ExternalPort), b.cfg.RootEndpointName))
			}
			continue
		}
		var dests []netip.AddrPort
		for _, id := range lb.EndpointIDs {
			if ep, ok := byID[strings.ToLower(id)]; ok {
				dests = append(dests, netip.AddrPortFrom(ep.IP, lb.InternalPort))
			}
		}
		sort.Slice(dests, func(i, j int) bool { return dests[i].Compare(dests[j]) < 0 })
		vips := lb.FrontendVIPs
		if len(vips) == 0 {
			// A load balancer without VIP serves every host address: report the
			// NodePort addresses the core chose.
			for _, f := range b.frontends[o.Key()] {
				if f.Kind == o.Kind && f.Port == lb.ExternalPort {
					vips = append(vips, f.Addr)
				}
			}
		}
		for _, vip := range vips {
			out.Frontends = append(out.Frontends, platform.ProgrammedFrontend{
				Kind: o.Kind, Addr: vip, Port: lb.ExternalPort, Protocol: o.Protocol, Endpoints: dests,
			})
		}
	}
	// A frontend of the applied state that has no load balancer in HNS drops
	// its traffic (HNS cannot reject): report it so.
	type frontendKey struct {
		ap    netip.AddrPort
		proto v1.Protocol
	}
	found := map[frontendKey]bool{}
	for _, f := range out.Frontends {
		found[frontendKey{netip.AddrPortFrom(f.Addr, f.Port), f.Protocol}] = true
	}
	for k, fs := range b.frontends {
		if k.Service != svc {
			continue
		}
		for _, f := range fs {
			if !found[frontendKey{netip.AddrPortFrom(f.Addr, f.Port), f.Protocol}] {
				out.Frontends = append(out.Frontends, f)
			}
		}
	}
	sort.Slice(out.Frontends, func(i, j int) bool {
		a, c := out.Frontends[i], out.Frontends[j]
		if a.Addr != c.Addr {
			return a.Addr.Less(c.Addr)
		}
		if a.Port != c.Port {
			return a.Port < c.Port
		}
		return a.Protocol < c.Protocol
	})
	for feature, detail := range b.noticed[svc] {
		out.Notes = append(out.Notes, feature+": "+detail)
	}
	out.Notes = append(out.Notes, b.nodeNotes(ctx, l.network, l.endpoints)...)
	sort.Strings(out.Notes)
	return out, nil
}

// nodeNotes say, from this read of HNS, which network and which source VIP
// the node uses and what chose each, and the CNI configuration read: what
// `crossproxy explain` run on the node shows although its backend never
// synced.
func (b *Backend) nodeNotes(ctx context.Context, nw Network, eps []Endpoint) []string {
	notes := []string{fmt.Sprintf("HNSNetwork: %s (%s, id %s, subnets %s), found by %s", nw.Name, nw.Type, nw.ID, cmp.Or(prefixes(nw.Subnets), "none"), b.networkFrom),
		"CNIConfig: " + b.cfg.CNI.String()}
	if !nw.isOverlay() {
		return notes
	}
	vip, from := b.sourceVIP, b.sourceVIPFrom
	if !vip.IsValid() {
		vip, from = b.previewSourceVIP(ctx, nw, eps)
	}
	if !vip.IsValid() {
		return append(notes, "SourceVIP: none yet: "+from)
	}
	return append(notes, fmt.Sprintf("SourceVIP: overlay source VIP %s, chosen by %s", vip, from))
}

// previewSourceVIP is chooseSourceVIP without a sync: what the node would
// use now, from the configuration, the endpoints just read and the ledger,
// reserving nothing. Without the Node's podCIDRs at hand, a network that
// reports no subnet accepts any address.
func (b *Backend) previewSourceVIP(ctx context.Context, nw Network, eps []Endpoint) (netip.Addr, string) {
	in := func(a netip.Addr) bool {
		return len(nw.Subnets) == 0 || slices.ContainsFunc(nw.Subnets, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	if b.cfg.SourceVIP.IsValid() {
		return b.cfg.SourceVIP, cmp.Or(b.cfg.SourceVIPOrigin, "configuration")
	}
	var own, calico *Endpoint
	for i, ep := range eps {
		switch {
		case ep.Remote || !in(ep.IP):
		case isCalicoEndpointName(ep.Name, nw.Name) && calico == nil:
			calico = &eps[i]
		case ep.Name == sourceVIPEndpointName && own == nil:
			own = &eps[i]
		}
	}
	switch {
	case calico != nil:
		return calico.IP, fmt.Sprintf("the existing HNS endpoint %q (calico-node's)", calico.Name)
	case own != nil:
		return own.IP, fmt.Sprintf("the existing HNS endpoint %q", own.Name)
	}
	if r := b.ledger.SourceVIP; r != nil && in(r.Address) {
		if ipam := b.ipam(r); ipam != nil {
			if held, err := ipam.Holds(ctx, r.Subnet, r.Address); err != nil || !held {
				return netip.Addr{}, fmt.Sprintf("the reservation %s recorded in the ledger is no longer held by the IPAM store (%v); the next sync reserves anew", r.Address, err)
			}
		}
		return r.Address, fmt.Sprintf("the reservation recorded in the ledger (subnet %s), still held by the IPAM store", r.Subnet)
	}
	return netip.Addr{}, fmt.Sprintf("no source-VIP endpoint on the network and no reservation: the next sync reserves one from %s through the IPAM plugin", cmp.Or(prefixes(nw.Subnets), "none"))
}
