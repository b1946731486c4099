package hns

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"
)

// The Fake's test helpers: they set up what the CNI, other proxies and HNS
// itself do, inject HNS' failures, and count calls. They live in a test file
// so they do not ship in the binary.

// AddLocalEndpoint adds an endpoint as the CNI would for a pod on this node
// (not counted as a call) and returns its id.
func (f *Fake) AddLocalEndpoint(name string, ip netip.Addr) string {
	return f.AddEndpoint(Endpoint{Name: name, IP: ip})
}

// AddEndpoint adds any endpoint without HNS' checks (not counted as a call):
// Windows Server 2019 and 2022 can hold a local and a remote endpoint with
// one address, which HNS would refuse to create now.
func (f *Fake) AddEndpoint(ep Endpoint) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ep.ID = f.newID()
	f.eps[ep.ID] = ep
	return ep.ID
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

// ReservePort makes the host hold a port (an excluded port range): HNS then
// refuses every load balancer on it with HCN_E_PORT_ALREADY_EXISTS.
func (f *Fake) ReservePort(proto Protocol, port uint16) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserved[fmt.Sprintf("%s/%d", proto, port)] = true
}

// Restart is an HNS restart: HNS restores every load balancer, under a new
// id, so the ids crossproxy recorded are gone.
func (f *Fake) Restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	restored := make(map[string]LoadBalancer, len(f.lbs))
	for _, lb := range f.lbs {
		lb.ID = f.newID()
		restored[lb.ID] = lb
	}
	f.lbs = restored
}

// SetLatency adds d to every call (a real sleep, outside the lock).
func (f *Fake) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// SetFail installs fn, asked before every call; a non-nil error fails the call
// without changing anything. arg is the object id, address or frontend.
func (f *Fake) SetFail(fn func(method, arg string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fn
}

// SetFailAfter installs fn, asked after a create or update changed HNS: a
// non-nil error is returned although the object exists (a timeout, an RPC
// failure on the way back).
func (f *Fake) SetFailAfter(fn func(method, arg string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAfter = fn
}

// SetUpdateNotImplemented makes UpdateLoadBalancer return E_NOTIMPL although
// the features report in-place modify.
func (f *Fake) SetUpdateNotImplemented(v bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updateNotImpl = v
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
// ResetCalls (with a latency set, this shows the applier's concurrency bound).
func (f *Fake) MaxInFlight() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.maxIn
}

// LoadBalancers returns every load balancer as HNS reports it, sorted by frontend.
func (f *Fake) LoadBalancers() []LoadBalancer {
	_, lbs := f.State()
	return lbs
}

// Endpoints returns a snapshot of every endpoint, sorted by IP.
func (f *Fake) Endpoints() []Endpoint {
	eps, _ := f.State()
	return eps
}

// SetRemoteSubnets replaces the network's remote subnets (the CNI moved a
// node's pod subnet, or a node got a new address).
func (f *Fake) SetRemoteSubnets(s []RemoteSubnet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.network.RemoteSubnets = s
}

// RestartLosingState is an HNS restart that keeps nothing crossproxy relies
// on (kubernetes issues 110849, 135802): every load balancer and every
// remote endpoint is gone, and so are the local endpoints at lost (the
// overlay source-VIP endpoint, whoever made it); the pods' endpoints stay.
func (f *Fake) RestartLosingState(lost ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.lbs)
	for id, ep := range f.eps {
		if ep.Remote || ep.Name == sourceVIPEndpointName || slices.Contains(lost, ep.IP) {
			delete(f.eps, id)
		}
	}
}

// RecreateNetwork deletes the network and creates it again under a new id,
// as flannel does on restart when the network does not match its lease
// (pkg/backend/vxlan/device_windows.go, ensureNetwork): its endpoints go with
// it, and so (assumed here) do the load balancers that used them. The CNI
// makes the pods' endpoints again on the new network (AddLocalEndpoint).
func (f *Fake) RecreateNetwork(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.network.ID = id
	clear(f.eps)
	clear(f.lbs)
}

// AddNetwork adds another network to the node (Docker's nat, a second CNI's).
func (f *Fake) AddNetwork(nw Network) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.others = append(f.others, nw)
}

// DeleteBehind deletes a load balancer as another tool would (not a call).
func (f *Fake) DeleteBehind(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.lbs, id)
}

// ChangeBehind changes a load balancer in place as another tool would (not a call).
func (f *Fake) ChangeBehind(id string, change func(*LoadBalancer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lb := f.lbs[id]
	change(&lb)
	f.lbs[id] = lb
}

// NewFakeProfile returns a fake HNS that behaves as the profile's Windows
// Server release does, with one network (not counted as calls).
func NewFakeProfile(nw Network, p Profile) *Fake {
	f := NewFake(nw, p.Features)
	f.profile = p
	return f
}

// NetworkLater makes the pod network absent until MakeNetwork: the node has
// booted and only the networks made before the CNI (External) are there.
func (f *Fake) NetworkLater() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absent = true
}

// MakeNetwork is the CNI making its network.
func (f *Fake) MakeNetwork() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.absent = false
}

// AddV1Endpoint adds an endpoint made through HNS' V1 API (Calico's
// Calico_ep, flannel host-gw's cbr0_ep): a V2 listing of the network
// misses it where the profile says so (not counted as a call).
func (f *Fake) AddV1Endpoint(ep Endpoint) string {
	id := f.AddEndpoint(ep)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v1[id] = true
	return id
}

// CNICreateLocalEndpoint is the CNI creating a pod's endpoint, with HNS'
// check: a local endpoint is refused while any endpoint, remote ones
// included, has its address (kubernetes #130963).
func (f *Fake) CNICreateLocalEndpoint(name string, a netip.Addr) (string, error) {
	f.mu.Lock()
	for id, ep := range f.eps {
		if ep.IP == a {
			f.mu.Unlock()
			return "", fmt.Errorf("create endpoint %s: address already used by endpoint %s (%s): %w", a, id, ep.Name, ErrInvalid)
		}
	}
	f.mu.Unlock()
	return f.AddLocalEndpoint(name, a), nil
}

// CNIDeleteEndpoint is the CNI deleting a pod's endpoint (not a call).
func (f *Fake) CNIDeleteEndpoint(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.eps, id)
}

// AddRemoteSubnet is the CNI adding a RemoteSubnetRoute for a node that
// joined (flannel's handleSubnetEvents).
func (f *Fake) AddRemoteSubnet(s RemoteSubnet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.network.RemoteSubnets = append(slices.Clone(f.network.RemoteSubnets), s)
}

// LeakPortLock makes HNS refuse the next n load balancer creates on the
// port with HCN_E_PORT_ALREADY_EXISTS, as a lock left by a failed delete
// does (kubernetes #137530).
func (f *Fake) LeakPortLock(proto Protocol, port uint16, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaked[fmt.Sprintf("%s/%d", proto, port)] = n
}

// SetListRace runs fn inside the next endpoint listings, between the
// enumerate and the opens (nil: none).
func (f *Fake) SetListRace(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listRace = fn
}

// DLLCalls is how many calls into computenetwork.dll hcn would have made
// for the calls since the last ResetDLL (hnsCost, listCost).
func (f *Fake) DLLCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dll
}

// ResetDLL zeroes DLLCalls.
func (f *Fake) ResetDLL() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dll = 0
}

// Outage is, per frontend, the longest time it was without a load
// balancer between a delete and the create that replaced it.
func (f *Fake) Outage() map[string]time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.outage)
}

// RestartHNS restarts HNS as the profile's release does: load balancers
// restored under new ids, or everything crossproxy relies on lost (lost
// names the local endpoints that go too, see RestartLosingState).
func (f *Fake) RestartHNS(lost ...netip.Addr) {
	if f.profile.RehydrateAfterRestart {
		f.Restart()
		return
	}
	f.RestartLosingState(lost...)
}
