package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// Cleanup implements platform.Backend: it deletes the load balancers the
// ledger says are crossproxy's (by id, or pending) and the endpoints
// crossproxy named, nothing else. A load balancer on the frontend of one of
// crossproxy's that is gone is left: it may be another proxy's (a rollback
// to kube-proxy, which deletes every load balancer when it starts and makes
// its own), and kube-proxy removes any left over when it starts.
func (b *Backend) Cleanup(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if err := b.loadLedger(); err != nil {
		return err
	}
	lbs, err := b.hns.ListLoadBalancers(ctx)
	if err != nil {
		return fmt.Errorf("hns cleanup: list load balancers: %w", err)
	}
	b.adopt(lbs, false)
	mine := make([]ownedLB, 0, len(b.owned))
	for _, o := range b.owned {
		mine = append(mine, o)
	}
	var failures []error
	keep := map[string]lbOwner{}
	for i, err := range parallel(ctx, b.cfg.Concurrency, mine, func(ctx context.Context, o ownedLB) error {
		return b.hns.DeleteLoadBalancer(ctx, o.LB.ID)
	}) {
		if err != nil && !errors.Is(err, ErrNotFound) {
			failures = append(failures, fmt.Errorf("delete load balancer %s (%s): %w", mine[i].LB.frontend(), mine[i].LB.ID, err))
			keep[mine[i].LB.ID] = mine[i].Owner
		}
	}
	network := b.cfg.NetworkName
	if network == "" {
		network = b.ledger.Network
	}
	if network == "" {
		b.log.Info("no HNS network named or recorded: crossproxy never synced here, so it made no endpoints")
	} else if nw, err := b.hns.GetNetwork(ctx, network); err != nil {
		failures = append(failures, fmt.Errorf("get HNS network %q: %w", network, err))
	} else if eps, err := b.hns.ListEndpoints(ctx, nw.ID); err != nil {
		failures = append(failures, fmt.Errorf("list endpoints of network %q: %w", nw.Name, err))
	} else {
		var made []Endpoint
		for _, ep := range eps {
			if ours(ep) {
				made = append(made, ep)
			}
		}
		for i, err := range parallel(ctx, b.cfg.Concurrency, made, func(ctx context.Context, ep Endpoint) error {
			return b.hns.DeleteEndpoint(ctx, ep.ID)
		}) {
			if err != nil && !errors.Is(err, ErrNotFound) {
				failures = append(failures, fmt.Errorf("delete endpoint %s (%s): %w", made[i].IP, made[i].ID, err))
			}
		}
	}
	if err := b.releaseSourceVIP(ctx); err != nil {
		failures = append(failures, err)
	}
	b.ledger = ledgerData{LoadBalancers: keep, Frontends: map[string]string{}, Pending: map[string]pendingLB{}, Network: b.ledger.Network, SourceVIP: b.ledger.SourceVIP}
	b.sourceVIP, b.sourceVIPFrom = netip.Addr{}, ""
	b.owned = map[string]ownedLB{}
	b.byIP = map[netip.Addr]Endpoint{}
	b.synced = false
	if err := b.writeLedger(); err != nil {
		failures = append(failures, fmt.Errorf("cleanup: %w", err))
	}
	return errors.Join(failures...)
}
