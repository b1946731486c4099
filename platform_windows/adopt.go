package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
)

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

// listing is one read of HNS: the network, its endpoints and every load
// balancer (3 calls), and what the drift check found changed in it.
type listing struct {
	network   Network
	endpoints []Endpoint
	lbs       []LoadBalancer
	drift     []string
}

// list reads the network, its endpoints and the load balancers from HNS.
func (b *Backend) list(ctx context.Context) (*listing, error) {
	if b.cfg.NetworkName == "" {
		return nil, fmt.Errorf("hns: %w: no HNS network name (flag --network-name)", ErrInvalid)
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return nil, fmt.Errorf("get HNS network %q: %w", b.cfg.NetworkName, err)
	}
	if strings.EqualFold(nw.Name, antreaNetworkName) {
		return nil, errAntrea(fmt.Sprintf("the network %q is Antrea's (%s)", nw.Name, nw.Type))
	}
	eps, err := retryListing(func() ([]Endpoint, error) { return b.hns.ListEndpoints(ctx, nw.ID) })
	if err != nil {
		return nil, fmt.Errorf("list endpoints of network %q: %w", nw.Name, err)
	}
	lbs, err := retryListing(func() ([]LoadBalancer, error) { return b.hns.ListLoadBalancers(ctx) })
	if err != nil {
		return nil, fmt.Errorf("list load balancers: %w", err)
	}
	return &listing{network: nw, endpoints: eps, lbs: lbs}, nil
}

// retryListing lists once more when the listing failed with ErrNotFound:
// hcn lists by enumerating the ids and then opening each object
// (hcsshim hcn/hcnendpoint.go enumerateEndpoints, hcnloadbalancer.go
// enumerateLoadBalancers), so an object deleted in between (a pod going
// away on a busy node) fails the whole listing with element-not-found. One
// retry sees the list without it; a second failure is returned.
func retryListing[T any](list func() ([]T, error)) ([]T, error) {
	out, err := list()
	if errors.Is(err, ErrNotFound) {
		out, err = list()
	}
	return out, err
}

// refreshWith takes in what HNS holds, from l when the drift check has just
// read it, else read now, and decides which load balancers are crossproxy's.
func (b *Backend) refreshWith(ctx context.Context, l *listing) error {
	if l == nil {
		var err error
		if l, err = b.list(ctx); err != nil {
			return err
		}
	}
	if b.network.ID != "" && !strings.EqualFold(l.network.ID, b.network.ID) {
		// flannel deletes and creates its network again on restart (new id):
		// the endpoints crossproxy knew are gone with the old one.
		b.log.WithFields(logrus.Fields{"network": l.network.Name, "was": b.network.ID, "now": l.network.ID}).Warn("HNS network recreated under a new id: programming everything again")
	}
	b.network = l.network
	b.ledger.Network = l.network.Name
	b.calicoLookup = true
	b.rootByName = false
	b.useEndpoints(l.endpoints)
	if err := b.findRootByName(ctx); err != nil {
		return err
	}
	b.adopt(l.lbs, true)
	return b.saveLedger()
}

// adopt sorts HNS' load balancers into crossproxy's (b.owned) and the
// others (b.foreign). Crossproxy's are those in the ledger by id; those HNS
// restored under a new id after a restart (the frontend of a ledger entry
// whose id is gone), when restored is true; and those a create made before
// a crash or a failed reply (a pending frontend, unless the load balancer
// already held it when the entry was written). Pending entries are settled
// here.
//
// Cleanup passes restored false: a load balancer on the frontend of one of
// crossproxy's that is gone may be another proxy's that took the frontend
// since (kube-proxy deletes every load balancer when it starts, then makes
// its own: a rollback), and cleanup deletes what it adopts.
func (b *Backend) adopt(lbs []LoadBalancer, restored bool) {
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
		} else if o, ok := vanished[f]; ok && restored {
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
// local one is used; the remote one is deleted at the end of the next full
// sync when crossproxy made it, and never touched when another did (the
// CNI's, kube-proxy's: Calico's Calico_ep is remote).
func (b *Backend) listEndpoints(ctx context.Context) error {
	eps, err := retryListing(func() ([]Endpoint, error) { return b.hns.ListEndpoints(ctx, b.network.ID) })
	if err != nil {
		return fmt.Errorf("list endpoints of network %q: %w", b.network.Name, err)
	}
	b.useEndpoints(eps)
	return nil
}

// useEndpoints indexes the network's endpoints by address and finds the
// host endpoint (forwardHealthCheckVip).
func (b *Backend) useEndpoints(eps []Endpoint) {
	b.byIP = make(map[netip.Addr]Endpoint, len(eps))
	b.dupRemotes = nil
	root := b.root
	if !b.rootByName {
		b.root = Endpoint{}
	}
	for _, ep := range eps {
		if ep.Name == b.cfg.RootEndpointName && !ep.Remote {
			b.root, b.rootByName = ep, false
		}
		old, ok := b.byIP[ep.IP]
		switch {
		case !ok:
			b.byIP[ep.IP] = ep
		case !old.Remote && ep.Remote:
			if ours(ep) {
				b.dupRemotes = append(b.dupRemotes, ep)
			}
		case old.Remote && !ep.Remote:
			if ours(old) {
				b.dupRemotes = append(b.dupRemotes, old)
			}
			b.byIP[ep.IP] = ep
		}
	}
	if b.cfg.ForwardHealthCheckVIP && (b.root.IP != root.IP || !b.rootSeen) {
		b.rootSeen = true
		if b.root.IP.IsValid() {
			b.log.WithFields(logrus.Fields{"endpoint": b.cfg.RootEndpointName, "ip": b.root.IP}).Info("forwardHealthCheckVip: health-check ports of LoadBalancer ingress IPs lead to the host endpoint")
		} else {
			b.log.WithField("endpoint", b.cfg.RootEndpointName).Warn("forwardHealthCheckVip: the network's listing has no host endpoint of that name: health-check ports are not forwarded unless a lookup by name finds it")
		}
	}
}

// findRootByName looks the host endpoint of forwardHealthCheckVip up by
// name when the network's listing does not show it: SDN's cbr0 and flannel
// host-gw's cbr0_ep are made through HNS' V1 API, which V2 listings may
// miss (kubernetes #110591). Once per full sync.
func (b *Backend) findRootByName(ctx context.Context) error {
	if !b.cfg.ForwardHealthCheckVIP || b.root.IP.IsValid() {
		return nil
	}
	ep, err := b.hns.GetEndpointByName(ctx, b.cfg.RootEndpointName)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("look up the host endpoint %q by name: %w", b.cfg.RootEndpointName, err)
	case ep.Remote || !ep.IP.IsValid():
		return nil
	}
	b.root, b.rootByName = ep, true
	b.log.WithFields(logrus.Fields{"endpoint": ep.Name, "ip": ep.IP}).
		Info("forwardHealthCheckVip: the host endpoint is not in HNS' V2 listing of the network (made through the V1 API); found by name, health-check ports lead to it")
	return nil
}

// ours reports whether crossproxy made the endpoint.
func ours(ep Endpoint) bool {
	return strings.HasPrefix(ep.Name, remoteEndpointPrefix) || ep.Name == sourceVIPEndpointName
}
