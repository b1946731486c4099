package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// errModifyIgnored is a modify HNS accepted without applying it: handled as
// E_NOTIMPL (delete + create, modify off).
var errModifyIgnored = fmt.Errorf("HNS kept the old endpoints after the modify: %w", ErrNotImplemented)

// round is one reconcile: what failed (retried next sync) and what HNS
// cannot do for a Service (notices). Its methods run HNS calls in parallel
// and record results under mu.
type round struct {
	b        *Backend
	mu       sync.Mutex
	failures []error
	notices  []notice
	// recreate are updates HNS refused with E_NOTIMPL: done as delete + create.
	recreate []lbOp
	// exists are creates HNS refused with ERROR_ALREADY_EXISTS.
	exists []lbOp
}

func (r *round) fail(k *core.PortKey, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, err)
	if k != nil {
		r.b.retry[*k] = struct{}{}
	}
}

// reconcile applies plan for the ports in scope, in this order: the overlay
// source VIP endpoint (the sync stops if it cannot be made, as kube-proxy's),
// stale endpoints crossproxy made, remote endpoints, load balancer deletes,
// creates and updates, then the endpoints nothing uses any more (full syncs).
//
// A frontend held by a load balancer crossproxy does not own (or by a host
// port reservation) is not a failure to retry at once: it is returned as a
// notice and tried again on full syncs.
func (b *Backend) reconcile(ctx context.Context, plan hnsPlan, scope map[core.PortKey]struct{}, full bool, goneClusterIPs map[netip.Addr]bool) ([]notice, error) {
	r := &round{b: b}
	if err := b.ensureSourceVIPEndpoint(ctx, plan); err != nil {
		return nil, err
	}
	staleUsed := r.replaceStaleEndpoints(ctx, plan)
	r.createRemoteEndpoints(ctx, plan, staleUsed)

	desired, missing := b.resolve(plan.LoadBalancers, staleUsed)
	if !full && missingLocal(missing, plan) {
		// A new local pod the CNI attached after the last listing: one list call.
		if err := b.listEndpoints(ctx); err != nil {
			return nil, err
		}
		desired, missing = b.resolve(plan.LoadBalancers, staleUsed)
	}
	for k, ips := range missing {
		b.retry[k] = struct{}{}
		b.log.WithFields(logrus.Fields{"port": k.String(), "endpoints": fmt.Sprint(ips)}).Warn("endpoints not known to HNS yet; left out and retried")
	}

	var current []ownedLB
	// was are the endpoints the scope's load balancers use before this
	// sync: those no load balancer uses after it are deleted in this sync
	// (releaseUnused), as kube-proxy's refcount does.
	was := map[string]bool{}
	for _, o := range b.owned {
		if _, ok := scope[o.Owner.Key()]; ok {
			current = append(current, o)
			for _, id := range o.LB.EndpointIDs {
				was[strings.ToLower(id)] = true
			}
		}
	}
	r.apply(ctx, diffLoadBalancers(desired, current, b.features.ModifyLoadBalancer))
	if len(r.recreate) > 0 {
		// HNS said E_NOTIMPL: modify is off from now on (as kube-proxy), and
		// these load balancers are deleted and created again in this sync.
		var ops []lbOp
		for _, op := range r.recreate {
			ops = append(ops, lbOp{kind: opDelete, owner: op.owner, current: op.current}, lbOp{kind: opCreate, owner: op.owner, desired: op.desired})
		}
		r.recreate = nil
		r.apply(ctx, ops)
	}
	r.settleExisting(ctx)
	if len(staleUsed) > 0 {
		r.deleteEndpoints(ctx, "stale endpoint", mapValues(staleUsed))
	}
	if full {
		r.collectEndpoints(ctx, plan)
		if len(r.failures) == 0 {
			r.retireOwnSourceVIP(ctx, plan)
		}
	} else {
		r.releaseUnused(ctx, was, plan, goneClusterIPs)
	}
	if err := b.saveLedger(); err != nil {
		r.failures = append(r.failures, err)
	}
	if len(r.failures) > 0 {
		return r.notices, fmt.Errorf("hns sync: %d operations failed (retried on the next sync): %w", len(r.failures), errors.Join(r.failures...))
	}
	return r.notices, nil
}

// ensureSourceVIPEndpoint creates the overlay source VIP's local endpoint
// (host MAC, this node's provider address) when HNS has none.
func (b *Backend) ensureSourceVIPEndpoint(ctx context.Context, plan hnsPlan) error {
	want := plan.SourceVIPEndpoint
	if want == nil {
		return nil
	}
	if _, ok := b.byIP[want.IP]; ok || b.calicoByName.IP == want.IP {
		return nil // HNS has it (calico-node's, found by name when the listing hides it)
	}
	got, err := b.hns.CreateLocalEndpoint(ctx, b.network.ID, *want)
	if err != nil {
		return fmt.Errorf("hns sync skipped: create the source VIP endpoint %s: %w", want.IP, err)
	}
	b.byIP[got.IP] = got
	return nil
}

// replaceStaleEndpoints finds endpoints crossproxy made that no longer fit
// the plan: a remote endpoint whose provider address changed (overlay), or a
// remote endpoint where a local one is planned. Unused ones are deleted now,
// so their replacement is created in this sync; the ones a load balancer
// still uses are returned: left out of this sync's load balancers, deleted
// after them, and their ports retried.
func (r *round) replaceStaleEndpoints(ctx context.Context, plan hnsPlan) map[netip.Addr]Endpoint {
	b := r.b
	stale := map[netip.Addr]Endpoint{}
	for _, want := range plan.RemoteEndpoints {
		have, ok := b.byIP[want.IP]
		// A provider address HNS did not report back is not compared:
		// kube-proxy never reads it back, and an HNS that omits it must
		// not make every remote endpoint stale at every sync.
		if !ok || !have.Remote || !b.network.isOverlay() || !have.ProviderAddress.IsValid() || have.ProviderAddress == want.ProviderAddress {
			continue
		}
		if ours(have) {
			stale[want.IP] = have
		} else {
			b.log.WithFields(logrus.Fields{"endpoint": want.IP, "id": have.ID, "provider": have.ProviderAddress, "want": want.ProviderAddress}).
				Warn("a remote endpoint crossproxy does not own has another provider address; used as it is")
		}
	}
	for _, lb := range plan.LoadBalancers {
		for _, ip := range lb.Endpoints {
			if have, ok := b.byIP[ip]; ok && !lb.Remote[ip] && have.Remote && ours(have) {
				stale[ip] = have
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	used := map[string]bool{}
	for _, o := range b.owned {
		for _, id := range o.LB.EndpointIDs {
			used[strings.ToLower(id)] = true
		}
	}
	var unused []Endpoint
	for ip, ep := range stale {
		if !used[strings.ToLower(ep.ID)] {
			unused = append(unused, ep)
			delete(stale, ip)
		}
	}
	r.deleteEndpoints(ctx, "stale endpoint", unused)
	return stale
}

// createRemoteEndpoints creates the planned remote endpoints HNS lacks.
func (r *round) createRemoteEndpoints(ctx context.Context, plan hnsPlan, skip map[netip.Addr]Endpoint) {
	b := r.b
	var create []Endpoint
	for _, ep := range plan.RemoteEndpoints {
		_, have := b.byIP[ep.IP]
		_, stale := skip[ep.IP]
		if !have && !stale {
			create = append(create, ep)
		}
	}
	errs := parallel(ctx, b.cfg.Concurrency, create, func(ctx context.Context, ep Endpoint) error {
		got, err := b.hns.CreateRemoteEndpoint(ctx, b.network.ID, ep)
		if err != nil {
			return fmt.Errorf("create remote endpoint %s: %w", ep.IP, err)
		}
		r.mu.Lock()
		b.byIP[got.IP] = got
		b.remotesCreated++
		r.mu.Unlock()
		return nil
	})
	for _, err := range errs {
		if err != nil {
			r.fail(nil, err) // the ports using it are retried through resolve
		}
	}
}

// apply runs load balancer operations, frontend by frontend: the delete
// and the create that replace one frontend's load balancer (HNS without
// modify, or a modify HNS refused) run back to back in one unit, so the
// frontend is absent for one call, not for the whole of a phase of deletes
// (at 2,000 changes and 30 ms a call, seconds per Service). Units run with
// at most Config.Concurrency in flight.
func (r *round) apply(ctx context.Context, ops []lbOp) {
	b := r.b
	byFrontend := map[string][]lbOp{}
	var order []string
	pending := false
	for _, op := range ops {
		f := op.desired.frontend()
		if op.kind == opDelete {
			f = op.current.frontend()
		} else if op.kind == opCreate {
			b.ledger.Pending[f] = pendingLB{lbOwner: op.owner, Foreign: slices.Clone(b.foreign[f])}
			pending = true
		}
		if _, ok := byFrontend[f]; !ok {
			order = append(order, f)
		}
		byFrontend[f] = append(byFrontend[f], op)
	}
	if pending {
		if err := b.writeLedger(); err != nil {
			r.fail(nil, err)
			return
		}
	}
	units := make([]*lbUnit, 0, len(order))
	for _, f := range order {
		ops := byFrontend[f]
		// The frontend's delete goes before its create or update.
		slices.SortStableFunc(ops, func(x, y lbOp) int {
			return cmpBool(y.kind == opDelete, x.kind == opDelete)
		})
		units = append(units, &lbUnit{ops: ops, errs: make([]error, len(ops))})
	}
	for i, err := range parallel(ctx, b.cfg.Concurrency, units, func(ctx context.Context, u *lbUnit) error {
		u.run(ctx, r)
		return nil
	}) {
		if err != nil {
			// Not started (the sync was cancelled): retried next sync.
			for _, op := range units[i].ops {
				k := op.owner.Key()
				r.fail(&k, err)
			}
			continue
		}
		// Outcomes are recorded here, one unit after the other: written
		// is not safe to run concurrently.
		u := units[i]
		for j, op := range u.ops {
			switch {
			case !u.ran[j]:
			case op.kind == opDelete:
				if u.errs[j] != nil {
					k := op.owner.Key()
					r.fail(&k, u.errs[j])
				}
			default:
				r.written(op, u.errs[j])
			}
		}
	}
}

// lbUnit is one frontend's operations in one apply: its delete first, then
// its create or update, run back to back; errs and ran are their outcomes.
type lbUnit struct {
	ops  []lbOp
	errs []error
	ran  []bool
}

// run performs the unit's operations in order. A create after a failed
// delete is not tried (HNS would refuse it while the old load balancer
// holds the frontend); the port is retried with the delete.
func (u *lbUnit) run(ctx context.Context, r *round) {
	u.ran = make([]bool, len(u.ops))
	deleted := true
	for j, op := range u.ops {
		if op.kind == opDelete {
			u.errs[j], u.ran[j] = r.delete(ctx, op), true
			deleted = deleted && u.errs[j] == nil
			continue
		}
		if !deleted && op.kind == opCreate {
			continue
		}
		u.errs[j], u.ran[j] = r.write(ctx, op), true
	}
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// delete deletes one load balancer; one HNS no longer has is deleted.
func (r *round) delete(ctx context.Context, op lbOp) error {
	b := r.b
	err := b.hns.DeleteLoadBalancer(ctx, op.current.ID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete load balancer %s (%s): %w", op.current.frontend(), op.current.ID, err)
	}
	r.mu.Lock()
	delete(b.owned, op.current.ID)
	r.mu.Unlock()
	return nil
}

// maxBusyWait caps the backoff of a frontend HNS refused as in use: a port
// lock HNS leaked after a failed delete (kubernetes #137530) or the health
// check port colliding at boot (kubernetes/community#8883) frees itself, so
// the frontend is tried again within kube-proxy's syncPeriod (30 s) rather
// than at the next full sync (an hour).
const maxBusyWait = 30 * time.Second

// busyWait is the backoff of one port whose frontend HNS refused as in use.
type busyWait struct {
	attempts int
	next     time.Time
}

// after is the wait after one more refusal at now: 1 s, 2 s, 4 s ... up to
// maxBusyWait.
func (w busyWait) after(now time.Time) busyWait {
	w.attempts++
	d := time.Second << min(w.attempts-1, 10)
	w.next = now.Add(min(d, maxBusyWait))
	return w
}

// written records the outcome of one create or update.
func (r *round) written(op lbOp, err error) {
	b := r.b
	k := op.owner.Key()
	f := op.desired.frontend()
	switch {
	case err == nil:
		delete(b.busy, k)
	case op.kind == opCreate && errors.Is(err, ErrDuplicateFrontend):
		delete(b.ledger.Pending, f) // HNS made nothing
		w := b.busy[k].after(b.now())
		b.busy[k] = w
		r.notices = append(r.notices, notice{op.owner.Service(), "FrontendInUse",
			fmt.Sprintf("%s %s: HNS refused the port (HCN_E_PORT_ALREADY_EXISTS): a load balancer crossproxy does not own holds the frontend "+
				"(another proxy's, or left over: remove it or run that proxy's cleanup), the host reserved the port "+
				"(netsh int ipv4 show excludedportrange), or HNS still holds the port lock of a deleted load balancer (kubernetes #137530); "+
				"crossproxy tries again with backoff (up to every %s) and takes the frontend once it is free", op.owner.Kind, f, maxBusyWait)})
		b.log.WithError(err).WithFields(logrus.Fields{"port": k.String(), "attempt": w.attempts, "retryIn": w.next.Sub(b.now()).String()}).
			Warn("frontend in use by a foreign load balancer, a host port reservation or a leaked port lock: retried with backoff")
	case op.kind == opCreate && errors.Is(err, ErrAlreadyExists):
		r.exists = append(r.exists, op)
	case op.kind == opUpdate && errors.Is(err, ErrNotImplemented):
		r.recreate = append(r.recreate, op)
	default:
		r.fail(&k, err)
	}
}

// write creates or updates one load balancer.
func (r *round) write(ctx context.Context, op lbOp) error {
	b := r.b
	var got LoadBalancer
	var err error
	switch {
	case op.kind == opCreate:
		got, err = b.hns.CreateLoadBalancer(ctx, op.desired)
		if err != nil {
			return fmt.Errorf("create load balancer %s for %s: %w", op.desired.frontend(), op.owner.Key(), err)
		}
	case sameLB(op.current, op.desired):
		got = op.current // owner change only
	default:
		got, err = b.hns.UpdateLoadBalancer(ctx, op.current.ID, op.desired)
		if errors.Is(err, ErrNotImplemented) {
			r.mu.Lock()
			if b.features.ModifyLoadBalancer {
				b.features.ModifyLoadBalancer = false
				b.log.WithError(err).Warn("HNS does not implement load balancer modify although it reports it; changes are now delete + create")
			}
			r.mu.Unlock()
			return err
		}
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				r.mu.Lock()
				delete(b.owned, op.current.ID)
				r.mu.Unlock()
			}
			return fmt.Errorf("modify load balancer %s (%s) for %s: %w", op.desired.frontend(), op.current.ID, op.owner.Key(), err)
		}
		if !slices.Equal(normalIDs(got.EndpointIDs), normalIDs(op.desired.EndpointIDs)) {
			// HNS 15.4 (Windows Server 2025) accepts the modify and keeps
			// the old endpoints (kubernetes #131466); what it reports back
			// is the truth. Modify is off from now on, and this load
			// balancer is deleted and created again in this sync.
			r.mu.Lock()
			if b.features.ModifyLoadBalancer {
				b.features.ModifyLoadBalancer = false
				b.log.WithFields(logrus.Fields{"id": op.current.ID, "frontend": op.desired.frontend(), "sent": len(op.desired.EndpointIDs), "kept": len(got.EndpointIDs)}).
					Warn("HNS accepted a load balancer modify but kept its old endpoints (HNS 15.4, kubernetes #131466): changes are now delete + create")
			}
			r.mu.Unlock()
			return fmt.Errorf("modify load balancer %s (%s): %w", op.desired.frontend(), op.current.ID, errModifyIgnored)
		}
	}
	r.mu.Lock()
	b.owned[got.ID] = ownedLB{LB: got, Owner: op.owner}
	delete(b.ledger.Pending, got.frontend())
	r.mu.Unlock()
	return nil
}

// settleExisting handles creates HNS refused with ERROR_ALREADY_EXISTS (HNS
// restored the object itself after a restart): with one more listing, a
// load balancer on the frontend that was not someone else's at the last full
// sync is adopted, and its port re-planned on the next sync if it differs.
func (r *round) settleExisting(ctx context.Context) {
	if len(r.exists) == 0 {
		return
	}
	b := r.b
	lbs, err := retryListing(func() ([]LoadBalancer, error) { return b.hns.ListLoadBalancers(ctx) })
	if err != nil {
		for _, op := range r.exists {
			k := op.owner.Key()
			r.fail(&k, fmt.Errorf("list load balancers after ERROR_ALREADY_EXISTS: %w", err))
		}
		return
	}
	byFrontend := map[string]LoadBalancer{}
	for _, lb := range lbs {
		if _, owned := b.owned[lb.ID]; !owned {
			byFrontend[lb.frontend()] = lb
		}
	}
	for _, op := range r.exists {
		f := op.desired.frontend()
		delete(b.ledger.Pending, f)
		lb, ok := byFrontend[f]
		if !ok || slices.Contains(b.foreign[f], lb.ID) {
			r.written(op, fmt.Errorf("create load balancer %s: %w", f, ErrDuplicateFrontend))
			continue
		}
		b.log.WithFields(logrus.Fields{"id": lb.ID, "frontend": f}).Info("HNS already had this load balancer (restored after an HNS restart): adopted")
		b.owned[lb.ID] = ownedLB{LB: lb, Owner: op.owner}
		if !reportsAs(lb, op.desired) {
			b.retry[op.owner.Key()] = struct{}{}
		}
	}
	r.exists = nil
}

// releaseUnused deletes, on partial syncs, crossproxy's remote endpoints
// that a load balancer of this sync's scope used before it and none uses
// after it, unless the plan still needs them, and the remote endpoints of
// ClusterIPs no port has any more (overlay). A remote endpoint left behind
// would keep its address from the CNI: HNS refuses a local endpoint while a
// remote one has its IP (kubernetes #130963, fixed in kube-proxy by #131138),
// so a pod given an address that was remote a moment ago (pod IPs move
// between nodes with Azure CNI, flat L2Bridge, Calico's borrowed blocks,
// node replacement) could not start until the next full sync.
func (r *round) releaseUnused(ctx context.Context, was map[string]bool, plan hnsPlan, goneClusterIPs map[netip.Addr]bool) {
	b := r.b
	for ip := range goneClusterIPs {
		if ep, ok := b.byIP[ip]; ok {
			was[strings.ToLower(ep.ID)] = true
		}
	}
	if len(was) == 0 {
		return
	}
	for _, o := range b.owned {
		for _, id := range o.LB.EndpointIDs {
			delete(was, strings.ToLower(id))
		}
		if len(was) == 0 {
			return
		}
	}
	needed := map[netip.Addr]bool{}
	for _, ep := range plan.RemoteEndpoints {
		needed[ep.IP] = true
	}
	var drop []Endpoint
	for _, ep := range b.byIP {
		if was[strings.ToLower(ep.ID)] && ep.Remote && strings.HasPrefix(ep.Name, remoteEndpointPrefix) && !needed[ep.IP] {
			drop = append(drop, ep)
		}
	}
	r.deleteEndpoints(ctx, "remote endpoint no load balancer uses", drop)
}

// collectEndpoints deletes, on full syncs, crossproxy's remote endpoints
// that no owned load balancer uses and the plan does not need, and its own
// remote endpoints that share their address with a local one.
func (r *round) collectEndpoints(ctx context.Context, plan hnsPlan) {
	b := r.b
	used := map[string]bool{}
	for _, o := range b.owned {
		for _, id := range o.LB.EndpointIDs {
			used[strings.ToLower(id)] = true
		}
	}
	needed := map[netip.Addr]bool{}
	for _, ep := range plan.RemoteEndpoints {
		needed[ep.IP] = true
	}
	var stale []Endpoint
	for _, ep := range b.byIP {
		if ep.Remote && strings.HasPrefix(ep.Name, remoteEndpointPrefix) && !used[strings.ToLower(ep.ID)] && !needed[ep.IP] {
			stale = append(stale, ep)
		}
	}
	r.deleteEndpoints(ctx, "remote endpoint", stale)
	if len(b.dupRemotes) > 0 {
		b.log.WithField("count", len(b.dupRemotes)).Info("deleting remote endpoints that share their address with a local endpoint")
		dups := b.dupRemotes
		b.dupRemotes = nil
		r.deleteEndpoints(ctx, "remote endpoint with a local twin", dups)
	}
}

// retireOwnSourceVIP gives up crossproxy's own source VIP once another
// took its place (calico-node's Calico_ep appeared after the wait) and every
// load balancer of this full sync uses the new one: its endpoint is deleted
// and its reservation released, so the address goes back to the pods.
func (r *round) retireOwnSourceVIP(ctx context.Context, plan hnsPlan) {
	b := r.b
	if plan.SourceVIPEndpoint == nil && !b.sourceVIP.IsValid() {
		return
	}
	var stale []Endpoint
	for _, ep := range b.byIP {
		if !ep.Remote && ep.Name == sourceVIPEndpointName && ep.IP != b.sourceVIP {
			stale = append(stale, ep)
		}
	}
	r.deleteEndpoints(ctx, "former source-VIP endpoint", stale)
	if res := b.ledger.SourceVIP; res != nil && res.Address != b.sourceVIP && len(r.failures) == 0 {
		if err := b.releaseSourceVIP(ctx); err != nil {
			r.fail(nil, err)
		}
	}
}

// deleteEndpoints deletes endpoints and forgets them.
func (r *round) deleteEndpoints(ctx context.Context, what string, eps []Endpoint) {
	b := r.b
	for i, err := range parallel(ctx, b.cfg.Concurrency, eps, func(ctx context.Context, ep Endpoint) error {
		if err := b.hns.DeleteEndpoint(ctx, ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		r.mu.Lock()
		if cur, ok := b.byIP[ep.IP]; ok && cur.ID == ep.ID {
			delete(b.byIP, ep.IP)
		}
		r.mu.Unlock()
		return nil
	}) {
		if err != nil {
			r.fail(nil, fmt.Errorf("delete %s %s (%s): %w", what, eps[i].IP, eps[i].ID, err))
		}
	}
}

// saveLedger writes the owned load balancers to the ledger if they changed.
func (b *Backend) saveLedger() error {
	next := map[string]lbOwner{}
	frontends := map[string]string{}
	for id, o := range b.owned {
		next[id] = o.Owner
		frontends[id] = o.LB.frontend()
	}
	b.ledger.LoadBalancers = next
	b.ledger.Frontends = frontends
	if equalLedgers(b.ledger, b.saved) {
		return nil
	}
	return b.writeLedger()
}

// writeLedger stores the ledger and remembers what was stored.
func (b *Backend) writeLedger() error {
	if err := b.cfg.Ledger.Save(b.ledger); err != nil {
		return fmt.Errorf("hns: %w", err)
	}
	b.saved = copyLedger(b.ledger)
	return nil
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
