package hns

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/crossproxy/crossproxy/platform"
)

var _ platform.ListingDriftChecker = (*Backend)(nil)

// driftDuty bounds what the drift check costs HNS: after a check whose
// listing took d, the next one runs no sooner than (driftDuty-1) x d later,
// so at most 1/driftDuty of the time goes to listing. hcn lists by
// enumerating ids and then opening, querying and closing each object
// (3 calls into computenetwork.dll apiece): at 2,000 Services a check is
// thousands of calls (test/results/windows.md, TestHNSCallCost), and a busy
// HNS answers them slower, which stretches the interval by itself. Below a
// few hundred objects the check runs every time the runner asks (once per
// SyncPeriod): a listing shorter than driftCheap sets no wait.
const (
	driftDuty  = 10
	driftCheap = 100 * time.Millisecond
)

// DriftCheckLists implements platform.ListingDriftChecker: HNS has no change
// notifications, so the check lists, and the runner calls it once per
// SyncPeriod rather than before every sync.
func (*Backend) DriftCheckLists() {}

// CheckDrift implements platform.DriftChecker with one read of HNS (3 calls:
// the network, its endpoints, the load balancers). It names what changed
// behind crossproxy's back since its last sync: the network recreated under
// a new id (flannel on restart), crossproxy's load balancers gone or
// changed, its remote endpoints and the source-VIP endpoint gone, the host
// endpoint of forwardHealthCheckVip gone, replaced or newly there. The
// runner makes the next sync full when it names any, and that sync uses
// this listing instead of reading HNS again.
func (b *Backend) CheckDrift(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errClosed
	}
	b.listed = nil
	if !b.synced {
		return nil, nil // nothing programmed yet: the coming full sync reads everything
	}
	if now := b.now(); now.Before(b.driftNext) {
		return nil, nil // the last check's cost says wait (driftDuty)
	}
	start := time.Now()
	l, err := b.list(ctx)
	if d := time.Since(start); d >= driftCheap {
		b.driftNext = b.now().Add(d * (driftDuty - 1))
	}
	if err != nil {
		return nil, fmt.Errorf("hns: check for drift: %w", err)
	}
	counts := map[string]int{}
	if !strings.EqualFold(l.network.ID, b.network.ID) {
		l.drift = append(l.drift, fmt.Sprintf("HNS network %q recreated (id %s, was %s)", l.network.Name, l.network.ID, b.network.ID))
		counts["network"]++
	} else {
		if d := remoteSubnetsChanged(b.network, l.network); d != "" {
			// A node joined or left (flannel's handleSubnetEvents, Calico's
			// VXLAN manager add and remove RemoteSubnetRoute policies):
			// remote endpoints planned before may have the wrong provider
			// address. The full sync that follows plans with these.
			l.drift = append(l.drift, d)
			counts["remote subnets"]++
		}
		l.drift = append(l.drift, b.driftedEndpoints(l.endpoints, counts)...)
	}
	lbs := b.drifted(l.lbs)
	if len(lbs) > 0 {
		counts["load balancer"] += len(lbs)
	}
	l.drift = append(l.drift, lbs...)
	if len(l.drift) == 0 {
		b.noteOthers(l.lbs) // a repair's refresh notes them (adopt)
		return nil, nil
	}
	b.log.WithField("drifted", strings.Join(l.drift, "; ")).Warn("HNS objects changed or gone behind crossproxy's back: repairing them in the next sync")
	if b.cfg.Repairs != nil {
		for object, n := range counts {
			b.cfg.Repairs.Repaired(object, n)
		}
	}
	b.listed = l
	return l.drift, nil
}

// driftedEndpoints compares the network's endpoints with those crossproxy
// relies on: the remote endpoints it made, the overlay source-VIP endpoint,
// and the host endpoint of forwardHealthCheckVip. counts gets one per
// object found drifted, but for remote endpoints: the repair counts those it
// makes again.
func (b *Backend) driftedEndpoints(eps []Endpoint, counts map[string]int) []string {
	byID := make(map[string]Endpoint, len(eps))
	byIP := map[string]bool{}
	var root Endpoint
	for _, ep := range eps {
		byID[strings.ToLower(ep.ID)] = ep
		byIP[ep.IP.String()] = true
		if ep.Name == b.cfg.RootEndpointName && !ep.Remote {
			root = ep
		}
	}
	var out []string
	for _, ep := range b.byIP {
		if !ep.Remote || !strings.HasPrefix(ep.Name, remoteEndpointPrefix) {
			continue
		}
		got, ok := byID[strings.ToLower(ep.ID)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("remote endpoint %s missing", ep.IP))
		case got.ProviderAddress.IsValid() && ep.ProviderAddress.IsValid() && got.ProviderAddress != ep.ProviderAddress:
			out = append(out, fmt.Sprintf("remote endpoint %s changed (provider address %s, was %s)", ep.IP, got.ProviderAddress, ep.ProviderAddress))
		}
	}
	if b.network.isOverlay() && b.sourceVIP.IsValid() && !byIP[b.sourceVIP.String()] && b.calicoByName.IP != b.sourceVIP {
		out = append(out, fmt.Sprintf("source-VIP endpoint %s missing", b.sourceVIP))
		counts["source-VIP endpoint"]++
	}
	if b.cfg.ForwardHealthCheckVIP && !(b.rootByName && !root.IP.IsValid()) && (root.IP != b.root.IP || !strings.EqualFold(root.ID, b.root.ID)) {
		switch {
		case !root.IP.IsValid():
			out = append(out, fmt.Sprintf("host endpoint %q missing", b.cfg.RootEndpointName))
		case !b.root.IP.IsValid():
			out = append(out, fmt.Sprintf("host endpoint %q appeared", b.cfg.RootEndpointName))
		default:
			out = append(out, fmt.Sprintf("host endpoint %q replaced (%s, was %s)", b.cfg.RootEndpointName, root.IP, b.root.IP))
		}
		counts["host endpoint"]++
	}
	sort.Strings(out)
	return out
}

// drifted compares HNS' load balancers with what crossproxy owns, by id and
// content, and names each owned one HNS no longer holds or holds changed.
func (b *Backend) drifted(lbs []LoadBalancer) []string {
	byID := make(map[string]LoadBalancer, len(lbs))
	for _, lb := range lbs {
		byID[strings.ToLower(lb.ID)] = lb
	}
	var out []string
	for id, o := range b.owned {
		got, ok := byID[strings.ToLower(id)]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s of %s missing", o.Owner.Kind, o.LB.frontend(), o.Owner.Key()))
		case !reportsAs(got, o.LB):
			out = append(out, fmt.Sprintf("%s %s of %s changed", o.Owner.Kind, o.LB.frontend(), o.Owner.Key()))
		}
	}
	sort.Strings(out)
	return out
}

// remoteSubnetsChanged says how the overlay network's remote subnets
// (RemoteSubnetRoute policies: each other node's pod subnet and its
// provider address) differ between was and now, or "" when they do not.
func remoteSubnetsChanged(was, now Network) string {
	if !now.isOverlay() {
		return ""
	}
	key := func(nw Network) map[string]bool {
		m := map[string]bool{}
		for _, s := range nw.RemoteSubnets {
			m[s.Prefix.String()+" via "+s.ProviderAddress.String()] = true
		}
		return m
	}
	w, n := key(was), key(now)
	var added, gone []string
	for k := range n {
		if !w[k] {
			added = append(added, k)
		}
	}
	for k := range w {
		if !n[k] {
			gone = append(gone, k)
		}
	}
	if len(added)+len(gone) == 0 {
		return ""
	}
	sort.Strings(added)
	sort.Strings(gone)
	return fmt.Sprintf("HNS network %q remote subnets changed (added %s; removed %s)", now.Name, orNone(added), orNone(gone))
}
