package hns

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Fake is an in-memory HNS. It validates what crossproxy sends the way HNS
// does (duplicate frontends, unknown endpoints, duplicate endpoint addresses,
// modify without the feature, deleting an endpoint a load balancer uses),
// counts calls, and can add latency and failures. It is untagged so planner,
// differ, applier and Backend tests run on any OS and under Wine.
type Fake struct {
	// Latency is added to every call through Sleep (time.Sleep by default).
	Latency time.Duration
	Sleep   func(time.Duration)
	// Fail, when set, is asked before every call; a non-nil error fails the
	// call without changing anything. arg is the object id or frontend.
	Fail func(method, arg string) error

	mu       sync.Mutex
	features Features
	network  Network
	eps      map[string]Endpoint
	lbs      map[string]LoadBalancer
	calls    map[string]int
	nextID   int
	inFlight int
	maxIn    int
}

// NewFake returns a fake HNS with one network and the given features.
func NewFake(nw Network, features Features) *Fake {
	if nw.ID == "" {
		nw.ID = "00000000-0000-4000-8000-00000000beef"
	}
	return &Fake{features: features, network: nw, eps: map[string]Endpoint{}, lbs: map[string]LoadBalancer{}, calls: map[string]int{}}
}

var _ HNS = (*Fake)(nil)

// AddLocalEndpoint adds an endpoint as the CNI would for a pod on this node
// (not counted as a call) and returns its id.
func (f *Fake) AddLocalEndpoint(name string, ip netip.Addr) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.newID()
	f.eps[id] = Endpoint{ID: id, Name: name, IP: ip}
	return id
}

// AddForeignLoadBalancer adds a load balancer someone else (another proxy, an
// operator) created; crossproxy must leave it alone.
func (f *Fake) AddForeignLoadBalancer(lb LoadBalancer) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	lb.ID = f.newID()
	f.lbs[lb.ID] = cloneLB(lb)
	return lb.ID
}

// Calls returns the number of calls per method since the last ResetCalls.
func (f *Fake) Calls() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.calls))
	for k, v := range f.calls {
		out[k] = v
	}
	return out
}

// TotalCalls is the sum of Calls.
func (f *Fake) TotalCalls() int {
	n := 0
	for _, v := range f.Calls() {
		n += v
	}
	return n
}

// ResetCalls zeroes the call counters and the in-flight maximum.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = map[string]int{}
	f.maxIn = 0
}

// MaxInFlight is the most calls that were in progress at once since the last
// ResetCalls (with Latency set, this shows the applier's concurrency bound).
func (f *Fake) MaxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxIn
}

// LoadBalancers returns a snapshot of every load balancer, sorted by frontend.
func (f *Fake) LoadBalancers() []LoadBalancer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedLBs()
}

// Endpoints returns a snapshot of every endpoint, sorted by IP.
func (f *Fake) Endpoints() []Endpoint {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sortedEndpoints()
}

func (f *Fake) sortedLBs() []LoadBalancer {
	out := make([]LoadBalancer, 0, len(f.lbs))
	for _, lb := range f.lbs {
		out = append(out, cloneLB(lb))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Frontend() < out[j].Frontend() })
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
	f.mu.Unlock()
	if f.Latency > 0 {
		sleep := f.Sleep
		if sleep == nil {
			sleep = time.Sleep
		}
		sleep(f.Latency)
	}
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if f.Fail != nil {
		if err := f.Fail(method, arg); err != nil {
			return err
		}
	}
	return nil
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
	if name != f.network.Name {
		return Network{}, fmt.Errorf("network %q: %w", name, ErrNotFound)
	}
	return f.network, nil
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
	if err := f.call(ctx, "CreateRemoteEndpoint", ep.IP.String()); err != nil {
		return Endpoint{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case networkID != f.network.ID:
		return Endpoint{}, fmt.Errorf("network %s: %w", networkID, ErrNotFound)
	case !ep.IP.IsValid():
		return Endpoint{}, fmt.Errorf("remote endpoint without address: %w", ErrInvalid)
	case f.network.Type == NetworkOverlay && !ep.ProviderAddress.IsValid():
		return Endpoint{}, fmt.Errorf("remote endpoint %s on an overlay network needs a provider address: %w", ep.IP, ErrInvalid)
	}
	for _, other := range f.eps {
		if other.IP == ep.IP {
			return Endpoint{}, fmt.Errorf("endpoint %s: address already used by endpoint %s: %w", ep.IP, other.ID, ErrInvalid)
		}
	}
	ep.ID = f.newID()
	ep.Remote = true
	f.eps[ep.ID] = ep
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
	if err := f.call(ctx, "CreateLoadBalancer", lb.Frontend()); err != nil {
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
	return cloneLB(lb), nil
}

// UpdateLoadBalancer implements HNS.
func (f *Fake) UpdateLoadBalancer(ctx context.Context, id string, lb LoadBalancer) (LoadBalancer, error) {
	if err := f.call(ctx, "UpdateLoadBalancer", id); err != nil {
		return LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.features.ModifyLoadBalancer {
		return LoadBalancer{}, fmt.Errorf("modify load balancer %s: this HNS cannot modify load balancers: %w", id, ErrInvalid)
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
	return cloneLB(lb), nil
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
	fe := lb.Frontend()
	if lb.Protocol != ProtocolTCP && lb.Protocol != ProtocolUDP {
		return fmt.Errorf("load balancer %s: protocol %d: %w", fe, lb.Protocol, ErrInvalid)
	}
	if lb.ExternalPort == 0 || lb.InternalPort == 0 {
		return fmt.Errorf("load balancer %s: port 0: %w", fe, ErrInvalid)
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
		if id == self || other.Protocol != lb.Protocol || other.ExternalPort != lb.ExternalPort {
			continue
		}
		for _, a := range other.FrontendVIPs {
			for _, b := range lb.FrontendVIPs {
				if a == b {
					return fmt.Errorf("load balancer %s conflicts with %s (%s): %w", fe, id, other.Frontend(), ErrDuplicateFrontend)
				}
			}
		}
	}
	return nil
}

func cloneLB(lb LoadBalancer) LoadBalancer {
	lb.FrontendVIPs = append([]netip.Addr(nil), lb.FrontendVIPs...)
	lb.EndpointIDs = append([]string(nil), lb.EndpointIDs...)
	return lb
}
