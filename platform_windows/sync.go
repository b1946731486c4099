package hns

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// Sync implements platform.Backend. A full sync re-reads HNS (3 calls, none
// right after a drift check that found drift: it reuses that listing) and
// reconciles every port; a partial sync trusts what the last sync read and
// touches only the changed ports and those whose last attempt failed.
func (b *Backend) Sync(ctx context.Context, state *core.NodeState, changes core.Changes) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if err := b.prepare(ctx, changes.Full || !b.synced); err != nil {
		return err
	}
	full := changes.Full || !b.synced
	// A listing the drift check just made (it found drift, and the runner
	// made this sync full) is used instead of reading HNS again; one this
	// sync cannot use is dropped, never kept for a later sync.
	repair := b.listed
	b.listed = nil
	if full {
		if err := b.refreshWith(ctx, repair); err != nil {
			return err
		}
	} else {
		repair = nil
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
	if !full {
		reread, err := b.rereadRemoteSubnets(ctx, plan)
		if err != nil {
			return err
		}
		if reread {
			opts.Network = b.network
			plan = planPorts(state, list, opts)
		}
	}
	gone := b.goneClusterIPs(state, keys)
	b.rememberFrontends(state, keys, full)
	remotes := b.remotesCreated
	notices, err := b.reconcile(ctx, plan, keys, full, gone)
	b.notify(state, append(plan.Notices, notices...), changes, keys, full)
	if repair != nil {
		n := b.remotesCreated - remotes
		if n > 0 && b.cfg.Repairs != nil {
			b.cfg.Repairs.Repaired("remote endpoint", n)
		}
		b.log.WithFields(logrus.Fields{"drifted": len(repair.drift), "remoteEndpointsRecreated": n, "complete": err == nil}).Warn("drift repair done")
	}
	return err
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
	now := b.now()
	for k, w := range b.busy {
		switch {
		case state.Ports[k] == nil:
			delete(b.busy, k)
		case !now.Before(w.next):
			keys[k] = struct{}{}
		}
	}
	return keys
}

// rereadRemoteSubnets reads the overlay network again when the plan of a
// partial sync has a pod on another node whose address no remote subnet
// holds and for which HNS has no endpoint yet: a node joined since the last
// full sync (flannel's handleSubnetEvents and Calico's VXLAN manager add
// its RemoteSubnetRoute when it does), and planning with the old subnets
// would give its pods this node's address as provider address until the
// next full sync. kube-proxy reads the network before creating each overlay
// remote endpoint; this reads it at most once per sync, and not at all for
// an address off the pod network whose endpoint exists (the API servers).
// It reports whether the subnets changed (the caller plans again).
func (b *Backend) rereadRemoteSubnets(ctx context.Context, plan hnsPlan) (bool, error) {
	if !b.network.isOverlay() {
		return false, nil
	}
	unknown := false
	for _, lb := range plan.LoadBalancers {
		for ip := range lb.Remote {
			if _, have := b.byIP[ip]; have {
				continue
			}
			if _, ok := b.network.providerAddress(ip); !ok {
				unknown = true
			}
		}
	}
	if !unknown {
		return false, nil
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return false, fmt.Errorf("hns: read network %q for remote subnets added since the last full sync: %w", b.cfg.NetworkName, err)
	}
	if !strings.EqualFold(nw.ID, b.network.ID) {
		b.synced = false
		return false, fmt.Errorf("hns: network %q recreated (id %s, was %s): the next sync programs it whole", nw.Name, nw.ID, b.network.ID)
	}
	d := remoteSubnetsChanged(b.network, nw)
	if d == "" {
		return false, nil
	}
	b.log.WithField("change", d).Info("a node joined or left since the last full sync: planning with the network's remote subnets as HNS has them now")
	b.network.RemoteSubnets = nw.RemoteSubnets
	return true, nil
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

// goneClusterIPs are the ClusterIPs of the ports in scope that left the
// state and that no port still in it has (a Service deleted; another port
// of a Service that remains keeps its ClusterIP): on overlay networks their
// remote endpoint goes in this sync, as kube-proxy's.
func (b *Backend) goneClusterIPs(state *core.NodeState, scope map[core.PortKey]struct{}) map[netip.Addr]bool {
	if !b.network.isOverlay() {
		return nil
	}
	var gone map[netip.Addr]bool
	for k := range scope {
		if state.Ports[k] != nil {
			continue
		}
		for _, f := range b.frontends[k] {
			if f.Kind == core.FrontendClusterIP {
				if gone == nil {
					gone = map[netip.Addr]bool{}
				}
				gone[f.Addr] = true
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	for _, p := range state.Ports {
		delete(gone, p.ClusterIP)
	}
	return gone
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
