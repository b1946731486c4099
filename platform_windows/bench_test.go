package hns

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// scale builds n ClusterIP Services with two endpoints each: a local pod
// (whose HNS endpoint the CNI made) and a pod on another node.
type scale struct {
	fake    *Fake
	backend *Backend
	ports   []*core.ServicePort
}

func newScale(tb testing.TB, n int, features Features, concurrency int) *scale {
	nw := Network{Name: "vxlan0", Type: NetworkOverlay, RemoteSubnets: []RemoteSubnet{{Prefix: netip.MustParsePrefix("10.245.0.0/16"), ProviderAddress: ip("192.168.0.12")}}}
	s := &scale{fake: NewFake(nw, features)}
	for i := range n {
		l := netip.AddrFrom4([4]byte{10, 244, byte(i >> 8), byte(i)})
		r := netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)})
		s.fake.AddLocalEndpoint(fmt.Sprintf("pod-%d", i), l)
		cip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})
		s.ports = append(s.ports, port(fmt.Sprintf("svc-%d", i), cip.String(), []core.Endpoint{local(l.String(), 8080), remote(r.String(), 8080)}))
	}
	log := logrus.New()
	log.SetLevel(logrus.WarnLevel)
	cfg := Config{NetworkName: "vxlan0", SourceVIP: ip("10.244.255.2"), NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: &MemoryLedger{}, Concurrency: concurrency}
	s.fake.AddEndpoint(Endpoint{Name: "source-vip", IP: cfg.SourceVIP, MAC: hostMAC, ProviderAddress: cfg.NodeIP})
	b, err := New(s.fake, cfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	s.backend = b
	return s
}

func (s *scale) state() *core.NodeState { return state(s.ports...) }

// TestInitialProgramCallsAndConcurrency: the initial program of n Services
// on an overlay network costs the four reads plus one create per remote
// endpoint (each pod's, and each ClusterIP's as kube-proxy makes them) and
// per load balancer, with the configured number of calls in flight.
func TestInitialProgramCallsAndConcurrency(t *testing.T) {
	const n = 64
	s := newScale(t, n, AllFeatures(), 4)
	s.fake.SetLatency(2 * time.Millisecond)
	if err := s.backend.Sync(context.Background(), s.state(), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"Features": 1, "GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1, "CreateRemoteEndpoint": 2 * n, "CreateLoadBalancer": n}
	if got := s.fake.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	if m := s.fake.MaxInFlight(); m != 4 {
		t.Fatalf("max calls in flight %d, want the bound 4", m)
	}
}

// TestRemoteEndpointReplacedCalls: a remote pod replaced by another costs a
// remote endpoint create, one modify (a delete and a create without
// modify) and the delete of the old pod's remote endpoint, in the same sync
// as kube-proxy (HNS refuses a local endpoint while a remote one holds its
// address, kubernetes #130963): at most 4 calls.
func TestRemoteEndpointReplacedCalls(t *testing.T) {
	for _, c := range []struct {
		features Features
		want     int
	}{{AllFeatures(), 3}, {Features{APIV2: true, RemoteSubnet: true}, 4}} {
		s := newScale(t, 3, c.features, 0)
		if err := s.backend.Sync(context.Background(), s.state(), core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
		s.fake.ResetCalls()
		changed := s.replaceRemote(1)
		if err := s.backend.Sync(context.Background(), s.state(), changed); err != nil {
			t.Fatal(err)
		}
		if got := s.fake.TotalCalls(); got != c.want {
			t.Fatalf("modify=%v: %d calls (%v), want %d", c.features.ModifyLoadBalancer, got, s.fake.Calls(), c.want)
		}
	}
}

// replaceRemote gives Service i a new remote pod and returns the change.
func (s *scale) replaceRemote(i int) core.Changes {
	p := *s.ports[i]
	p.ClusterEndpoints = []core.Endpoint{p.ClusterEndpoints[0], remote(fmt.Sprintf("10.245.%d.%d", 200, i), 8080)}
	s.ports[i] = &p
	return core.Changes{Ports: map[core.PortKey]struct{}{p.Key: {}}}
}

// dropRemote removes Service i's remote endpoint (it went not-ready).
func (s *scale) dropRemote(i int) core.Changes {
	p := *s.ports[i]
	p.ClusterEndpoints = p.ClusterEndpoints[:1]
	s.ports[i] = &p
	return core.Changes{Ports: map[core.PortKey]struct{}{p.Key: {}}}
}

// BenchmarkInitialProgram2000 programs 2,000 Services (2 endpoints each, one
// remote) into a fake HNS that sleeps 30 ms per call. The sleeps are real and
// unscaled, so the wall time is the simulated HNS time.
func BenchmarkInitialProgram2000(b *testing.B) {
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			if conc == 1 && testing.Short() {
				b.Skip("serial run (the default, --hns-concurrency 1) takes 3 minutes")
			}
			for range b.N {
				s := newScale(b, 2000, AllFeatures(), conc)
				s.fake.SetLatency(30 * time.Millisecond)
				st := s.state()
				start := time.Now()
				if err := s.backend.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				b.ReportMetric(float64(s.fake.TotalCalls()), "hns-calls")
				b.ReportMetric(d.Seconds(), "simulated-s")
				b.ReportMetric(float64(s.fake.MaxInFlight()), "max-in-flight")
				if conc == 8 && d > 60*time.Second {
					b.Errorf("initial program took %s at 8 in flight, target 60s", d)
				}
			}
		})
	}
}

// BenchmarkEndpointChange measures one endpoint change after the initial
// program of 2,000 Services, with the fake at 30 ms per call, with and
// without HNS' in-place modify.
func BenchmarkEndpointChange(b *testing.B) {
	for _, c := range []struct {
		name     string
		features Features
		change   func(*scale, int) core.Changes
		target   int
	}{
		// Each change also deletes the remote endpoint the load balancer
		// stopped using, in the same sync (HNS refuses a pod's endpoint while
		// a remote one has its address, kubernetes #130963), as kube-proxy.
		{"removed/modify", AllFeatures(), (*scale).dropRemote, 2},
		{"removed/no-modify", Features{APIV2: true, RemoteSubnet: true}, (*scale).dropRemote, 3},
		{"replaced-remote/modify", AllFeatures(), (*scale).replaceRemote, 3},
		{"replaced-remote/no-modify", Features{APIV2: true, RemoteSubnet: true}, (*scale).replaceRemote, 4},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newScale(b, 2000, c.features, 0)
			if err := s.backend.Sync(context.Background(), s.state(), core.Changes{Full: true}); err != nil {
				b.Fatal(err)
			}
			s.fake.SetLatency(30 * time.Millisecond)
			b.ResetTimer()
			calls := 0
			for i := range b.N {
				ch := c.change(s, i%2000)
				s.fake.ResetCalls()
				if err := s.backend.Sync(context.Background(), s.state(), ch); err != nil {
					b.Fatal(err)
				}
				calls = max(calls, s.fake.TotalCalls())
			}
			b.ReportMetric(float64(calls), "hns-calls")
			if calls > c.target {
				b.Errorf("%d HNS calls for one endpoint change, target %d", calls, c.target)
			}
		})
	}
}

// TestInterruptedSyncKeepsOwnership: a sync cancelled halfway (the service
// stopping during the initial program) records every load balancer it did
// create, so none is orphaned, and the next sync completes the rest.
func TestInterruptedSyncKeepsOwnership(t *testing.T) {
	s := newScale(t, 40, AllFeatures(), 4)
	s.fake.SetLatency(5 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	s.fake.SetFail(func(method, _ string) error {
		if method == "CreateLoadBalancer" && s.fake.Calls()["CreateLoadBalancer"] >= 10 {
			cancel()
		}
		return nil
	})
	if err := s.backend.Sync(ctx, s.state(), core.Changes{Full: true}); err == nil {
		t.Fatal("a cancelled sync must report it")
	}
	ledger, _ := s.backend.cfg.Ledger.Load()
	lbs := s.fake.LoadBalancers()
	if len(lbs) == 0 || len(lbs) == 40 {
		t.Fatalf("want a partial program: %d load balancers", len(lbs))
	}
	for _, lb := range lbs {
		if _, ok := ledger.LoadBalancers[lb.ID]; !ok {
			t.Fatalf("load balancer %s (%s) created but not recorded", lb.ID, lb.frontend())
		}
		if _, ok := ledger.Pending[lb.frontend()]; ok {
			t.Fatalf("load balancer %s (%s) recorded and still pending", lb.ID, lb.frontend())
		}
	}
	s.fake.SetFail(nil)
	if err := s.backend.Sync(context.Background(), s.state(), core.Changes{}); err != nil {
		t.Fatal(err)
	}
	if n := len(s.fake.LoadBalancers()); n != 40 {
		t.Fatalf("after the retry: %d load balancers, want 40", n)
	}
	if ledger, _ := s.backend.cfg.Ledger.Load(); len(ledger.Pending) != 0 || len(ledger.LoadBalancers) != 40 {
		t.Fatalf("after the retry: ledger %+v", ledger)
	}
}

// TestHNSCallCost counts what syncs and the drift check cost a real HNS at
// 2,000 Services (overlay, one local and one remote pod each): HNS calls as
// the backend makes them, and the calls into computenetwork.dll hcn makes
// for those (Fake.DLLCalls: a listing enumerates the ids, then opens,
// queries and closes each object). The drift check lists everything; its
// cost bounds how often it runs (driftDuty). Figures: test/results/windows.md.
func TestHNSCallCost(t *testing.T) {
	const n = 2000
	s := newScale(t, n, Features{APIV2: true, RemoteSubnet: true, DSR: true}, 1)
	ctx := context.Background()
	s.fake.ResetDLL()
	if err := s.backend.Sync(ctx, s.state(), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	initial, initialDLL := s.fake.TotalCalls(), s.fake.DLLCalls()
	// Endpoints: n local pods, n remote pods, n ClusterIP remote endpoints,
	// the source VIP; load balancers: n.
	eps, lbs := 3*n+1, n
	// A listing: the network by name (an enumerate and one open), its
	// endpoints and the load balancers (an enumerate and one open each).
	listing := func(eps, lbs int) int { return 1 + listCost + 1 + listCost*eps + 1 + listCost*lbs }
	list := listing(eps, lbs)
	// The initial full sync: the version, a listing of the n pods and the
	// source VIP, then the remote endpoints and load balancers it creates.
	wantInitial := hnsCost["Features"] + listing(n+1, 0) + 2*n*hnsCost["CreateRemoteEndpoint"] + n*hnsCost["CreateLoadBalancer"]
	s.fake.ResetCalls()
	s.fake.ResetDLL()
	if err := s.backend.Sync(ctx, s.state(), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	steady, steadyDLL := s.fake.TotalCalls(), s.fake.DLLCalls()
	s.fake.ResetCalls()
	s.fake.ResetDLL()
	if d, err := s.backend.CheckDrift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("drift check: %v %v", d, err)
	}
	drift, driftDLL := s.fake.TotalCalls(), s.fake.DLLCalls()
	s.fake.ResetCalls()
	s.fake.ResetDLL()
	ch := s.replaceRemote(7)
	if err := s.backend.Sync(ctx, s.state(), ch); err != nil {
		t.Fatal(err)
	}
	change, changeDLL := s.fake.TotalCalls(), s.fake.DLLCalls()
	t.Logf("2,000 Services: initial full sync %d HNS calls (%d dll calls), steady full sync %d (%d), drift check %d (%d), a remote pod replaced %d (%d)",
		initial, initialDLL, steady, steadyDLL, drift, driftDLL, change, changeDLL)
	if initialDLL != wantInitial || steady != 3 || steadyDLL != list || drift != 3 || driftDLL != list || change != 4 {
		t.Fatalf("want initial %d dll calls, steady and drift 3 HNS calls and %d dll calls, a change 4 HNS calls", wantInitial, list)
	}
}

// TestDriftCheckBoundedByItsCost: a drift check whose listing took d makes
// the next wait (driftDuty-1) x d, so listing takes at most a tenth of
// HNS' time however many objects there are; a cheap one waits for nothing.
func TestDriftCheckBoundedByItsCost(t *testing.T) {
	s := newScale(t, 3, AllFeatures(), 1)
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	s.backend.now = func() time.Time { return now }
	if err := s.backend.Sync(ctx, s.state(), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	check := func() int {
		s.fake.ResetCalls()
		if _, err := s.backend.CheckDrift(ctx); err != nil {
			t.Fatal(err)
		}
		return s.fake.TotalCalls()
	}
	for i := range 2 {
		if c := check(); c != 3 {
			t.Fatalf("cheap check %d made %d calls: cheap checks run every time", i+1, c)
		}
	}
	s.fake.SetLatency(50 * time.Millisecond) // three listing calls: 150 ms
	if c := check(); c != 3 {
		t.Fatalf("costly check made %d calls", c)
	}
	now = now.Add(time.Second)
	if c := check(); c != 0 {
		t.Fatalf("a check 1 s after one of 150 ms listed again (%d calls); want a wait of 9 x 150 ms", c)
	}
	now = now.Add(30 * time.Second)
	if c := check(); c != 3 {
		t.Fatalf("a check 31 s after one of 150 ms did not list (%d calls)", c)
	}
}
