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

// clock is the backend's time, moved by the test.
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

// TestDriftCheckedOncePerSyncPeriod: partial syncs list the load balancers
// at most once per DriftCheckPeriod (a burst of changes costs no extra
// call); the periodic sync with nothing changed costs one listing.
func TestDriftCheckedOncePerSyncPeriod(t *testing.T) {
	r, rep, c := driftRig(t, "10.244.1.5")
	s := services(3)
	r.sync(t, s, full())
	r.fake.ResetCalls()
	c.t = c.t.Add(5 * time.Second)
	r.sync(t, s, partial())
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("a partial sync 5 s after the full one made %d calls (%v), want none", n, r.fake.Calls())
	}
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	if got, want := r.fake.Calls(), map[string]int{"ListLoadBalancers": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("periodic sync without drift: calls %v, want %v", got, want)
	}
	if len(rep.got) != 0 {
		t.Fatalf("repairs counted without drift: %v", rep.got)
	}
}

// TestDriftRepairedWithinSyncPeriod: a load balancer deleted and another
// changed behind crossproxy's back are found by the periodic sync's one
// listing and put back in that sync; a foreign load balancer is no drift and
// stays as it is; the metric counts the two.
func TestDriftRepairedWithinSyncPeriod(t *testing.T) {
	r, rep, c := driftRig(t, "10.244.1.5")
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
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	if got := stateDump(r.fake); got != want {
		t.Fatalf("after the repair:\n%s\nwant:\n%s", got, want)
	}
	wantCalls := map[string]int{"ListLoadBalancers": 1, "GetNetwork": 1, "ListEndpoints": 1, "CreateLoadBalancer": 1, "UpdateLoadBalancer": 1}
	if got := r.fake.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("repair calls %v, want %v", got, wantCalls)
	}
	if rep.got["load balancer"] != 2 {
		t.Fatalf("repairs counted %v, want 2 load balancers", rep.got)
	}
	// The next periodic sync finds nothing more to do.
	r.fake.ResetCalls()
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	if n := r.fake.TotalCalls(); n != 1 {
		t.Fatalf("after the repair the periodic sync made %v", r.fake.Calls())
	}
}

// TestHNSRestartRepairedInOneSync: an HNS restart that loses every load
// balancer and remote endpoint is repaired by the next periodic sync alone:
// one listing finds it, the sync re-reads the network and endpoints and
// creates everything again. The call counts are in test/results/windows.md.
func TestHNSRestartRepairedInOneSync(t *testing.T) {
	const n = 20
	r, rep, c := driftRig(t, "10.244.1.5")
	s := services(n)
	r.sync(t, s, full())
	want := stateDump(r.fake)
	r.fake.RestartLosingState()
	r.fake.ResetCalls()
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	if got := stateDump(r.fake); got != want {
		t.Fatalf("after the repair:\n%s\nwant:\n%s", got, want)
	}
	// 3 reads; per Service one remote endpoint for the pod on lin-1, one for
	// the ClusterIP (overlay) and one load balancer.
	wantCalls := map[string]int{"ListLoadBalancers": 1, "GetNetwork": 1, "ListEndpoints": 1, "CreateRemoteEndpoint": 2 * n, "CreateLoadBalancer": n}
	if got := r.fake.Calls(); !reflect.DeepEqual(got, wantCalls) {
		t.Fatalf("repair calls %v, want %v", got, wantCalls)
	}
	t.Logf("HNS restart, %d Services: %d calls %v", n, r.fake.TotalCalls(), r.fake.Calls())
	if rep.got["load balancer"] != n || rep.got["remote endpoint"] != 2*n {
		t.Fatalf("repairs counted %v, want %d load balancers and %d remote endpoints", rep.got, n, 2*n)
	}
}

// TestDriftCheckFailure: a listing that fails fails the sync (the runner
// backs off and forces a full sync) and deletes nothing.
func TestDriftCheckFailure(t *testing.T) {
	r, _, c := driftRig(t, "10.244.1.5")
	s := services(2)
	r.sync(t, s, full())
	before := stateDump(r.fake)
	r.fake.SetFail(func(method, _ string) error {
		if method == "ListLoadBalancers" {
			return errors.New("hcnEnumerateLoadBalancers: RPC server unavailable")
		}
		return nil
	})
	c.t = c.t.Add(defaultDriftCheckPeriod)
	err := r.backend.Sync(context.Background(), s, partial())
	if err == nil || !strings.Contains(err.Error(), "check load balancers for drift") {
		t.Fatalf("want the sync failed naming the drift check, got %v", err)
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
	r, _, c := driftRig(t, "10.244.1.5")
	ctx := context.Background()
	s := services(2)
	r.sync(t, s, full())
	if o, err := r.backend.OtherProxies(ctx); err != nil || o != nil {
		t.Fatalf("only crossproxy's load balancers: %v %v", o, err)
	}
	id := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.9.9")}, ExternalPort: 443, InternalPort: 443})
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	o, err := r.backend.OtherProxies(ctx)
	if err != nil || len(o) != 1 || o[0].Name != otherHNSProxy || !strings.Contains(o[0].String(), "1 HNS load balancers crossproxy did not create: TCP/10.96.9.9/443") {
		t.Fatalf("a foreign load balancer: %v %v", o, err)
	}
	if err := r.fake.DeleteLoadBalancer(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(defaultDriftCheckPeriod)
	r.sync(t, s, partial())
	if o, err := r.backend.OtherProxies(ctx); err != nil || o != nil {
		t.Fatalf("after the foreign load balancer went: %v %v", o, err)
	}
}
