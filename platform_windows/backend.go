package hns

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// defaultRootEndpointName is the host's HNS endpoint on the network, as
// kube-proxy's --root-hnsendpoint-name defaults it.
const defaultRootEndpointName = "cbr0"

// defaultConcurrency bounds the HNS calls in flight; HNS serialises much of
// its work, so more gains little and risks timeouts.
const defaultConcurrency = 8

// Config configures a Backend.
type Config struct {
	// NetworkName is the HNS network (from the CNI) the load balancers use.
	// Sync and Programmed need it; Cleanup falls back to the ledger's.
	NetworkName string
	// SourceVIP is the overlay source VIP given explicitly (flag, config
	// file or the Node annotation; SourceVIPOrigin says which). Invalid: the
	// backend finds one per node (chooseSourceVIP).
	SourceVIP       netip.Addr
	SourceVIPOrigin string
	// IPAM reserves a source VIP from the node's pod CIDR when neither an
	// explicit one nor an existing source-VIP endpoint gives one (nil: none
	// is reserved, and an overlay node without a source VIP is refused).
	IPAM IPAM
	// EnableDSR asks for direct server return on ClusterIP load balancers.
	EnableDSR bool
	// NodeIP overrides the Node's own address (overlay provider address).
	NodeIP netip.Addr
	// HostMAC returns the MAC of the host interface that holds the node
	// address; overlay networks need it for the source VIP endpoint and the
	// ClusterIP remote endpoints (kube-proxy reads it the same way).
	HostMAC func(netip.Addr) (string, error)
	// ForwardHealthCheckVIP forwards each LoadBalancer ingress IP's
	// health-check port to the host endpoint named RootEndpointName, as
	// kube-proxy's winkernel.forwardHealthCheckVip.
	ForwardHealthCheckVIP bool
	// RootEndpointName is the host's HNS endpoint ("cbr0" if empty, as kube-proxy).
	RootEndpointName string
	// HealthzPort is the health-check VIP's port for Services without a
	// healthCheckNodePort (the proxy's /healthz port).
	HealthzPort uint16
	// Concurrency bounds the HNS calls in flight (defaultConcurrency if 0).
	Concurrency int
	// Ledger records which load balancers crossproxy owns (required).
	Ledger Ledger
	// Notifier receives the core decisions HNS cannot express (optional).
	// The Backend calls it once per Service and feature (again only when the
	// detail changes); cmd passes platform/events.Recorder through
	// BackendConfig.Notifier, which turns each call into an Event on the Service.
	Notifier platform.Notifier
	// Repairs counts the objects drift repair put back (optional;
	// platform/metrics.Metrics in `crossproxy run`).
	Repairs platform.RepairCounter
	// DriftCheckPeriod is how often a partial sync first lists the load
	// balancers to find drift (the runner's SyncPeriod, which guarantees a
	// sync that often; defaultDriftCheckPeriod if 0). Partial syncs closer
	// together skip the listing, so a burst of changes costs no extra calls.
	DriftCheckPeriod time.Duration
}

// defaultDriftCheckPeriod is kube-proxy's default syncPeriod.
const defaultDriftCheckPeriod = 30 * time.Second

// Backend makes HNS match a core.NodeState: it plans, diffs against what HNS
// reported, and applies the difference with the fewest calls. It owns only
// the load balancers in its ledger and the endpoints named with
// remoteEndpointPrefix or sourceVIPEndpointName.
type Backend struct {
	hns HNS
	cfg Config
	log logrus.FieldLogger

	mu       sync.Mutex
	closed   bool // set by Close: every operation fails
	features *Features
	network  Network
	hostMAC  string
	// sourceVIP is the overlay source VIP in use and sourceVIPFrom how it
	// was chosen (log, explain).
	sourceVIP     netip.Addr
	sourceVIPFrom string
	byIP          map[netip.Addr]Endpoint
	// root is the host endpoint health-check VIPs lead to (forwardHealthCheckVip);
	// invalid IP when HNS has none by that name.
	root     Endpoint
	rootSeen bool // the root endpoint's presence has been logged
	// dupRemotes are remote endpoints that share their address with a local
	// one (Windows Server 2019/2022): deleted at the end of a full sync.
	dupRemotes []Endpoint
	owned      map[string]ownedLB
	foreign    map[string][]string // frontend -> ids of load balancers crossproxy does not own
	// others are the frontends of the load balancers crossproxy does not
	// own at the last listing (OtherProxies).
	others       []string
	ledger       ledgerData
	saved        ledgerData // what the Ledger holds
	ledgerLoaded bool
	synced       bool
	now          func() time.Time
	// checked is when HNS' load balancers were last listed (full sync or
	// drift check).
	checked time.Time
	// remotesCreated counts remote endpoints created (drift repair reports
	// how many a repair made again).
	remotesCreated int
	retry          map[core.PortKey]struct{}
	noticed        map[types.NamespacedName]map[string]string
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
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.DriftCheckPeriod <= 0 {
		cfg.DriftCheckPeriod = defaultDriftCheckPeriod
	}
	if cfg.RootEndpointName == "" {
		cfg.RootEndpointName = defaultRootEndpointName
	}
	return &Backend{
		hns: h, cfg: cfg, log: log, now: time.Now,
		byIP:      map[netip.Addr]Endpoint{},
		owned:     map[string]ownedLB{},
		foreign:   map[string][]string{},
		retry:     map[core.PortKey]struct{}{},
		noticed:   map[types.NamespacedName]map[string]string{},
		frontends: map[core.PortKey][]platform.ProgrammedFrontend{},
	}, nil
}

// Name implements platform.Backend.
func (b *Backend) Name() string { return "hns" }

// Preflight checks what kube-proxy checks before it starts: the HNS V2 API,
// and on an overlay network a source VIP and remote subnet support. An error
// wrapping ErrInvalid is a configuration crossproxy refuses to run with; any
// other (HNS not answering yet at boot) is worth retrying, which Sync does.
func (b *Backend) Preflight(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx); err != nil {
		return err
	}
	if b.cfg.NetworkName == "" {
		return nil // cleanup takes the ledger's network; Sync names the missing flag
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return fmt.Errorf("get HNS network %q: %w", b.cfg.NetworkName, err)
	}
	return OverlayPrerequisites(PlanOptions{Network: nw, Features: *b.features, SourceVIP: b.cfg.SourceVIP, AutoSourceVIP: b.cfg.IPAM != nil}, nil)
}

// Sync implements platform.Backend. A full sync re-reads HNS (3 calls) and
// reconciles every port; a partial sync trusts what the last sync read and
// touches only the changed ports and those whose last attempt failed.
func (b *Backend) Sync(ctx context.Context, state *core.NodeState, changes core.Changes) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if err := b.prepare(ctx); err != nil {
		return err
	}
	full := changes.Full || !b.synced
	var drift []string
	// The runner's periodic sync comes at least DriftCheckPeriod after the
	// last one; a tenth of slack keeps timer jitter from skipping a check.
	due := b.now().Sub(b.checked) >= b.cfg.DriftCheckPeriod-b.cfg.DriftCheckPeriod/10
	if !full && due {
		// Each partial sync (at least one per SyncPeriod) checks with one
		// listing that HNS still holds crossproxy's load balancers as they
		// were programmed; any that went or changed behind its back (an HNS
		// restart, another tool) turn this sync into a full one, which puts
		// them back now instead of at the next periodic full sync.
		lbs, err := b.hns.ListLoadBalancers(ctx)
		if err != nil {
			return fmt.Errorf("hns: check load balancers for drift: %w", err)
		}
		b.checked = b.now()
		if drift = b.drifted(lbs); len(drift) == 0 {
			b.noteOthers(lbs) // a repair's refresh notes them (adopt)
		} else {
			b.log.WithField("drifted", strings.Join(drift, "; ")).Warn("load balancers changed or gone behind crossproxy's back: repairing them in this sync")
			if b.cfg.Repairs != nil {
				b.cfg.Repairs.Repaired("load balancer", len(drift))
			}
			full = true
			if err := b.refreshWith(ctx, lbs, true); err != nil {
				return err
			}
		}
	} else if full {
		if err := b.refresh(ctx); err != nil {
			return err
		}
		b.checked = b.now()
	}
	opts, err := b.planOptions(ctx, state)
	if err != nil {
		b.synced = false
		return err
	}
	b.synced = true
	keys := b.scope(state, changes, full)
	list := make([]core.PortKey, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	plan := planPorts(state, list, opts)
	b.rememberFrontends(state, keys, full)
	remotes := b.remotesCreated
	notices, err := b.reconcile(ctx, plan, keys, full)
	b.notify(state, append(plan.Notices, notices...), changes, keys, full)
	if len(drift) > 0 {
		n := b.remotesCreated - remotes
		if n > 0 && b.cfg.Repairs != nil {
			b.cfg.Repairs.Repaired("remote endpoint", n)
		}
		b.log.WithFields(logrus.Fields{"loadBalancers": len(drift), "remoteEndpointsRecreated": n, "complete": err == nil}).Warn("drift repair done")
	}
	return err
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
		case !sameLB(got, o.LB):
			out = append(out, fmt.Sprintf("%s %s of %s changed", o.Owner.Kind, o.LB.frontend(), o.Owner.Key()))
		}
	}
	sort.Strings(out)
	return out
}

// scope is the ports a sync plans: every port (and every owned load
// balancer's) on a full sync, else the changed ones; both with the ports
// whose last attempt failed.
func (b *Backend) scope(state *core.NodeState, changes core.Changes, full bool) map[core.PortKey]struct{} {
	keys := map[core.PortKey]struct{}{}
	if full {
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
	return keys
}

// planOptions are the planner's options for this node; on overlay networks
// it finds the host MAC once and the source VIP, and checks kube-proxy's
// prerequisites.
func (b *Backend) planOptions(ctx context.Context, state *core.NodeState) (PlanOptions, error) {
	opts := PlanOptions{Network: b.network, Features: *b.features, EnableDSR: b.cfg.EnableDSR, NodeIP: b.cfg.NodeIP}
	if b.cfg.ForwardHealthCheckVIP {
		opts.HealthCheckGateway, opts.HealthzPort = b.root.IP, b.cfg.HealthzPort
	}
	if !b.network.isOverlay() || !opts.nodeIP(state).IsValid() {
		opts.SourceVIP = b.cfg.SourceVIP
		if err := OverlayPrerequisites(opts, state); err != nil {
			return opts, fmt.Errorf("hns: %w", err)
		}
		return opts, nil
	}
	if b.hostMAC == "" {
		nodeIP := opts.nodeIP(state)
		if b.cfg.HostMAC == nil {
			return opts, fmt.Errorf("hns: overlay network %q: %w: no way to find the host MAC", b.network.Name, ErrInvalid)
		}
		mac, err := b.cfg.HostMAC(nodeIP)
		if err != nil {
			return opts, fmt.Errorf("hns: overlay network %q: find the MAC of the host interface with %s: %w", b.network.Name, nodeIP, err)
		}
		b.hostMAC = mac
	}
	opts.HostMAC = b.hostMAC
	if err := b.chooseSourceVIP(ctx, state, opts.nodeIP(state)); err != nil {
		return opts, fmt.Errorf("hns: overlay network %q: %w", b.network.Name, err)
	}
	opts.SourceVIP = b.sourceVIP
	if err := OverlayPrerequisites(opts, state); err != nil {
		return opts, fmt.Errorf("hns: %w", err)
	}
	return opts, nil
}

// prepare loads the ledger and detects features once. A failure (HNS not
// up yet at boot) is not remembered: the next sync asks again.
func (b *Backend) prepare(ctx context.Context) error {
	if err := b.loadLedger(); err != nil {
		return err
	}
	if b.features != nil {
		return nil
	}
	f, err := b.hns.Features(ctx)
	if err != nil {
		return fmt.Errorf("detect HNS features: %w", err)
	}
	if !f.APIV2 {
		return fmt.Errorf("hns: %w: this HNS lacks the V2 API crossproxy (and kube-proxy) need: Windows Server 2019 or later", ErrInvalid)
	}
	b.features = &f
	b.log.WithField("features", fmt.Sprintf("%+v", f)).Info("HNS features detected")
	b.log.Info("HNS chooses source NAT itself (to the source VIP on overlay networks, none with DSR): " +
		"the core's masquerade decisions (masqueradeAll, local traffic detection) are not applied on this node")
	if b.cfg.EnableDSR && !f.DSR {
		b.log.Warn("DSR requested but this HNS does not support it; load balancers are created without DSR")
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
// HNS, and decides which load balancers are crossproxy's.
func (b *Backend) refresh(ctx context.Context) error {
	return b.refreshWith(ctx, nil, false)
}

// refreshWith is refresh with the load balancers already listed when listed
// is set (drift repair): the network and its endpoints are read again all
// the same, since what took load balancers (an HNS restart) takes remote
// endpoints too.
func (b *Backend) refreshWith(ctx context.Context, lbs []LoadBalancer, listed bool) error {
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
	if !listed {
		if lbs, err = b.hns.ListLoadBalancers(ctx); err != nil {
			return fmt.Errorf("list load balancers: %w", err)
		}
	}
	b.adopt(lbs)
	return b.saveLedger()
}

// adopt sorts HNS' load balancers into crossproxy's (b.owned) and the
// others (b.foreign). Crossproxy's are those in the ledger by id; those HNS
// restored under a new id after a restart (the frontend of a ledger entry
// whose id is gone); and those a create made before a crash or a failed
// reply (a pending frontend, unless the load balancer already held it when
// the entry was written). Pending entries are settled here.
func (b *Backend) adopt(lbs []LoadBalancer) {
	b.owned = map[string]ownedLB{}
	b.foreign = map[string][]string{}
	present := make(map[string]bool, len(lbs))
	for _, lb := range lbs {
		present[lb.ID] = true
	}
	vanished := map[string]lbOwner{}
	for id, o := range b.ledger.LoadBalancers {
		if f := b.ledger.Frontends[id]; !present[id] && f != "" {
			vanished[f] = o
		}
	}
	for _, lb := range lbs {
		f := lb.frontend()
		if o, ok := b.ledger.LoadBalancers[lb.ID]; ok {
			b.owned[lb.ID] = ownedLB{LB: lb, Owner: o}
		} else if o, ok := vanished[f]; ok {
			b.log.WithFields(logrus.Fields{"id": lb.ID, "frontend": f}).Info("adopting load balancer HNS restored under a new id")
			b.owned[lb.ID] = ownedLB{LB: lb, Owner: o}
			delete(vanished, f)
		} else if p, ok := b.ledger.Pending[f]; ok && !slices.Contains(p.Foreign, lb.ID) {
			b.log.WithFields(logrus.Fields{"id": lb.ID, "frontend": f}).Info("adopting load balancer created by an interrupted or failed create")
			b.owned[lb.ID] = ownedLB{LB: lb, Owner: p.lbOwner}
			delete(b.ledger.Pending, f)
		} else {
			b.foreign[f] = append(b.foreign[f], lb.ID)
		}
	}
	clear(b.ledger.Pending)
	b.noteOthers(lbs)
}

// listEndpoints reads the network's endpoints. Where a local and a remote
// endpoint share an address (Windows Server 2019/2022 can leave both), the
// local one is used and the remote one is deleted at the end of the next
// full sync, as kube-proxy does.
func (b *Backend) listEndpoints(ctx context.Context) error {
	eps, err := b.hns.ListEndpoints(ctx, b.network.ID)
	if err != nil {
		return fmt.Errorf("list endpoints of network %q: %w", b.network.Name, err)
	}
	b.byIP = make(map[netip.Addr]Endpoint, len(eps))
	b.dupRemotes = nil
	root := b.root
	b.root = Endpoint{}
	for _, ep := range eps {
		if ep.Name == b.cfg.RootEndpointName && !ep.Remote {
			b.root = ep
		}
		old, ok := b.byIP[ep.IP]
		switch {
		case !ok:
			b.byIP[ep.IP] = ep
		case !old.Remote && ep.Remote:
			b.dupRemotes = append(b.dupRemotes, ep)
		case old.Remote && !ep.Remote:
			b.dupRemotes = append(b.dupRemotes, old)
			b.byIP[ep.IP] = ep
		}
	}
	if b.cfg.ForwardHealthCheckVIP && (b.root.IP != root.IP || !b.rootSeen) {
		b.rootSeen = true
		if b.root.IP.IsValid() {
			b.log.WithFields(logrus.Fields{"endpoint": b.cfg.RootEndpointName, "ip": b.root.IP}).Info("forwardHealthCheckVip: health-check ports of LoadBalancer ingress IPs lead to the host endpoint")
		} else {
			b.log.WithField("endpoint", b.cfg.RootEndpointName).Warn("forwardHealthCheckVip: HNS has no host endpoint of that name on the network: health-check ports are not forwarded")
		}
	}
	return nil
}

// ours reports whether crossproxy made the endpoint.
func ours(ep Endpoint) bool {
	return strings.HasPrefix(ep.Name, remoteEndpointPrefix) || ep.Name == sourceVIPEndpointName
}

// notify logs and forwards what HNS cannot express, once per Service and
// feature, and forgets Services that are gone.
func (b *Backend) notify(state *core.NodeState, notices []notice, changes core.Changes, scope map[core.PortKey]struct{}, full bool) {
	for _, s := range changes.StaleUDP {
		notices = append(notices, notice{s.Key.Service, "UDPStaleFlowCleanup",
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
	if b.closed {
		return nil, errClosed
	}
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
		byID[strings.ToLower(ep.ID)] = ep
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
	if b.sourceVIP.IsValid() && len(out.Frontends) > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("SourceVIP: overlay source VIP %s, chosen by %s", b.sourceVIP, b.sourceVIPFrom))
	}
	sort.Strings(out.Notes)
	return out, nil
}

// Cleanup implements platform.Backend: it deletes the load balancers the
// ledger says are crossproxy's (by id, restored under a new id, or pending)
// and the endpoints crossproxy named, nothing else.
// errClosed is what every operation of a closed backend returns.
var errClosed = errors.New("hns backend is closed")

// Close ends the backend's use: HNS calls hold no handle between them, so
// nothing is released, but a closed backend programs nothing more (the
// runner has stopped; a late call is a bug to surface, not to act on).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

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
	b.adopt(lbs)
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

// missingLocal reports whether a missing endpoint is a local one (remote
// endpoints are missing only when their creation failed).
func missingLocal(missing map[core.PortKey][]netip.Addr, plan hnsPlan) bool {
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
