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

	// What a Windows Server release's HNS does (Profile), and the node's
	// life the layouts play (fake_helpers_test.go).
	profile Profile
	// absent: the pod network does not exist yet (the CNI makes it after
	// boot; only others, such as External, are there).
	absent bool
	// v1 are endpoints made through HNS' V1 API: a V2 listing of the
	// network does not show them when the profile says so (HideV1Endpoints).
	v1 map[string]bool
	// leaked are port locks HNS kept after a failed delete (kubernetes
	// #137530): "TCP/30080" -> creates on the port still refused.
	leaked map[string]int
	// listRace runs inside a listing, between enumerating the ids and
	// opening each object, as a concurrent delete by the CNI would.
	listRace func()
	// dll counts the calls hcn makes into computenetwork.dll for each HNS
	// call (hnsCost): what a method costs on a real node.
	dll int
	// gone is when each frontend lost its load balancer and outage the
	// longest time one was without (a delete followed by a create).
	gone   map[string]time.Time
	outage map[string]time.Duration
}

// Profile is how one Windows Server release's HNS behaves where crossproxy
// can tell the difference; the profiles themselves, each knob with its
// public source, are in the package's tests (profiles_test.go).
type Profile struct {
	// Name is the release ("ws2019") and Version HNS' version on it.
	Name, Version string
	// Features are what crossproxy detects on it.
	Features Features
	// ModifyKeepsEndpoints: a load balancer modify succeeds and HNS keeps
	// the old endpoint list (HNS 15.4, kubernetes #131466).
	ModifyKeepsEndpoints bool
	// RehydrateAfterRestart: after an HNS restart the load balancers are
	// back under new ids (kubernetes #139519); else they and the remote
	// endpoints are gone.
	RehydrateAfterRestart bool
	// ListFailsOnConcurrentDelete: an object deleted between a listing's
	// enumerate and its open fails the whole listing with element not
	// found (hcsshim hcn/hcnendpoint.go enumerateEndpoints: every id is
	// opened in turn and the first failure is returned).
	ListFailsOnConcurrentDelete bool
	// HideV1Endpoints: endpoints made through the V1 API are missing from
	// ListEndpointsOfNetwork (kubernetes #110591).
	HideV1Endpoints bool
}

// NewFake returns a fake HNS with one network, the given features, and the
// endpoints the CNI made before (each given an id; not counted as calls).
func NewFake(nw Network, features Features, endpoints ...Endpoint) *Fake {
	if nw.ID == "" {
		nw.ID = "00000000-0000-4000-8000-00000000BEEF"
	}
	f := &Fake{features: features, network: nw, eps: map[string]Endpoint{}, lbs: map[string]LoadBalancer{},
		calls: map[string]int{}, reserved: map[string]bool{}, v1: map[string]bool{}, leaked: map[string]int{},
		gone: map[string]time.Time{}, outage: map[string]time.Duration{}}
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
	f.dll += hnsCost[method]
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

// hnsCost is how many calls into computenetwork.dll hcsshim v0.15.0's hcn
// makes for one HNS call, before the per-object part of listings
// (listCost): a create opens the network, creates, queries and closes both
// (hcn/hcnendpoint.go createEndpoint), a load balancer's create creates,
// queries and closes (hcnloadbalancer.go createLoadBalancer), a modify
// opens, modifies, queries and closes, a delete is one call, a query by
// name is an enumerate with a filter, and the version one query.
var hnsCost = map[string]int{
	"Features": 1, "GetNetwork": 1, "ListNetworks": 1, "ListEndpoints": 1, "ListLoadBalancers": 1, "GetEndpointByName": 1,
	"CreateRemoteEndpoint": 5, "CreateLocalEndpoint": 5, "CreateLoadBalancer": 3, "UpdateLoadBalancer": 4,
	"DeleteEndpoint": 1, "DeleteLoadBalancer": 1,
}

// listCost is what each object a listing returns costs: hcn enumerates the
// ids, then opens, queries and closes each (enumerateEndpoints, getEndpoint).
const listCost = 3

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
	nw, ok := Network{}, false
	for _, n := range f.networks() {
		if strings.EqualFold(name, n.Name) {
			nw, ok = n, true
			break
		}
	}
	if !ok {
		return Network{}, fmt.Errorf("network %q: %w", name, ErrNotFound)
	}
	f.dll += listCost
	// HNS reports the network afresh on each query: the caller's copy shares
	// nothing with it, its subnets (Ipams) included.
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
	out := f.networks()
	f.dll += listCost * len(out)
	return out, nil
}

// networks are the node's networks: the pod network (once it exists) and the others.
func (f *Fake) networks() []Network {
	var out []Network
	if !f.absent {
		out = append(out, f.network)
	}
	return append(out, f.others...)
}

// ListEndpoints implements HNS.
func (f *Fake) ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error) {
	if err := f.call(ctx, "ListEndpoints", networkID); err != nil {
		return nil, err
	}
	f.mu.Lock()
	if networkID != f.network.ID || f.absent {
		f.mu.Unlock()
		return nil, fmt.Errorf("network %s: %w", networkID, ErrNotFound)
	}
	enumerated := f.listed()
	race := f.listRace
	f.mu.Unlock()
	if race != nil {
		race()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Endpoint
	for _, ep := range enumerated {
		cur, ok := f.eps[ep.ID]
		if !ok {
			if f.profile.ListFailsOnConcurrentDelete {
				return nil, fmt.Errorf("open endpoint %s: element not found: %w", ep.ID, ErrNotFound)
			}
			continue
		}
		f.dll += listCost
		out = append(out, cur)
	}
	return out, nil
}

// listed are the endpoints a V2 listing of the network enumerates.
func (f *Fake) listed() []Endpoint {
	var out []Endpoint
	for _, ep := range f.sortedEndpoints() {
		if f.v1[ep.ID] && f.profile.HideV1Endpoints {
			continue
		}
		out = append(out, ep)
	}
	return out
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
	case networkID != f.network.ID || f.absent:
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
	f.dll += listCost * len(f.lbs)
	return f.sortedLBs(), nil
}

// CreateLoadBalancer implements HNS.
func (f *Fake) CreateLoadBalancer(ctx context.Context, lb LoadBalancer) (LoadBalancer, error) {
	if err := f.call(ctx, "CreateLoadBalancer", lb.frontend()); err != nil {
		return LoadBalancer{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if port := fmt.Sprintf("%s/%d", lb.Protocol, lb.ExternalPort); f.leaked[port] > 0 {
		f.leaked[port]--
		return LoadBalancer{}, fmt.Errorf("load balancer %s: HNS still holds the port's lock (HCN_E_PORT_ALREADY_EXISTS): %w", lb.frontend(), ErrDuplicateFrontend)
	}
	if err := f.validate(lb, ""); err != nil {
		return LoadBalancer{}, err
	}
	lb = cloneLB(lb)
	lb.ID = f.newID()
	f.lbs[lb.ID] = lb
	f.back(lb.frontend())
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
	if f.profile.ModifyKeepsEndpoints {
		lb.EndpointIDs = cloneLB(f.lbs[id]).EndpointIDs
	}
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
	lb, ok := f.lbs[id]
	if !ok {
		return fmt.Errorf("load balancer %s: %w", id, ErrNotFound)
	}
	delete(f.lbs, id)
	f.gone[lb.frontend()] = time.Now()
	return nil
}

// back records how long a frontend was without a load balancer.
func (f *Fake) back(frontend string) {
	if t, ok := f.gone[frontend]; ok {
		f.outage[frontend] = max(f.outage[frontend], time.Since(t))
		delete(f.gone, frontend)
	}
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
			f.dll += listCost
			return ep, nil
		}
	}
	return Endpoint{}, fmt.Errorf("endpoint named %q: %w", name, ErrNotFound)
}
