package hns

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Fake is an in-memory HNS. It validates what crossproxy sends the way HNS
// does (duplicate frontends, identical objects, unknown endpoints, duplicate
// endpoint addresses, modify without the feature, deleting an endpoint a load
// balancer uses) and reads load balancers back normalised as HNS does (its
// own endpoint order, upper-case ids), not echoed. It is untagged so the
// planner, differ, applier and Backend tests run on any OS and under Wine, and
// `crossproxy service run --fake-hns-network` programs it in a test build
// (-tags fakehns; the release binary does not link it). The test helpers
// that count calls and inject HNS' failures live in the package's tests.
type Fake struct {
	mu       sync.Mutex
	features Features
	network  Network
	// others are the node's other networks (ListNetworks: nat, another CNI's).
	others []Network
	eps    map[string]Endpoint
	lbs    map[string]LoadBalancer
	nextID int

	// What tests set through the helpers in fake_helpers_test.go.
	calls    map[string]int
	inFlight int
	maxIn    int
	latency  time.Duration
	fail     func(method, arg string) error
	// failAfter fails a create or update after HNS made the change.
	failAfter func(method, arg string) error
	// updateNotImpl makes UpdateLoadBalancer return E_NOTIMPL although the
	// features report in-place modify (builds that do).
	updateNotImpl bool
	// reserved are host port reservations: "TCP/30080".
	reserved map[string]bool
}

// NewFake returns a fake HNS with one network, the given features, and the
// endpoints the CNI made before (each given an id; not counted as calls).
func NewFake(nw Network, features Features, endpoints ...Endpoint) *Fake {
	if nw.ID == "" {
		nw.ID = "00000000-0000-4000-8000-00000000BEEF"
	}
	f := &Fake{features: features, network: nw, eps: map[string]Endpoint{}, lbs: map[string]LoadBalancer{},
		calls: map[string]int{}, reserved: map[string]bool{}}
	for _, ep := range endpoints {
		ep.ID = f.newID()
		f.eps[ep.ID] = ep
	}
	return f
}

// State returns every endpoint (sorted by address) and every load balancer
// (sorted by frontend, as HNS reports it): what HNS holds, without a call.
func (f *Fake) State() ([]Endpoint, []LoadBalancer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedEndpoints(), f.sortedLBs()
}

var _ HNS = (*Fake)(nil)

func (f *Fake) sortedLBs() []LoadBalancer {
	out := make([]LoadBalancer, 0, len(f.lbs))
	for _, lb := range f.lbs {
		out = append(out, readBack(lb))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].frontend() < out[j].frontend() })
	return out
}

func (f *Fake) sortedEndpoints() []Endpoint {
	out := make([]Endpoint, 0, len(f.eps))
	for _, ep := range f.eps {
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IP.Less(out[j].IP) })
	return out
}

// call counts a call, sleeps the latency (outside the lock, so concurrent
// callers overlap as they would against HNS) and asks Fail.
func (f *Fake) call(ctx context.Context, method, arg string) error {
	f.mu.Lock()
	f.calls[method]++
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	latency, fail := f.latency, f.fail
	f.mu.Unlock()
	if latency > 0 {
		time.Sleep(latency)
	}
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if fail != nil {
		if err := fail(method, arg); err != nil {
			return err
		}
	}
	return nil
}

// after asks failAfter once a create or update has changed the state.
func (f *Fake) after(method, arg string) error {
	if f.failAfter == nil {
		return nil
	}
	return f.failAfter(method, arg)
}

func (f *Fake) newID() string {
	f.nextID++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", f.nextID, f.nextID)
}

// Features implements HNS.
func (f *Fake) Features(ctx context.Context) (Features, error) {
	if err := f.call(ctx, "Features", ""); err != nil {
		return Features{}, err
	}
	return f.features, nil
}

// GetNetwork implements HNS.
func (f *Fake) GetNetwork(ctx context.Context, name string) (Network, error) {
	if err := f.call(ctx, "GetNetwork", name); err != nil {
		return Network{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.EqualFold(name, f.network.Name) {
		return Network{}, fmt.Errorf("network %q: %w", name, ErrNotFound)
	}
	// HNS reports the network afresh on each query: the caller's copy shares
	// nothing with it, its subnets (Ipams) included.
	nw := f.network
	nw.RemoteSubnets = slices.Clone(nw.RemoteSubnets)
	nw.Subnets = slices.Clone(nw.Subnets)
	return nw, nil
}

// ListNetworks implements HNS: the network crossproxy programs and the
// others, in the order they were made.
func (f *Fake) ListNetworks(ctx context.Context) ([]Network, error) {
	if err := f.call(ctx, "ListNetworks", ""); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []Network{f.network}
	return append(out, f.others...), nil
}

// ListEndpoints implements HNS.
func (f *Fake) ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error) {
	if err := f.call(ctx, "ListEndpoints", networkID); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if networkID != f.network.ID {
		return nil, fmt.Errorf("network %s: %w", networkID, ErrNotFound)
	}
	return f.sortedEndpoints(), nil
}

// CreateRemoteEndpoint implements HNS.
func (f *Fake) CreateRemoteEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error) {
	ep.Remote = true
	return f.createEndpoint(ctx, "CreateRemoteEndpoint", networkID, ep)
}

// CreateLocalEndpoint implements HNS.
func (f *Fake) CreateLocalEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error) {
	ep.Remote = false
	return f.createEndpoint(ctx, "CreateLocalEndpoint", networkID, ep)
}

func (f *Fake) createEndpoint(ctx context.Context, method, networkID string, ep Endpoint) (Endpoint, error) {
	if err := f.call(ctx, method, ep.IP.String()); err != nil {
		return Endpoint{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case networkID != f.network.ID:
		return Endpoint{}, fmt.Errorf("network %s: %w", networkID, ErrNotFound)
	case !ep.IP.IsValid():
		return Endpoint{}, fmt.Errorf("endpoint without address: %w", ErrInvalid)
	case ep.Remote && f.network.isOverlay() && !ep.ProviderAddress.IsValid():
		return Endpoint{}, fmt.Errorf("remote endpoint %s on an overlay network needs a provider address: %w", ep.IP, ErrInvalid)
	}
	for _, other := range f.eps {
		if other.IP == ep.IP {
			return Endpoint{}, fmt.Errorf("endpoint %s: address already used by endpoint %s: %w", ep.IP, other.ID, ErrInvalid)
		}
	}
	ep.ID = f.newID()
	f.eps[ep.ID] = ep
	if err := f.after(method, ep.IP.String()); err != nil {
		return Endpoint{}, err
	}
	return ep, nil
}

// DeleteEndpoint implements HNS.
func (f *Fake) DeleteEndpoint(ctx context.Context, id string) error {
	if err := f.call(ctx, "DeleteEndpoint", id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.eps[id]; !ok {
		return fmt.Errorf("endpoint %s: %w", id, ErrNotFound)
	}
	for _, lb := range f.lbs {
		for _, e := range lb.EndpointIDs {
			if e == id {
				return fmt.Errorf("endpoint %s is used by load balancer %s: %w", id, lb.ID, ErrInvalid)
			}
		}
	}
	delete(f.eps, id)
	return nil
}

// ListLoadBalancers implements HNS.
func (f *Fake) ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error) {
	if err := f.call(ctx, "ListLoadBalancers", ""); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedLBs(), nil
}

// CreateLoadBalancer implements HNS.
func (f *Fake) CreateLoadBalancer(ctx context.Context, lb LoadBalancer) (LoadBalancer, error) {
	if err := f.call(ctx, "CreateLoadBalancer", lb.frontend()); err != nil {
		return LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.validate(lb, ""); err != nil {
		return LoadBalancer{}, err
	}
	lb = cloneLB(lb)
	lb.ID = f.newID()
	f.lbs[lb.ID] = lb
	if err := f.after("CreateLoadBalancer", lb.frontend()); err != nil {
		return LoadBalancer{}, err
	}
	return readBack(lb), nil
}

// UpdateLoadBalancer implements HNS.
func (f *Fake) UpdateLoadBalancer(ctx context.Context, id string, lb LoadBalancer) (LoadBalancer, error) {
	if err := f.call(ctx, "UpdateLoadBalancer", id); err != nil {
		return LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.features.ModifyLoadBalancer || f.updateNotImpl {
		return LoadBalancer{}, fmt.Errorf("modify load balancer %s: %w", id, ErrNotImplemented)
	}
	if _, ok := f.lbs[id]; !ok {
		return LoadBalancer{}, fmt.Errorf("load balancer %s: %w", id, ErrNotFound)
	}
	if err := f.validate(lb, id); err != nil {
		return LoadBalancer{}, err
	}
	lb = cloneLB(lb)
	lb.ID = id
	f.lbs[id] = lb
	if err := f.after("UpdateLoadBalancer", id); err != nil {
		return LoadBalancer{}, err
	}
	return readBack(lb), nil
}

// DeleteLoadBalancer implements HNS.
func (f *Fake) DeleteLoadBalancer(ctx context.Context, id string) error {
	if err := f.call(ctx, "DeleteLoadBalancer", id); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.lbs[id]; !ok {
		return fmt.Errorf("load balancer %s: %w", id, ErrNotFound)
	}
	delete(f.lbs, id)
	return nil
}

// validate checks a load balancer as HNS does before accepting it; self is
// the id being modified (its own frontend is no conflict).
func (f *Fake) validate(lb LoadBalancer, self string) error {
	fe := lb.frontend()
	if lb.Protocol != ProtocolTCP && lb.Protocol != ProtocolUDP {
		return fmt.Errorf("load balancer %s: protocol %d: %w", fe, lb.Protocol, ErrInvalid)
	}
	if lb.ExternalPort == 0 || lb.InternalPort == 0 {
		return fmt.Errorf("load balancer %s: port 0: %w", fe, ErrInvalid)
	}
	if f.reserved[fmt.Sprintf("%s/%d", lb.Protocol, lb.ExternalPort)] {
		return fmt.Errorf("load balancer %s: port reserved on the host (HCN_E_PORT_ALREADY_EXISTS): %w", fe, ErrDuplicateFrontend)
	}
	if lb.Flags.DSR && !f.features.DSR {
		return fmt.Errorf("load balancer %s: DSR is not supported here: %w", fe, ErrInvalid)
	}
	if lb.SourceIPAffinity && !f.features.SessionAffinity {
		return fmt.Errorf("load balancer %s: session affinity is not supported here: %w", fe, ErrInvalid)
	}
	for _, v := range lb.FrontendVIPs {
		if v.Is6() != lb.Flags.IPv6 {
			return fmt.Errorf("load balancer %s: VIP %s does not match the IPv6 flag: %w", fe, v, ErrInvalid)
		}
		if v.Is6() && !f.features.IPv6DualStack {
			return fmt.Errorf("load balancer %s: IPv6 is not supported here: %w", fe, ErrInvalid)
		}
	}
	for _, id := range lb.EndpointIDs {
		ep, ok := f.eps[id]
		if !ok {
			return fmt.Errorf("load balancer %s: endpoint %s: %w", fe, id, ErrUnknownEndpoint)
		}
		if ep.IP.Is6() != lb.Flags.IPv6 {
			return fmt.Errorf("load balancer %s: endpoint %s (%s) is of the other IP family: %w", fe, id, ep.IP, ErrInvalid)
		}
	}
	for id, other := range f.lbs {
		if id == self || other.Protocol != lb.Protocol || other.ExternalPort != lb.ExternalPort || other.Flags.IPv6 != lb.Flags.IPv6 {
			continue
		}
		if !overlaps(other.FrontendVIPs, lb.FrontendVIPs) {
			continue
		}
		if self == "" && sameLB(other, lb) {
			return fmt.Errorf("load balancer %s: identical to %s (ERROR_ALREADY_EXISTS): %w", fe, id, ErrAlreadyExists)
		}
		return fmt.Errorf("load balancer %s conflicts with %s (%s) (HCN_E_PORT_ALREADY_EXISTS): %w", fe, id, other.frontend(), ErrDuplicateFrontend)
	}
	return nil
}

// overlaps reports whether two frontends share a VIP; two load balancers
// without VIP (every host address) overlap as well.
func overlaps(a, b []netip.Addr) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

func cloneLB(lb LoadBalancer) LoadBalancer {
	lb.FrontendVIPs = append([]netip.Addr(nil), lb.FrontendVIPs...)
	lb.EndpointIDs = append([]string(nil), lb.EndpointIDs...)
	return lb
}

// readBack is a load balancer as HNS reports it: endpoint ids upper-case and
// in HNS' own order, not as they were sent.
func readBack(lb LoadBalancer) LoadBalancer {
	lb = cloneLB(lb)
	for i, id := range lb.EndpointIDs {
		lb.EndpointIDs[i] = strings.ToUpper(id)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(lb.EndpointIDs)))
	return lb
}

// GetEndpointByName implements HNS: the first endpoint in address order
// whose name matches, compared case-insensitively so that a lookup does not
// depend on how a CNI capitalised its endpoint's name.
func (f *Fake) GetEndpointByName(ctx context.Context, name string) (Endpoint, error) {
	if err := f.call(ctx, "GetEndpointByName", name); err != nil {
		return Endpoint{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ep := range f.sortedEndpoints() {
		if strings.EqualFold(ep.Name, name) {
			return ep, nil
		}
	}
	return Endpoint{}, fmt.Errorf("endpoint named %q: %w", name, ErrNotFound)
}
