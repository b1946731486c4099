package hns

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/crossproxy/crossproxy/core"
)

// lbOp is one load balancer change the differ decided.
type lbOp struct {
	kind    opKind
	owner   lbOwner
	desired LoadBalancer // create, update
	current LoadBalancer // update, delete
}

type opKind int

const (
	opCreate opKind = iota
	opUpdate
	opDelete
)

func (k opKind) String() string {
	return [...]string{"create", "update", "delete"}[k]
}

// ownedLB is a load balancer crossproxy owns, as HNS last reported it.
type ownedLB struct {
	LB    LoadBalancer
	Owner lbOwner
}

// desiredLB is a planned load balancer with endpoint ids resolved.
type desiredLB struct {
	LB    LoadBalancer
	Owner lbOwner
}

// diffLoadBalancers compares the desired load balancers of some ports with
// the owned ones of the same ports, matching them by frontend. It returns the
// fewest operations: nothing when equal, one update where HNS can modify in
// place, otherwise a delete and a create.
func diffLoadBalancers(desired []desiredLB, current []ownedLB, canModify bool) []lbOp {
	byFrontend := make(map[string]ownedLB, len(current))
	for _, c := range current {
		byFrontend[c.LB.frontend()] = c
	}
	var ops []lbOp
	for _, d := range desired {
		f := d.LB.frontend()
		c, ok := byFrontend[f]
		delete(byFrontend, f)
		switch {
		case !ok:
			ops = append(ops, lbOp{kind: opCreate, owner: d.Owner, desired: d.LB})
		case reportsAs(c.LB, d.LB):
			if c.Owner != d.Owner {
				// Same HNS object, new owner (a Service recreated with the same frontend):
				// an update with no HNS change records the new owner.
				ops = append(ops, lbOp{kind: opUpdate, owner: d.Owner, desired: c.LB, current: c.LB})
			}
		case canModify:
			ops = append(ops, lbOp{kind: opUpdate, owner: d.Owner, desired: d.LB, current: c.LB})
		default:
			ops = append(ops, lbOp{kind: opDelete, owner: c.Owner, current: c.LB},
				lbOp{kind: opCreate, owner: d.Owner, desired: d.LB})
		}
	}
	rest := make([]ownedLB, 0, len(byFrontend))
	for _, c := range byFrontend {
		rest = append(rest, c)
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].LB.frontend() < rest[j].LB.frontend() })
	for _, c := range rest {
		ops = append(ops, lbOp{kind: opDelete, owner: c.Owner, current: c.LB})
	}
	return ops
}

// reportsAs reports whether the load balancer HNS reported is the one
// wanted, allowing for what HNS is known or suspected to fill in or leave
// out when it reports a load balancer back (platform_windows/testdata/
// hns-recorded and its README): a source VIP on a load balancer sent
// without one (L2Bridge: HNS may report the node's address), and port
// mapping flag 16 (VipExternalIP), which an HNS that does not know it may
// not report. Rewriting would not change what HNS reports, so it would
// only rewrite the load balancer on every full sync and, without modify,
// drop its connections each time.
func reportsAs(reported, want LoadBalancer) bool {
	if !want.SourceVIP.IsValid() {
		reported.SourceVIP = netip.Addr{}
	}
	if want.Flags.VipExternalIP {
		reported.Flags.VipExternalIP = true
	}
	return sameLB(reported, want)
}

// sameLB reports whether two load balancers are the same HNS configuration.
// HNS reports endpoint ids in its own order and case, so they compare as a
// set, case-insensitively.
func sameLB(a, b LoadBalancer) bool {
	return a.Protocol == b.Protocol && a.ExternalPort == b.ExternalPort && a.InternalPort == b.InternalPort &&
		a.SourceVIP == b.SourceVIP && a.Flags == b.Flags && a.SourceIPAffinity == b.SourceIPAffinity &&
		slices.Equal(a.FrontendVIPs, b.FrontendVIPs) && slices.Equal(normalIDs(a.EndpointIDs), normalIDs(b.EndpointIDs))
}

// normalIDs returns ids lower-cased and sorted.
func normalIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strings.ToLower(id)
	}
	sort.Strings(out)
	return out
}

// resolve turns planned load balancers into desired ones with HNS endpoint
// ids. Endpoints HNS does not know (a local pod whose endpoint the CNI has not
// created yet, a remote endpoint whose creation failed), a local endpoint
// HNS only has a remote endpoint for, and the stale endpoints being replaced
// are left out and their ports returned for a retry; a load balancer left
// with no endpoint is not wanted.
func (b *Backend) resolve(planned []plannedLB, stale map[netip.Addr]Endpoint) ([]desiredLB, map[core.PortKey][]netip.Addr) {
	var out []desiredLB
	missing := map[core.PortKey][]netip.Addr{}
	for _, p := range planned {
		lb := p.LB
		lb.EndpointIDs = nil
		for _, ip := range p.Endpoints {
			ep, ok := b.byIP[ip]
			if !ok && b.rootByName && ip == b.root.IP {
				ep, ok = b.root, true // the host endpoint a V2 listing does not show
			}
			_, replaced := stale[ip]
			if !ok || replaced || (ep.Remote && !p.Remote[ip]) {
				missing[p.Owner] = append(missing[p.Owner], ip)
				continue
			}
			lb.EndpointIDs = append(lb.EndpointIDs, ep.ID)
		}
		if len(lb.EndpointIDs) == 0 {
			continue
		}
		sort.Strings(lb.EndpointIDs)
		out = append(out, desiredLB{LB: lb, Owner: ownerOf(p.Owner, p.Kind)})
	}
	return out, missing
}

// parallel runs fn for every item with at most n at a time and returns the
// errors by index (nil entries for successes). One failure does not stop the
// others.
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) []error {
	errs := make([]error, len(items))
	if n < 1 {
		n = 1
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, it := range items {
		if ctx.Err() != nil {
			errs[i] = ctx.Err()
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(ctx, it)
		}()
	}
	wg.Wait()
	return errs
}
