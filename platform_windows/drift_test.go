package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// repairLog records what drift repair reports to the metric.
type repairLog struct {
	mu  sync.Mutex
	got map[string]int
}

func (r *repairLog) Repaired(object string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string]int{}
	}
	r.got[object] += n
}

// clock is the backend's time (the Calico wait), moved by the test.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// driftRig is a rig whose backend counts repairs and runs on a test clock.
func driftRig(t *testing.T, locals ...string) (*rig, *repairLog, *clock) {
	t.Helper()
	r := newRig(t, AllFeatures(), locals...)
	rep := &repairLog{}
	c := &clock{t: time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)}
	r.backend.cfg.Repairs = rep
	r.backend.now = c.now
	return r, rep, c
}

// services is n ClusterIP Services, each with a pod here and one on lin-1.
func services(n int) *core.NodeState {
	var ports []*core.ServicePort
	for i := range n {
		ports = append(ports, port(fmt.Sprintf("web-%02d", i), fmt.Sprintf("10.96.1.%d", i+1),
			[]core.Endpoint{local("10.244.1.5", 8080), remote(fmt.Sprintf("10.244.2.%d", i+1), 8080)}))
	}
	return state(ports...)
}

// checkAndSync is what the runner does when a drift check is due: the
// check, then a sync that is full when it found drift.
func (r *rig) checkAndSync(t *testing.T, s *core.NodeState) []string {
	t.Helper()
	drift, err := r.backend.CheckDrift(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := partial()
	if len(drift) > 0 {
		c = full()
	}
	r.sync(t, s, c)
	return drift
}

// TestDriftCheckCalls: a drift check costs 3 calls (network, endpoints, load
// balancers) whatever the number of Services, and partial syncs make none:
// the runner calls the check once per SyncPeriod, not per sync.
func TestDriftCheckCalls(t *testing.T) {
	r, rep, _ := driftRig(t, "10.244.1.5")
	s := services(3)
	r.sync(t, s, full())
	r.fake.ResetCalls()
	r.sync(t, s, partial())
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("a partial sync made %d calls (%v), want none", n, r.fake.Calls())
	}
	if drift := r.checkAndSync(t, s); drift != nil {
		t.Fatalf("drift found where there is none: %q", drift)
	}
	if got, want := r.fake.Calls(), map[string]int{"GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("drift check without drift: calls %v, want %v", got, want)
	}
	if len(rep.got) != 0 {
		t.Fatalf("repairs counted without drift: %v", rep.got)
	}
}

// TestDriftRepairedWithinSyncPeriod: a load balancer deleted and another
// changed behind crossproxy's back are found by the check and put back by
// the sync after it, which reads nothing more; a foreign load balancer is no
// drift and stays as it is; the metric counts the two.
func TestDriftRepairedWithinSyncPeriod(t *testing.T) {
	r, rep, _ := driftRig(t, "10.244.1.5")
	r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.9.9")}, ExternalPort: 80, InternalPort: 80})
	s := services(3)
	r.sync(t, s, full())
	want := stateDump(r.fake)
	lbs := r.fake.LoadBalancers()
	sort.Slice(lbs, func(i, j int) bool { return lbs[i].frontend() < lbs[j].frontend() })
	var mine []LoadBalancer
	for _, lb := range lbs {
		if _, ok := r.backend.owned[lb.ID]; ok {
			mine = append(mine, lb)
		}
	}
	r.fake.DeleteBehind(mine[0].ID)
	r.fake.ChangeBehind(mine[1].ID, func(lb *LoadBalancer) { lb.InternalPort = 9999; lb.EndpointIDs = lb.EndpointIDs[:1] })
	r.fake.ResetCalls()
	drift := r.checkAndSync(t, s)
	if len(drift) != 2 || !strings.Contains(strings.Join(drift, "; "), "missing") || !strings.Contains(strings.Join(drift, "; "), "changed") {
		t.Fatalf("drift %q, want one load balancer missing and one changed", drift)
	}
	if got := stateDump(r.fake); got != want {
		t.Fatalf("after the repair:\n%s\nwant:\n%s", got, want)
	}
	wantCalls := map[string]int{"ListLoadBalancers": 1, "GetNetwork": 1, "ListEndpoints": 1, "CreateLoadBalancer": 1, "UpdateLoadBalancer": 1}
	if got := r.fake.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("check and repair calls %v, want %v", got, wantCalls)
	}
	t.Logf("two load balancers drifted: check and repair %d calls %v", r.fake.TotalCalls(), r.fake.Calls())
	if rep.got["load balancer"] != 2 {
		t.Fatalf("repairs counted %v, want 2 load balancers", rep.got)
	}
	// The next check finds nothing more to do.
	r.fake.ResetCalls()
	if drift := r.checkAndSync(t, s); drift != nil || r.fake.TotalCalls() != 3 {
		t.Fatalf("after the repair the check found %q with %v", drift, r.fake.Calls())
	}
}

// TestHNSRestartRepairedInOneSync: an HNS restart that loses every load
// balancer, every remote endpoint and the source-VIP endpoint is found by
// one check and repaired by the one sync after it. The call counts are in
// test/results/windows.md.
func TestHNSRestartRepairedInOneSync(t *testing.T) {
	const n = 20
	r, rep, _ := driftRig(t, "10.244.1.5")
	s := services(n)
	r.sync(t, s, full())
	want := stateDump(r.fake)
	r.fake.RestartLosingState(r.backend.sourceVIP)
	r.fake.ResetCalls()
	drift := r.checkAndSync(t, s)
	if !strings.Contains(strings.Join(drift, "; "), "source-VIP endpoint 10.244.1.2 missing") {
		t.Fatalf("drift %q does not name the lost source-VIP endpoint", drift)
	}
	// Everything as before, and the source-VIP endpoint back as crossproxy's own.
	got := stateDump(r.fake)
	if own := "endpoint 10.244.1.2 remote=false pa=invalid IP mac=" + hostMAC + "\n"; !strings.Contains(got, own) || strings.Replace(got, own, "", 1) != want {
		t.Fatalf("after the repair:\n%s\nwant:\n%s%s", got, own, want)
	}
	// 3 reads (the check's, used by the repair); the source-VIP endpoint;
	// per Service one remote endpoint for the pod on lin-1, one for the
	// ClusterIP (overlay) and one load balancer.
	wantCalls := map[string]int{"ListLoadBalancers": 1, "GetNetwork": 1, "ListEndpoints": 1, "CreateLocalEndpoint": 1, "CreateRemoteEndpoint": 2 * n, "CreateLoadBalancer": n}
	if got := r.fake.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("check and repair calls %v, want %v", got, wantCalls)
	}
	t.Logf("HNS restart, %d Services: check and repair %d calls %v", n, r.fake.TotalCalls(), r.fake.Calls())
	if rep.got["load balancer"] != n || rep.got["remote endpoint"] != 2*n || rep.got["source-VIP endpoint"] != 1 {
		t.Fatalf("repairs counted %v, want %d load balancers, %d remote endpoints, 1 source-VIP endpoint", rep.got, n, 2*n)
	}
}

// TestNetworkRecreatedReprogrammed: flannel recreating its network under a
// new id (its endpoints and load balancers gone with it, the pods' endpoints
// made again by the CNI) is named by the check and leads to a full
// re-program on the new network.
func TestNetworkRecreatedReprogrammed(t *testing.T) {
	const n = 3
	r, rep, _ := driftRig(t, "10.244.1.5")
	s := services(n)
	r.sync(t, s, full())
	lbsBefore := lbLines(stateDump(r.fake))
	r.fake.RecreateNetwork("00000000-0000-4000-8000-0000000NEW01")
	r.fake.AddLocalEndpoint("pod-10.244.1.5", ip("10.244.1.5"))
	r.fake.ResetCalls()
	drift := r.checkAndSync(t, s)
	if len(drift) == 0 || !strings.Contains(drift[0], `HNS network "vxlan0" recreated (id 00000000-0000-4000-8000-0000000NEW01`) {
		t.Fatalf("drift %q, want the network recreated", drift)
	}
	if got := lbLines(stateDump(r.fake)); got != lbsBefore {
		t.Fatalf("load balancers on the new network:\n%s\nwant:\n%s", got, lbsBefore)
	}
	for _, ep := range r.fake.Endpoints() {
		if ep.Name == sourceVIPEndpointName && ep.IP == ip("10.244.1.2") {
			if rep.got["network"] != 1 || rep.got["remote endpoint"] != 2*n {
				t.Fatalf("repairs counted %v, want the network and %d remote endpoints", rep.got, 2*n)
			}
			t.Logf("network recreated, %d Services: check and repair %d calls %v", n, r.fake.TotalCalls(), r.fake.Calls())
			return
		}
	}
	t.Fatalf("no source-VIP endpoint on the new network: %v", r.fake.Endpoints())
}

// lbLines keeps the load balancer lines of a stateDump.
func lbLines(dump string) string {
	var out []string
	for _, l := range strings.Split(dump, "\n") {
		if l != "" && !strings.HasPrefix(l, "endpoint ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestHostEndpointDrift: with forwardHealthCheckVip, the host endpoint
// (cbr0) made after crossproxy's first sync is drift the check names, and
// the repair creates the health-check load balancer leading to it.
func TestHostEndpointDrift(t *testing.T) {
	f := NewFake(l2bridge, AllFeatures())
	f.AddLocalEndpoint("pod", ip("10.244.1.10"))
	log := logrus.New()
	log.SetOutput(testWriter{t})
	b, err := New(f, Config{NetworkName: "cbr0", Ledger: &MemoryLedger{}, ForwardHealthCheckVIP: true, HealthzPort: 10256}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := state(lbPort("web-lb", "10.96.0.13", 0, []core.Endpoint{local("10.244.1.10", 8080)}, "172.16.0.10"))
	if err := b.Sync(ctx, s, full()); err != nil {
		t.Fatal(err)
	}
	if n := len(f.LoadBalancers()); n != 2 {
		t.Fatalf("%d load balancers without the host endpoint, want 2 (no health-check one)", n)
	}
	rootID := f.AddLocalEndpoint("cbr0", ip("10.244.1.3"))
	f.ResetCalls()
	drift, err := b.CheckDrift(ctx)
	if err != nil || len(drift) != 1 || drift[0] != `host endpoint "cbr0" appeared` {
		t.Fatalf("drift %q %v, want the host endpoint appeared", drift, err)
	}
	if err := b.Sync(ctx, s, full()); err != nil {
		t.Fatal(err)
	}
	wantCalls := map[string]int{"GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1, "CreateLoadBalancer": 1}
	if got := f.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("check and repair calls %v, want %v", got, wantCalls)
	}
	for _, lb := range f.LoadBalancers() {
		if lb.ExternalPort == 10256 && len(lb.EndpointIDs) == 1 && strings.EqualFold(lb.EndpointIDs[0], rootID) {
			return
		}
	}
	t.Fatalf("no health-check load balancer to the host endpoint after the repair: %v", f.LoadBalancers())
}

// TestDriftCheckFailure: a check that cannot list fails naming the check
// and changes nothing (the runner then makes the sync full, which retries).
func TestDriftCheckFailure(t *testing.T) {
	r, _, _ := driftRig(t, "10.244.1.5")
	s := services(2)
	r.sync(t, s, full())
	before := stateDump(r.fake)
	r.fake.SetFail(func(method, _ string) error {
		if method == "ListLoadBalancers" {
			return errors.New("hcnEnumerateLoadBalancers: RPC server unavailable")
		}
		return nil
	})
	_, err := r.backend.CheckDrift(context.Background())
	if err == nil || !strings.Contains(err.Error(), "check for drift") {
		t.Fatalf("want the check failed naming itself, got %v", err)
	}
	if got := stateDump(r.fake); got != before {
		t.Fatalf("a failed check changed HNS:\n%s\nwant:\n%s", got, before)
	}
}

// stateDump prints every load balancer with its endpoints' addresses (remote
// ones marked "*") and every endpoint crossproxy made, without ids: the
// state before and after a repair compares equal when HNS holds the same.
func stateDump(f *Fake) string {
	eps, lbs := f.State()
	addr := map[string]string{}
	var sb strings.Builder
	for _, ep := range eps {
		addr[strings.ToLower(ep.ID)] = ep.IP.String()
		if ep.Remote {
			addr[strings.ToLower(ep.ID)] += "*"
		}
		if ours(ep) {
			fmt.Fprintf(&sb, "endpoint %s remote=%v pa=%s mac=%s\n", ep.IP, ep.Remote, ep.ProviderAddress, ep.MAC)
		}
	}
	for _, lb := range lbs {
		var ips []string
		for _, id := range lb.EndpointIDs {
			ips = append(ips, addr[strings.ToLower(id)])
		}
		sort.Strings(ips)
		fmt.Fprintf(&sb, "%s -> :%d [%s] %s sourceVIP=%s\n", lb.frontend(), lb.InternalPort, strings.Join(ips, " "), lb.Flags, lb.SourceVIP)
	}
	return sb.String()
}

// TestOtherProxiesAreForeignLoadBalancers: load balancers crossproxy did not
// create (kube-proxy's winkernel left running, say) are reported, named by
// frontend, from the listings the syncs make anyway; crossproxy's own never
// are; once the foreign one is gone, the next drift check clears it.
func TestOtherProxiesAreForeignLoadBalancers(t *testing.T) {
	r, _, _ := driftRig(t, "10.244.1.5")
	ctx := context.Background()
	s := services(2)
	r.sync(t, s, full())
	if o, err := r.backend.OtherProxies(ctx); err != nil || o != nil {
		t.Fatalf("only crossproxy's load balancers: %v %v", o, err)
	}
	id := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.9.9")}, ExternalPort: 443, InternalPort: 443})
	r.checkAndSync(t, s)
	o, err := r.backend.OtherProxies(ctx)
	if err != nil || len(o) != 1 || o[0].Name != otherHNSProxy || !strings.Contains(o[0].String(), "1 HNS load balancers crossproxy did not create: TCP/10.96.9.9/443") {
		t.Fatalf("a foreign load balancer: %v %v", o, err)
	}
	if err := r.fake.DeleteLoadBalancer(ctx, id); err != nil {
		t.Fatal(err)
	}
	r.checkAndSync(t, s)
	if o, err := r.backend.OtherProxies(ctx); err != nil || o != nil {
		t.Fatalf("after the foreign load balancer went: %v %v", o, err)
	}
}
