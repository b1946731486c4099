package hns

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// Notifier receives the core decisions HNS cannot express. The Backend calls
// it once per Service and feature (again only when the detail changes);
// cmd passes platform/events.Recorder through BackendConfig.Notifier, which
// turns each call into an Event on the Service.
type Notifier = platform.Notifier

// DefaultConcurrency bounds the HNS calls in flight; HNS serialises much of
// its work, so more gains little and risks timeouts.
const DefaultConcurrency = 8

// Config configures a Backend.
type Config struct {
	// NetworkName is the HNS network (from the CNI) the load balancers use.
	// Sync and Programmed need it; Cleanup falls back to the ledger's.
	NetworkName string
	// SourceVIP is set on every load balancer (overlay networks need it).
	SourceVIP netip.Addr
	// EnableDSR asks for direct server return where HNS supports it.
	EnableDSR bool
	// Concurrency bounds the HNS calls in flight (DefaultConcurrency if 0).
	Concurrency int
	// Ledger records which load balancers crossproxy owns (required).
	Ledger Ledger
	// Notifier receives what HNS cannot express (optional).
	Notifier Notifier
}

// Backend makes HNS match a core.NodeState: it plans, diffs against what HNS
// reported, and applies the difference with the fewest calls. It owns only
// the load balancers in its ledger and the remote endpoints named with
// RemoteEndpointPrefix.
type Backend struct {
	hns HNS
	cfg Config
	log logrus.FieldLogger

	mu           sync.Mutex
	features     *Features
	network      Network
	byIP         map[netip.Addr]Endpoint
	owned        map[string]ownedLB
	ledger       LedgerData
	saved        LedgerData // what the Ledger holds
	ledgerLoaded bool
	synced       bool
	retry        map[core.PortKey]struct{}
	noticed      map[types.NamespacedName]map[string]string
	// frontends are the last applied state's frontends per port, so
	// Programmed can report a frontend without a load balancer as what HNS
	// does with its traffic: drop it.
	frontends map[core.PortKey][]platform.ProgrammedFrontend
}

var _ platform.Backend = (*Backend)(nil)

// New returns a Backend driving h. It makes no HNS call until the first Sync.
func New(h HNS, cfg Config, log logrus.FieldLogger) (*Backend, error) {
	if cfg.Ledger == nil {
		return nil, fmt.Errorf("hns backend: %w: no ledger", ErrInvalid)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	return &Backend{
		hns: h, cfg: cfg, log: log,
		byIP:      map[netip.Addr]Endpoint{},
		owned:     map[string]ownedLB{},
		retry:     map[core.PortKey]struct{}{},
		noticed:   map[types.NamespacedName]map[string]string{},
		frontends: map[core.PortKey][]platform.ProgrammedFrontend{},
	}, nil
}

// Name implements platform.Backend.
func (b *Backend) Name() string { return "hns" }

// Sync implements platform.Backend. A full sync re-reads HNS (3 calls) and
// reconciles every port; a partial sync trusts what the last sync read and
// touches only the changed ports and those whose last attempt failed.
func (b *Backend) Sync(ctx context.Context, state *core.NodeState, changes core.Changes) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	full := changes.Full || !b.synced
	keys := map[core.PortKey]struct{}{}
	if full {
		if err := b.refresh(ctx); err != nil {
			return err
		}
		b.synced = true
		for k := range state.Ports {
			keys[k] = struct{}{}
		}
		for _, o := range b.owned {
			keys[o.Owner.Key()] = struct{}{}
		}
	} else {
		maps.Copy(keys, changes.Ports)
	}
	maps.Copy(keys, b.retry)
	clear(b.retry)
	list := make([]core.PortKey, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	plan := PlanPorts(state, list, b.planOptions())
	b.rememberFrontends(state, keys, full)
	notices, err := b.reconcile(ctx, plan, keys, full)
	b.notify(state, append(plan.Notices, notices...), changes, keys, full)
	return err
}

func (b *Backend) planOptions() PlanOptions {
	return PlanOptions{Network: b.network, Features: *b.features, SourceVIP: b.cfg.SourceVIP, EnableDSR: b.cfg.EnableDSR}
}

// prepare loads the ledger and detects features once.
func (b *Backend) prepare(ctx context.Context) error {
	if err := b.loadLedger(); err != nil {
		return err
	}
	if b.features == nil {
		f, err := b.hns.Features(ctx)
		if err != nil {
			return fmt.Errorf("detect HNS features: %w", err)
		}
		b.features = &f
		b.log.WithField("features", fmt.Sprintf("%+v", f)).Info("HNS features detected")
		b.log.Info("HNS chooses source NAT itself (to the source VIP on overlay networks, none with DSR): " +
			"the core's masquerade decisions (masqueradeAll, local traffic detection) are not applied on this node")
		if b.cfg.EnableDSR && !f.DSR {
			b.log.Warn("DSR requested but this HNS does not support it; load balancers are created without DSR")
		}
	}
	return nil
}

// loadLedger reads the ledger once per process.
func (b *Backend) loadLedger() error {
	if b.ledgerLoaded {
		return nil
	}
	d, err := b.cfg.Ledger.Load()
	if err != nil {
		return fmt.Errorf("hns: %w", err)
	}
	b.ledger = copyLedger(d)
	b.saved = copyLedger(d)
	b.ledgerLoaded = true
	return nil
}

// refresh re-reads the network, its endpoints and the load balancers from
// HNS. Load balancers in the ledger that HNS no longer has are forgotten;
// ones created just before a crash are adopted through the pending entries.
func (b *Backend) refresh(ctx context.Context) error {
	if b.cfg.NetworkName == "" {
		return fmt.Errorf("hns: %w: no HNS network name (flag --network-name)", ErrInvalid)
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return fmt.Errorf("get HNS network %q: %w", b.cfg.NetworkName, err)
	}
	b.network = nw
	b.ledger.Network = nw.Name
	if err := b.listEndpoints(ctx); err != nil {
		return err
	}
	lbs, err := b.hns.ListLoadBalancers(ctx)
	if err != nil {
		return fmt.Errorf("list load balancers: %w", err)
	}
	b.owned = map[string]ownedLB{}
	for _, lb := range lbs {
		if o, ok := b.ledger.LoadBalancers[lb.ID]; ok {
			b.owned[lb.ID] = ownedLB{LB: lb, Owner: o}
		} else if o, ok := b.ledger.Pending[lb.Frontend()]; ok {
			b.log.WithFields(logrus.Fields{"id": lb.ID, "frontend": lb.Frontend()}).Info("adopting load balancer created before an interrupted sync")
			b.owned[lb.ID] = ownedLB{LB: lb, Owner: o}
		}
	}
	return b.saveLedger()
}

func (b *Backend) listEndpoints(ctx context.Context) error {
	eps, err := b.hns.ListEndpoints(ctx, b.network.ID)
	if err != nil {
		return fmt.Errorf("list endpoints of network %q: %w", b.network.Name, err)
	}
	b.byIP = make(map[netip.Addr]Endpoint, len(eps))
	for _, ep := range eps {
		// A local endpoint wins over a remote one with the same address.
		if old, ok := b.byIP[ep.IP]; ok && !old.Remote {
			continue
		}
		b.byIP[ep.IP] = ep
	}
	return nil
}

// reconcile applies plan for the ports in scope: remote endpoints first, then
// load balancer deletes, then creates and updates, then (full syncs) removal
// of remote endpoints nothing uses any more.
//
// A frontend held by a load balancer crossproxy does not own is not a
// failure to retry at once (it stays until someone removes that load
// balancer): it is returned as a notice and tried again on full syncs.
func (b *Backend) reconcile(ctx context.Context, plan Plan, scope map[core.PortKey]struct{}, full bool) ([]Notice, error) {
	var notices []Notice
	var failures []error
	var fmu sync.Mutex
	fail := func(k core.PortKey, err error) {
		fmu.Lock()
		defer fmu.Unlock()
		failures = append(failures, err)
		b.retry[k] = struct{}{}
	}

	var create []Endpoint
	for _, ep := range plan.RemoteEndpoints {
		if _, ok := b.byIP[ep.IP]; !ok {
			create = append(create, ep)
		}
	}
	errs := parallel(ctx, b.cfg.Concurrency, create, func(ctx context.Context, ep Endpoint) error {
		got, err := b.hns.CreateRemoteEndpoint(ctx, b.network.ID, ep)
		if err != nil {
			return fmt.Errorf("create remote endpoint %s: %w", ep.IP, err)
		}
		fmu.Lock()
		b.byIP[got.IP] = got
		fmu.Unlock()
		return nil
	})
	for _, err := range errs {
		if err != nil {
			failures = append(failures, err) // the ports using it are retried through resolve
		}
	}

	desired, missing := resolve(plan.LoadBalancers, b.byIP)
	if !full && missingLocal(missing, plan) {
		// A new local pod the CNI attached after the last listing: one list call.
		if err := b.listEndpoints(ctx); err != nil {
			return notices, err
		}
		desired, missing = resolve(plan.LoadBalancers, b.byIP)
	}
	for k, ips := range missing {
		b.retry[k] = struct{}{}
		b.log.WithFields(logrus.Fields{"port": k.String(), "endpoints": fmt.Sprint(ips)}).Warn("endpoints not known to HNS yet; left out and retried")
	}

	var current []ownedLB
	for _, o := range b.owned {
		if _, ok := scope[o.Owner.Key()]; ok {
			current = append(current, o)
		}
	}
	ops := diffLoadBalancers(desired, current, b.features.ModifyLoadBalancer)
	var deletes, writes []lbOp
	for _, op := range ops {
		if op.kind == opDelete {
			deletes = append(deletes, op)
			continue
		}
		writes = append(writes, op)
		if op.kind == opCreate {
			b.ledger.Pending[op.desired.Frontend()] = op.owner
		}
	}
	if len(b.ledger.Pending) > 0 {
		if err := b.writeLedger(); err != nil {
			return notices, err
		}
	}

	errs = parallel(ctx, b.cfg.Concurrency, deletes, func(ctx context.Context, op lbOp) error {
		err := b.hns.DeleteLoadBalancer(ctx, op.current.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("delete load balancer %s (%s): %w", op.current.Frontend(), op.current.ID, err)
		}
		fmu.Lock()
		delete(b.owned, op.current.ID)
		fmu.Unlock()
		return nil
	})
	for i, err := range errs {
		if err != nil {
			fail(deletes[i].owner.Key(), err)
		}
	}
	errs = parallel(ctx, b.cfg.Concurrency, writes, func(ctx context.Context, op lbOp) error {
		return b.write(ctx, op, &fmu)
	})
	for i, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, ErrDuplicateFrontend) && writes[i].kind == opCreate:
			op := writes[i]
			notices = append(notices, Notice{op.owner.Service(), "FrontendInUse",
				fmt.Sprintf("%s %s is held by an HNS load balancer crossproxy does not own (another proxy's, or left over); "+
					"remove it (or run that proxy's cleanup) and crossproxy takes the frontend at its next full sync", op.owner.Kind, op.desired.Frontend())})
			b.log.WithError(err).WithField("port", op.owner.Key().String()).Warn("frontend held by a foreign load balancer")
		default:
			fail(writes[i].owner.Key(), err)
		}
	}
	if full {
		failures = append(failures, b.collectRemoteEndpoints(ctx, plan)...)
	}
	clear(b.ledger.Pending)
	if err := b.saveLedger(); err != nil {
		failures = append(failures, err)
	}
	if len(failures) > 0 {
		return notices, fmt.Errorf("hns sync: %d operations failed (retried on the next sync): %w", len(failures), errors.Join(failures...))
	}
	return notices, nil
}

// write creates or updates one load balancer.
func (b *Backend) write(ctx context.Context, op lbOp, mu *sync.Mutex) error {
	var got LoadBalancer
	var err error
	switch {
	case op.kind == opCreate:
		got, err = b.hns.CreateLoadBalancer(ctx, op.desired)
		if err != nil {
			return fmt.Errorf("create load balancer %s for %s: %w", op.desired.Frontend(), op.owner.Key(), err)
		}
	case sameLB(op.current, op.desired):
		got = op.current // owner change only
	default:
		got, err = b.hns.UpdateLoadBalancer(ctx, op.current.ID, op.desired)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				mu.Lock()
				delete(b.owned, op.current.ID)
				mu.Unlock()
			}
			return fmt.Errorf("modify load balancer %s (%s) for %s: %w", op.desired.Frontend(), op.current.ID, op.owner.Key(), err)
		}
	}
	mu.Lock()
	b.owned[got.ID] = ownedLB{LB: got, Owner: op.owner}
	mu.Unlock()
	return nil
}

// collectRemoteEndpoints deletes crossproxy's remote endpoints that no owned
// load balancer uses and the plan does not need.
func (b *Backend) collectRemoteEndpoints(ctx context.Context, plan Plan) []error {
	used := map[string]bool{}
	for _, o := range b.owned {
		for _, id := range o.LB.EndpointIDs {
			used[id] = true
		}
	}
	needed := map[netip.Addr]bool{}
	for _, ep := range plan.RemoteEndpoints {
		needed[ep.IP] = true
	}
	var stale []Endpoint
	for _, ep := range b.byIP {
		if ep.Remote && strings.HasPrefix(ep.Name, RemoteEndpointPrefix) && !used[ep.ID] && !needed[ep.IP] {
			stale = append(stale, ep)
		}
	}
	var mu sync.Mutex
	var failures []error
	for i, err := range parallel(ctx, b.cfg.Concurrency, stale, func(ctx context.Context, ep Endpoint) error {
		if err := b.hns.DeleteEndpoint(ctx, ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		mu.Lock()
		delete(b.byIP, ep.IP)
		mu.Unlock()
		return nil
	}) {
		if err != nil {
			failures = append(failures, fmt.Errorf("delete remote endpoint %s (%s): %w", stale[i].IP, stale[i].ID, err))
		}
	}
	return failures
}

// saveLedger writes the owned load balancers to the ledger if they changed.
func (b *Backend) saveLedger() error {
	next := map[string]Owner{}
	for id, o := range b.owned {
		next[id] = o.Owner
	}
	b.ledger.LoadBalancers = next
	if maps.Equal(next, b.saved.LoadBalancers) && maps.Equal(b.ledger.Pending, b.saved.Pending) && b.ledger.Network == b.saved.Network {
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

// notify logs and forwards what HNS cannot express, once per Service and
// feature, and forgets Services that are gone.
func (b *Backend) notify(state *core.NodeState, notices []Notice, changes core.Changes, scope map[core.PortKey]struct{}, full bool) {
	for _, s := range changes.StaleUDP {
		notices = append(notices, Notice{s.Key.Service, "UDPStaleFlowCleanup",
			fmt.Sprintf("HNS has no flow table API: UDP flows to removed endpoint %s are not flushed and age out on their own", s.Endpoint)})
	}
	live := map[types.NamespacedName]bool{}
	for k := range state.Ports {
		live[k.Service] = true
	}
	for k := range scope {
		if !live[k.Service] {
			delete(b.noticed, k.Service)
		}
	}
	if full {
		for svc := range b.noticed {
			if !live[svc] {
				delete(b.noticed, svc)
			}
		}
	}
	for _, n := range notices {
		seen := b.noticed[n.Service]
		if seen == nil {
			seen = map[string]string{}
			b.noticed[n.Service] = seen
		}
		if seen[n.Feature] == n.Detail {
			continue
		}
		seen[n.Feature] = n.Detail
		b.log.WithFields(logrus.Fields{"service": n.Service.String(), "feature": n.Feature}).Warn(n.Detail)
		if b.cfg.Notifier != nil {
			b.cfg.Notifier.Unsupported(n.Service, n.Feature, n.Detail)
		}
	}
}

// rememberFrontends records the frontends of the ports in scope.
func (b *Backend) rememberFrontends(state *core.NodeState, scope map[core.PortKey]struct{}, full bool) {
	if full {
		clear(b.frontends)
	}
	for k := range scope {
		p := state.Ports[k]
		if p == nil {
			delete(b.frontends, k)
			continue
		}
		fs := make([]platform.ProgrammedFrontend, 0, len(p.Frontends))
		for _, f := range p.Frontends {
			fs = append(fs, platform.ProgrammedFrontend{Kind: f.Kind, Addr: f.Addr, Port: f.Port, Protocol: p.Protocol, Verdict: core.VerdictDrop})
		}
		b.frontends[k] = fs
	}
}

// Programmed implements platform.Backend by reading the Service's load
// balancers and their endpoints back from HNS.
func (b *Backend) Programmed(ctx context.Context, svc types.NamespacedName) (*platform.ProgrammedService, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	if b.cfg.NetworkName == "" {
		return nil, fmt.Errorf("hns: %w: no HNS network name (flag --network-name)", ErrInvalid)
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return nil, fmt.Errorf("get HNS network %q: %w", b.cfg.NetworkName, err)
	}
	eps, err := b.hns.ListEndpoints(ctx, nw.ID)
	if err != nil {
		return nil, fmt.Errorf("list endpoints of network %q: %w", nw.Name, err)
	}
	byID := map[string]Endpoint{}
	for _, ep := range eps {
		byID[ep.ID] = ep
	}
	lbs, err := b.hns.ListLoadBalancers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	out := &platform.ProgrammedService{Service: svc}
	for _, lb := range lbs {
		o, ok := b.ledger.LoadBalancers[lb.ID]
		if !ok || o.Service() != svc {
			continue
		}
		var dests []netip.AddrPort
		for _, id := range lb.EndpointIDs {
			if ep, ok := byID[id]; ok {
				dests = append(dests, netip.AddrPortFrom(ep.IP, lb.InternalPort))
			}
		}
		sort.Slice(dests, func(i, j int) bool { return dests[i].Compare(dests[j]) < 0 })
		for _, vip := range lb.FrontendVIPs {
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
	sort.Strings(out.Notes)
	return out, nil
}

// Cleanup implements platform.Backend: it deletes the load balancers in the
// ledger and the remote endpoints crossproxy named, nothing else.
func (b *Backend) Cleanup(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.loadLedger(); err != nil {
		return err
	}
	lbs, err := b.hns.ListLoadBalancers(ctx)
	if err != nil {
		return fmt.Errorf("hns cleanup: list load balancers: %w", err)
	}
	var mine []LoadBalancer
	for _, lb := range lbs {
		_, owned := b.ledger.LoadBalancers[lb.ID]
		_, pending := b.ledger.Pending[lb.Frontend()]
		if owned || pending {
			mine = append(mine, lb)
		}
	}
	var failures []error
	keep := map[string]Owner{}
	for i, err := range parallel(ctx, b.cfg.Concurrency, mine, func(ctx context.Context, lb LoadBalancer) error {
		return b.hns.DeleteLoadBalancer(ctx, lb.ID)
	}) {
		if err != nil && !errors.Is(err, ErrNotFound) {
			failures = append(failures, fmt.Errorf("delete load balancer %s (%s): %w", mine[i].Frontend(), mine[i].ID, err))
			keep[mine[i].ID] = b.ledger.LoadBalancers[mine[i].ID]
		}
	}
	network := b.cfg.NetworkName
	if network == "" {
		network = b.ledger.Network
	}
	if network == "" {
		b.log.Info("no HNS network named or recorded: crossproxy never synced here, so it made no remote endpoints")
	} else if nw, err := b.hns.GetNetwork(ctx, network); err != nil {
		failures = append(failures, fmt.Errorf("get HNS network %q: %w", network, err))
	} else if eps, err := b.hns.ListEndpoints(ctx, nw.ID); err != nil {
		failures = append(failures, fmt.Errorf("list endpoints of network %q: %w", nw.Name, err))
	} else {
		var remote []Endpoint
		for _, ep := range eps {
			if ep.Remote && strings.HasPrefix(ep.Name, RemoteEndpointPrefix) {
				remote = append(remote, ep)
			}
		}
		for i, err := range parallel(ctx, b.cfg.Concurrency, remote, func(ctx context.Context, ep Endpoint) error {
			return b.hns.DeleteEndpoint(ctx, ep.ID)
		}) {
			if err != nil && !errors.Is(err, ErrNotFound) {
				failures = append(failures, fmt.Errorf("delete remote endpoint %s (%s): %w", remote[i].IP, remote[i].ID, err))
			}
		}
	}
	b.ledger = LedgerData{LoadBalancers: keep, Pending: map[string]Owner{}, Network: b.ledger.Network}
	b.owned = map[string]ownedLB{}
	b.byIP = map[netip.Addr]Endpoint{}
	b.synced = false
	if err := b.writeLedger(); err != nil {
		failures = append(failures, fmt.Errorf("cleanup: %w", err))
	}
	return errors.Join(failures...)
}

// missingLocal reports whether a missing endpoint is a local one (remote
// endpoints are missing only when their creation failed).
func missingLocal(missing map[core.PortKey][]netip.Addr, plan Plan) bool {
	remote := map[netip.Addr]bool{}
	for _, ep := range plan.RemoteEndpoints {
		remote[ep.IP] = true
	}
	for _, ips := range missing {
		for _, ip := range ips {
			if !remote[ip] {
				return true
			}
		}
	}
	return false
}
