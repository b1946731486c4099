package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logrustest "github.com/sirupsen/logrus/hooks/test"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/crossproxy/crossproxy/core"
)

// fakeSource is a StateSource whose next Snapshot reports Full when forced.
type fakeSource struct {
	mu    sync.Mutex
	full  bool
	snaps int
	stale []core.StaleEndpoint
	act   []core.ActivatedPort
}

func (s *fakeSource) Snapshot() (*core.NodeState, core.Changes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snaps++
	ch := core.Changes{Full: s.full || s.snaps == 1, StaleUDP: s.stale, ActivatedUDP: s.act}
	s.full, s.stale, s.act = false, nil, nil
	return &core.NodeState{}, ch
}

func (s *fakeSource) ForceFull() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = true
}

// fakeBackend records syncs, at the time of clock (the real one when nil),
// and fails the ones it is told to.
type fakeBackend struct {
	mu      sync.Mutex
	syncs   []core.Changes
	times   []time.Time
	failN   int // fail this many syncs from now on
	cleaned bool
	synced  chan struct{}
	clock   clock.PassiveClock
}

func (b *fakeBackend) Name() string { return "fake" }

func (b *fakeBackend) Sync(_ context.Context, _ *core.NodeState, ch core.Changes) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.syncs = append(b.syncs, ch)
	now := time.Now()
	if b.clock != nil {
		now = b.clock.Now()
	}
	b.times = append(b.times, now)
	defer func() {
		select {
		case b.synced <- struct{}{}:
		default:
		}
	}()
	if b.failN > 0 {
		b.failN--
		return errors.New("injected failure")
	}
	return nil
}

func (b *fakeBackend) Cleanup(context.Context) error { b.cleaned = true; return nil }

func (b *fakeBackend) Close() error { return nil }

func (b *fakeBackend) Programmed(context.Context, types.NamespacedName) (*ProgrammedService, error) {
	return nil, ErrUnsupported
}

func (b *fakeBackend) snapshot() ([]core.Changes, []time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]core.Changes(nil), b.syncs...), append([]time.Time(nil), b.times...)
}

func quietLog() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// startRunner runs a Runner on a fake clock, which the backend reads too:
// the tests step time, so no timing depends on how busy the machine is.
func startRunner(t *testing.T, cfg RunnerConfig, b *fakeBackend) (*Runner, *fakeSource, *clocktesting.FakeClock) {
	t.Helper()
	src := &fakeSource{}
	b.synced = make(chan struct{}, 100)
	fc := clocktesting.NewFakeClock(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC))
	b.clock = fc
	r := NewRunner(cfg, src, b, quietLog())
	r.clock = fc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, src, fc
}

// advance steps fc a millisecond at a time, each step only while the runner
// waits on its timer (so a step never lands between its reading the time
// and setting the timer), until until() holds or d has passed.
func advance(t *testing.T, fc *clocktesting.FakeClock, d time.Duration, until func() bool) {
	t.Helper()
	advanceBy(t, fc, time.Millisecond, d, until)
}

// advanceBy is advance with steps of step: larger steps cover minutes of
// fake time within the real-time deadline, events landing up to a step late.
func advanceBy(t *testing.T, fc *clocktesting.FakeClock, step, d time.Duration, until func() bool) {
	t.Helper()
	end := fc.Now().Add(d)
	deadline := time.Now().Add(20 * time.Second)
	for !until() && fc.Now().Before(end) {
		if time.Now().After(deadline) {
			t.Fatalf("the runner stopped waiting on its timer at %v", fc.Now())
		}
		if fc.HasWaiters() {
			fc.Step(min(step, end.Sub(fc.Now())))
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// syncsDone returns a condition: the backend has seen n syncs.
func syncsDone(b *fakeBackend, n int) func() bool {
	return func() bool { s, _ := b.snapshot(); return len(s) >= n }
}

func waitSyncs(t *testing.T, b *fakeBackend, n int, within time.Duration) []core.Changes {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if s, _ := b.snapshot(); len(s) >= n {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
	s, _ := b.snapshot()
	t.Fatalf("want %d syncs within %v, got %d", n, within, len(s))
	return nil
}

func TestRunnerWaitsForFirstTrigger(t *testing.T) {
	b := &fakeBackend{}
	r, _, fc := startRunner(t, RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: time.Hour}, b)
	advance(t, fc, 100*time.Millisecond, syncsDone(b, 1))
	if s, _ := b.snapshot(); len(s) != 0 {
		t.Fatalf("synced %d times before the first trigger; a start must not write a partial view", len(s))
	}
	r.Trigger()
	advance(t, fc, time.Second, syncsDone(b, 1))
	if s, _ := b.snapshot(); len(s) != 1 || !s[0].Full {
		t.Fatalf("first sync must be full: %+v", s)
	}
}

func TestRunnerCoalescesTriggers(t *testing.T) {
	b := &fakeBackend{}
	r, _, fc := startRunner(t, RunnerConfig{MinSyncPeriod: 300 * time.Millisecond, SyncPeriod: time.Hour}, b)
	r.Trigger()
	advance(t, fc, time.Second, syncsDone(b, 1))
	// 50 triggers within one min sync period make one sync, at its end.
	for i := 0; i < 50; i++ {
		r.Trigger()
		advance(t, fc, 2*time.Millisecond, func() bool { return false })
	}
	advance(t, fc, time.Second, syncsDone(b, 3))
	s, times := b.snapshot()
	if len(s) != 2 {
		t.Fatalf("50 triggers within one min sync period gave %d syncs after the first, want 1", len(s)-1)
	}
	if gap := times[1].Sub(times[0]); gap != 300*time.Millisecond {
		t.Fatalf("second sync %v after the first, want the min sync period (300ms)", gap)
	}
	if s[1].Full {
		t.Fatalf("a coalesced change sync should be partial")
	}
}

func TestRunnerRetriesFailureWithFullSync(t *testing.T) {
	b := &fakeBackend{failN: 2}
	stale := []core.StaleEndpoint{{Endpoint: netip.MustParseAddrPort("10.0.0.1:53")}}
	act := []core.ActivatedPort{{Endpoints: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}}
	r, src, fc := startRunner(t, RunnerConfig{MinSyncPeriod: 20 * time.Millisecond, SyncPeriod: time.Hour}, b)
	src.stale, src.act = stale, act
	var results []SyncResult
	var mu sync.Mutex
	r.OnSync(func(res SyncResult) { mu.Lock(); results = append(results, res); mu.Unlock() })
	r.Trigger()
	advance(t, fc, time.Second, syncsDone(b, 1))
	advance(t, fc, time.Second, syncsDone(b, 3))
	s, times := b.snapshot()
	if len(s) < 3 {
		t.Fatalf("%d syncs, want a failure, a failed retry and a good one", len(s))
	}
	for i, ch := range s[:3] {
		if !ch.Full {
			t.Errorf("sync %d after a failure must be full", i+1)
		}
		if len(ch.StaleUDP) != 1 {
			t.Errorf("sync %d: stale UDP endpoints of the failed sync must be carried over, got %v", i+1, ch.StaleUDP)
		}
		if len(ch.ActivatedUDP) != 1 {
			t.Errorf("sync %d: UDP ports activated in the failed sync must be carried over, got %v", i+1, ch.ActivatedUDP)
		}
	}
	// Backoff doubles from the min sync period: 20 ms, then 40 ms.
	if gap1, gap2 := times[1].Sub(times[0]), times[2].Sub(times[1]); gap1 != 20*time.Millisecond || gap2 != 40*time.Millisecond {
		t.Errorf("retry delays should double from the min sync period: %v then %v, want 20ms then 40ms", gap1, gap2)
	}
	// Observers run after the backend's Sync returns, so the third result may
	// reach them a moment after the backend recorded the third sync.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(results)
		mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(results) < 3 || results[0].Err == nil || results[2].Err != nil || results[2].ID != 3 {
		t.Fatalf("observers saw %+v", results)
	}
}

func TestRunnerPeriodicFullSync(t *testing.T) {
	b := &fakeBackend{}
	r, _, fc := startRunner(t, RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: time.Hour, FullSyncPeriod: 150 * time.Millisecond}, b)
	r.Trigger()
	advance(t, fc, time.Second, syncsDone(b, 1))
	advance(t, fc, time.Second, syncsDone(b, 3))
	s, times := b.snapshot()
	for i, ch := range s {
		if !ch.Full {
			t.Errorf("sync %d: periodic full syncs must be full", i+1)
		}
	}
	if len(times) < 3 || times[1].Sub(times[0]) != 150*time.Millisecond || times[2].Sub(times[1]) != 150*time.Millisecond {
		t.Errorf("full syncs at %v, want every 150ms", times)
	}
}

func TestRunnerPeriodicPartialSync(t *testing.T) {
	b := &fakeBackend{}
	r, _, fc := startRunner(t, RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 100 * time.Millisecond, FullSyncPeriod: time.Hour}, b)
	r.Trigger()
	advance(t, fc, time.Second, syncsDone(b, 1))
	advance(t, fc, time.Second, syncsDone(b, 3))
	s, times := b.snapshot()
	if !s[0].Full {
		t.Errorf("first sync must be full")
	}
	for i, ch := range s[1:] {
		if ch.Full {
			t.Errorf("sync %d: a sync every SyncPeriod without changes must stay partial until FullSyncPeriod", i+2)
		}
	}
	if len(times) < 3 || times[2].Sub(times[1]) != 100*time.Millisecond {
		t.Errorf("syncs at %v, want every 100ms", times)
	}
}

func TestRunnerStopLeavesRules(t *testing.T) {
	b := &fakeBackend{}
	src := &fakeSource{}
	r := NewRunner(RunnerConfig{}, src, b, quietLog())
	// No MinSyncPeriod by default: syncs are paced by their cost (issue 51).
	if got := r.Config(); got.MinSyncPeriod != 0 || got.SyncPeriod != 30*time.Second || got.FullSyncPeriod != time.Hour {
		t.Fatalf("defaults: %+v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan time.Time, 1)
	r.OnQueued(func(at time.Time) { queued <- at })
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()
	r.Trigger()
	select {
	case <-queued:
	case <-time.After(2 * time.Second):
		t.Fatal("OnQueued not called for the first change")
	}
	waitSyncs(t, b, 1, 3*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on shutdown", err)
	}
	if b.cleaned {
		t.Fatal("shutdown must leave the rules in place")
	}
}

func testService(name, ip string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: v1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP}}},
	}
}

func testSlice(svc string, addrs ...string) *discovery.EndpointSlice {
	name, port, proto := "http", int32(8080), v1.ProtocolTCP
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-1", Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a}})
	}
	return s
}

// TestRunnerKeptStatesStayIntact: an observer may keep every SyncResult.State
// past its callback; later syncs never change a kept state.
func TestRunnerKeptStatesStayIntact(t *testing.T) {
	tr, err := core.NewTracker(core.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	tr.UpsertService(testService("a", "10.96.0.1"))
	tr.UpsertService(testService("b", "10.96.0.2"))
	r := NewRunner(RunnerConfig{}, tr, &fakeBackend{}, quietLog())
	var kept []*core.NodeState
	var seen [][]string
	r.OnSync(func(res SyncResult) {
		kept, seen = append(kept, res.State), append(seen, endpointsOf(res.State))
	})
	for _, addr := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"} {
		tr.UpsertSlice(testSlice("a", addr))
		r.syncOnce(context.Background(), core.Changes{})
		r.syncOnce(context.Background(), core.Changes{}) // nothing changed: the same map, shared
	}
	tr.DeleteService(testService("a", ""))
	r.syncOnce(context.Background(), core.Changes{})
	for i, st := range kept {
		if got := endpointsOf(st); !slices.Equal(got, seen[i]) {
			t.Errorf("state of sync %d changed after later syncs: %v, want %v", i+1, got, seen[i])
		}
	}
	if last := kept[len(kept)-1]; len(last.Ports) != 1 {
		t.Fatalf("the last state has %d ports, want 1 (b)", len(last.Ports))
	}
}

func endpointsOf(st *core.NodeState) []string {
	var out []string
	for _, p := range st.SortedPorts() {
		for _, e := range p.ClusterEndpoints {
			out = append(out, p.Key.String()+" "+e.AddrPort().String())
		}
	}
	return out
}

// With RunnerConfig.ReleaseMemory, a full sync returns garbage to the OS
// before and after it (it is the proxy's memory peak, issue 12); a partial
// sync, on the hot path, does not. Without it nothing is released.
func TestRunnerReleasesMemoryAroundFullSyncsOnly(t *testing.T) {
	src := &fakeSource{}
	b := &fakeBackend{}
	var released []int
	r := NewRunner(RunnerConfig{ReleaseMemory: func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		released = append(released, len(b.syncs))
	}}, src, b, quietLog())
	ctx := context.Background()
	r.syncOnce(ctx, core.Changes{}) // the first snapshot is full
	r.syncOnce(ctx, core.Changes{})
	r.syncOnce(ctx, core.Changes{})
	src.ForceFull()
	r.syncOnce(ctx, core.Changes{})
	// Before sync 1 (none done yet), after it (one), before sync 4 (three)
	// and after it (four).
	if want := []int{0, 1, 3, 4}; !slices.Equal(released, want) {
		t.Fatalf("released with %v syncs done, want %v", released, want)
	}
	// The default runs nothing (and does not crash).
	NewRunner(RunnerConfig{}, &fakeSource{}, &fakeBackend{}, quietLog()).syncOnce(ctx, core.Changes{})
}

// unfitBackend fails every sync as a node that can never run the data plane.
type unfitBackend struct{ fakeBackend }

func (b *unfitBackend) Sync(ctx context.Context, st *core.NodeState, ch core.Changes) error {
	_ = b.fakeBackend.Sync(ctx, st, ch)
	return fmt.Errorf("kernel probe: %w", ErrNodeUnfit)
}

// TestRunnerStopsWhenTheNodeIsUnfit: retrying cannot help a node whose kernel
// lacks what the backend needs; Run returns the error after one sync.
func TestRunnerStopsWhenTheNodeIsUnfit(t *testing.T) {
	b := &unfitBackend{}
	b.synced = make(chan struct{}, 100)
	r := NewRunner(RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: time.Hour}, &fakeSource{}, b, quietLog())
	r.release = func() {}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.Trigger()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNodeUnfit) {
			t.Fatalf("Run returned %v, want ErrNodeUnfit", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run kept going after a sync failed with ErrNodeUnfit")
	}
	if s, _ := b.snapshot(); len(s) != 1 {
		t.Fatalf("%d syncs, want 1 (no retry)", len(s))
	}
}

// driftBackend is a fakeBackend whose rules others change: drifted is what
// its next CheckDrift reports, and watch receives what its watcher hears.
type driftBackend struct {
	fakeBackend
	drifted []string
	checks  int
	watch   chan string
}

func (b *driftBackend) CheckDrift(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checks++
	d := b.drifted
	b.drifted = nil
	return d, nil
}

func (b *driftBackend) WatchDrift(ctx context.Context, changed func(string)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case what := <-b.watch:
			changed(what)
		}
	}
}

// TestRunnerRepairsDriftWithAFullSync: a change others made to the rules,
// heard by the watcher or found by the check before a sync, makes the next
// sync full (not a partial sync that sends nothing and reports success), and
// the sync names what was changed. Between such reports syncs stay partial.
func TestRunnerRepairsDriftWithAFullSync(t *testing.T) {
	b := &driftBackend{watch: make(chan string)}
	b.synced = make(chan struct{}, 100)
	src := &fakeSource{}
	r := NewRunner(RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, src, b, quietLog())
	r.release = func() {}
	results := make(chan SyncResult, 100)
	r.OnSync(func(res SyncResult) { results <- res })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	next := func() SyncResult {
		t.Helper()
		select {
		case res := <-results:
			return res
		case <-time.After(5 * time.Second):
			t.Fatal("no sync within 5 s")
			return SyncResult{}
		}
	}

	r.Trigger()
	if res := next(); !res.Full || res.Repair != nil {
		t.Fatalf("first sync: full=%v repair=%v, want full and no repair", res.Full, res.Repair)
	}
	r.Trigger()
	if res := next(); res.Full || res.Repair != nil {
		t.Fatalf("ordinary sync: full=%v repair=%v, want partial and no repair", res.Full, res.Repair)
	}

	// The watcher hears a foreign change: a full sync follows without any
	// Trigger from the source.
	b.watch <- "table deleted in table inet crossproxy by nft (pid 7)"
	res := next()
	if !res.Full || len(res.Repair) != 1 || !strings.Contains(res.Repair[0], "by nft") {
		t.Fatalf("after a foreign change: full=%v repair=%q, want a full sync naming it", res.Full, res.Repair)
	}

	// The check before a sync finds one the watcher missed.
	b.mu.Lock()
	b.drifted = []string{"table inet crossproxy deleted"}
	b.mu.Unlock()
	r.Trigger()
	if res := next(); !res.Full || len(res.Repair) != 1 {
		t.Fatalf("after drift found by the check: full=%v repair=%q, want a full sync", res.Full, res.Repair)
	}

	// A storm of reports is one repair with a bounded description.
	for i := 0; i < 3*maxDrift; i++ {
		b.watch <- fmt.Sprintf("rule deleted %d", i)
	}
	deadline := time.After(5 * time.Second)
	seen := 0
	for seen < 3*maxDrift {
		select {
		case res := <-results:
			if !res.Full || len(res.Repair) == 0 || len(res.Repair) > maxDrift+1 {
				t.Fatalf("storm sync: full=%v, %d descriptions, want full with 1..%d", res.Full, len(res.Repair), maxDrift+1)
			}
			for _, d := range res.Repair {
				var n int
				if _, err := fmt.Sscanf(d, "%d more changes", &n); err == nil {
					seen += n
				} else {
					seen++
				}
			}
		case <-deadline:
			t.Fatalf("the storm's %d changes were not all repaired within 5 s (%d seen)", 3*maxDrift, seen)
		}
	}
	b.mu.Lock()
	checks := b.checks
	b.mu.Unlock()
	if s, _ := b.snapshot(); checks < len(s)-1 {
		t.Errorf("CheckDrift ran %d times for %d syncs, want before every sync but the first", checks, len(s))
	}
}

// otherProxyBackend reports the other proxies of its field found.
type otherProxyBackend struct {
	fakeBackend
	found []OtherProxy
	err   error
	looks int
}

func (b *otherProxyBackend) OtherProxies(context.Context) ([]OtherProxy, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.looks++
	return b.found, b.err
}

// TestRunnerReportsOtherProxies: the runner looks for other proxies at the
// first sync and then once per SyncPeriod, carries what it found in every
// result (so a gauge can drop back to 0), keeps what it knew when a look
// fails, and logs an appearance and a departure once each.
func TestRunnerReportsOtherProxies(t *testing.T) {
	b := &otherProxyBackend{found: []OtherProxy{{Name: "kube-proxy", Evidence: []string{"nftables table ip kube-proxy"}}}}
	log, hook := logrustest.NewNullLogger()
	r := NewRunner(RunnerConfig{MinSyncPeriod: time.Millisecond, SyncPeriod: 30 * time.Second}, &fakeSource{}, b, log)
	r.release = func() {}
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r.clock = fc
	ctx := context.Background()
	syncAt := func(want int) {
		t.Helper()
		res := r.syncOnce(ctx, core.Changes{})
		if len(res.OtherProxies) != want {
			t.Fatalf("at %v: %d other proxies in the result, want %d: %v", fc.Now(), len(res.OtherProxies), want, res.OtherProxies)
		}
	}
	warnings := func() int {
		n := 0
		for _, e := range hook.AllEntries() {
			if e.Level == logrus.WarnLevel && strings.Contains(e.Message, "another Service proxy") {
				n++
			}
		}
		return n
	}
	syncAt(1)
	fc.Step(time.Second)
	syncAt(1)
	if b.looks != 1 || warnings() != 1 {
		t.Fatalf("two syncs within SyncPeriod: %d looks, %d warnings; want 1 and 1", b.looks, warnings())
	}
	fc.Step(30 * time.Second)
	syncAt(1)
	if b.looks != 2 || warnings() != 1 {
		t.Fatalf("a SyncPeriod later: %d looks, %d warnings; want 2 and still 1", b.looks, warnings())
	}
	b.found, b.err = nil, errors.New("netlink: EPERM")
	fc.Step(30 * time.Second)
	syncAt(1) // a failed look keeps what was known
	b.err = nil
	fc.Step(30 * time.Second)
	syncAt(0)
	gone := false
	for _, e := range hook.AllEntries() {
		gone = gone || strings.Contains(e.Message, "other Service proxy is gone")
	}
	if !gone {
		t.Error("the departure of the other proxy was not logged")
	}
}

// TestRunnerRepairDoesNotCollectFirst: a full sync that repairs rules others
// changed starts at once, without the collection before it (the node is
// without its rules meanwhile); the collection after it still runs.
func TestRunnerRepairDoesNotCollectFirst(t *testing.T) {
	b := &driftBackend{}
	released := 0
	r := NewRunner(RunnerConfig{ReleaseMemory: func() { released++ }}, &fakeSource{}, b, quietLog())
	ctx := context.Background()
	r.syncOnce(ctx, core.Changes{}) // the first, full: before and after
	if released != 2 {
		t.Fatalf("first full sync released %d times, want 2", released)
	}
	b.drifted = []string{"table inet crossproxy deleted"}
	res := r.syncOnce(ctx, core.Changes{})
	if !res.Full || len(res.Repair) != 1 || released != 3 {
		t.Fatalf("repair: full=%v repair=%q, released %d times in all, want a full repair and one release after it (3)", res.Full, res.Repair, released)
	}
}

// TestRunnerHeldSyncsKeepPace: changes arriving once per MinSyncPeriod (a
// firewall that reloads every second) are each synced as soon as the period
// lets them, though the timer wakes a little late every time (the fake clock
// moves in 7 ms steps, so a timer due within a step fires at its end): the
// lateness does not add up from sync to sync.
func TestRunnerHeldSyncsKeepPace(t *testing.T) {
	b := &fakeBackend{}
	const period, step, changes = 100 * time.Millisecond, 7 * time.Millisecond, 40
	r, _, fc := startRunner(t, RunnerConfig{MinSyncPeriod: period, SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, b)
	r.Trigger()
	advanceBy(t, fc, step, time.Second, syncsDone(b, 1))
	start := fc.Now()
	var triggered []time.Time
	advanceBy(t, fc, step, (changes+2)*period, func() bool {
		// A change once per period, at the first clock step past its time.
		if len(triggered) < changes && !fc.Now().Before(start.Add(time.Duration(len(triggered)+1)*period)) {
			triggered = append(triggered, fc.Now())
			r.Trigger()
		}
		return false
	})
	_, times := b.snapshot()
	if len(times) != changes+1 {
		t.Fatalf("%d syncs for %d changes one period apart, want one each (and the first)", len(times)-1, changes)
	}
	worst := time.Duration(0)
	for i, at := range triggered {
		worst = max(worst, times[i+1].Sub(at))
	}
	if worst > 5*step { // a step or two of goroutine scheduling besides
		t.Fatalf("a change waited up to %v for its sync; the timer's lateness (up to a %v step) must not add up over %d syncs", worst, step, changes)
	}
}

// costlyBackend is a fakeBackend whose every sync takes cost of the fake
// clock's time, as a real backend's takes wall time, so the pace the Runner
// derives from its syncs' cost is known. It records each sync at its start.
type costlyBackend struct {
	fakeBackend
	cost time.Duration
	fc   *clocktesting.FakeClock
}

func (b *costlyBackend) Sync(_ context.Context, _ *core.NodeState, ch core.Changes) error {
	start := b.fc.Now()
	b.fc.Step(b.cost)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.syncs = append(b.syncs, ch)
	b.times = append(b.times, start)
	if b.failN > 0 {
		b.failN--
		return errors.New("injected failure")
	}
	return nil
}

// startCostly runs a Runner on a fake clock over a costlyBackend.
func startCostly(t *testing.T, cfg RunnerConfig, cost time.Duration) (*Runner, *costlyBackend, *clocktesting.FakeClock) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC))
	b := &costlyBackend{cost: cost, fc: fc}
	cfg.Clock = fc
	r := NewRunner(cfg, &fakeSource{}, b, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r, b, fc
}

// syncsWithoutWaiting reports whether the backend reaches n syncs while the
// fake clock does not move, except by the syncs' own cost: it fires only
// timers already due (a step of 0) whenever the runner has read its
// triggers and waits, for up to two seconds of real time.
func syncsWithoutWaiting(r *Runner, fc *clocktesting.FakeClock, b *fakeBackend, n int) bool {
	deadline := time.Now().Add(2 * time.Second)
	for !syncsDone(b, n)() && time.Now().Before(deadline) {
		if len(r.trigger) == 0 && fc.HasWaiters() {
			fc.Step(0)
		}
		time.Sleep(50 * time.Microsecond)
	}
	return syncsDone(b, n)()
}

// TestRunnerPacedSyncsAtOnceWhenQuiet: without a MinSyncPeriod, a change
// 200 ms after the last sync (quiet by the syncs' cost, not by kube-proxy's
// 1 s) syncs at once, and so does a second right after it, as kube-proxy's
// burst of two lets through; a third right after waits for the pace, ten
// syncs' cost at most, not a second. A failed sync is still retried after
// 1 s, not at the pace.
func TestRunnerPacedSyncsAtOnceWhenQuiet(t *testing.T) {
	const cost = 3 * time.Millisecond
	r, b, fc := startCostly(t, RunnerConfig{SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, cost)
	fb := &b.fakeBackend
	r.Trigger()
	if !syncsWithoutWaiting(r, fc, fb, 1) {
		t.Fatal("the first change did not sync at once")
	}
	advance(t, fc, 200*time.Millisecond, func() bool { return false })
	for n := 2; n <= 3; n++ {
		at := fc.Now()
		r.Trigger()
		if !syncsWithoutWaiting(r, fc, fb, n) {
			advance(t, fc, 2*time.Second, syncsDone(fb, n))
			_, times := fb.snapshot()
			if len(times) < n {
				t.Fatalf("change %d (200 ms after the last sync, then right after it) was not synced within 2 s", n-1)
			}
			t.Fatalf("change %d (200 ms after the last sync, then right after it) waited %v for its sync, want none", n-1, times[n-1].Sub(at))
		}
		if _, times := fb.snapshot(); !times[n-1].Equal(at) {
			t.Fatalf("change %d synced %v after it came, want at once", n-1, times[n-1].Sub(at))
		}
	}
	at := fc.Now()
	r.Trigger()
	advance(t, fc, 2*time.Second, syncsDone(fb, 4))
	_, times := fb.snapshot()
	if len(times) < 4 {
		t.Fatalf("the third change of a burst was not synced within 2 s")
	}
	if !times[3].After(at) {
		t.Errorf("the third change of a burst synced at once; want it held for the pace")
	}
	if held := times[3].Sub(times[1]); held > paceFactor*cost+time.Millisecond {
		t.Errorf("the third change of a burst synced %v after the first, want at most %v (ten syncs' cost), far from kube-proxy's 1 s", held, paceFactor*cost)
	}

	// A failing backend is retried 1 s later (kube-proxy's default period,
	// then doubling), not once per pace.
	advance(t, fc, 200*time.Millisecond, func() bool { return false })
	b.mu.Lock()
	b.failN = 1
	b.mu.Unlock()
	r.Trigger()
	advance(t, fc, 3*time.Second, syncsDone(fb, 6))
	s, times := fb.snapshot()
	if len(s) < 6 || times[5].Sub(times[4]) != time.Second || !s[5].Full {
		t.Fatalf("retry after a failed paced sync: %d syncs at %v, want a full retry 1s after the failure", len(s), times)
	}
}

// TestRunnerPacedStormBoundsSyncs: under a storm of changes (one every
// millisecond) the runner syncs once per ten syncs' cost, so it is busy at
// most a tenth of the time and no change waits much more than that; when a
// sync costs more than a tenth of a second, the pace stops at kube-proxy's
// 1 s. Counted per simulated second after the first (the moving average
// starts from nothing and is settled by then).
func TestRunnerPacedStormBoundsSyncs(t *testing.T) {
	for _, tc := range []struct {
		cost, seconds time.Duration
		// the fake clock's step: a due timer fires up to a step late
		step time.Duration
		// syncs per simulated second, and the longest gap between syncs
		minRate, maxRate int
		maxGap           time.Duration
	}{
		// 4 ms syncs: one per 40 ms, 25 a second, busy 10%.
		{cost: 4 * time.Millisecond, seconds: 3, step: time.Millisecond, minRate: 24, maxRate: 26, maxGap: 42 * time.Millisecond},
		// 300 ms syncs: the average counts each for 100 ms, the pace nears
		// 1 s and never exceeds it (but for the clock's step).
		{cost: 300 * time.Millisecond, seconds: 6, step: 5 * time.Millisecond, minRate: 1, maxRate: 2, maxGap: time.Second + 5*time.Millisecond},
	} {
		t.Run(tc.cost.String(), func(t *testing.T) {
			r, b, fc := startCostly(t, RunnerConfig{SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, tc.cost)
			fb := &b.fakeBackend
			start := fc.Now()
			next := start
			advanceBy(t, fc, tc.step, tc.seconds*time.Second, func() bool {
				if !fc.Now().Before(next) { // a change every millisecond, or every step
					r.Trigger()
					next = fc.Now().Add(time.Millisecond)
				}
				return false
			})
			_, times := fb.snapshot()
			perSecond := make([]int, tc.seconds)
			for _, at := range times {
				if i := int(at.Sub(start) / time.Second); i < len(perSecond) {
					perSecond[i]++
				}
			}
			for i, n := range perSecond[1:] {
				if n < tc.minRate || n > tc.maxRate {
					t.Errorf("second %d of the storm: %d syncs of %v, want %d to %d (per second: %v)", i+2, n, tc.cost, tc.minRate, tc.maxRate, perSecond)
				}
			}
			for i := 1; i < len(times); i++ {
				if gap := times[i].Sub(times[i-1]); gap > tc.maxGap {
					t.Errorf("sync %d came %v after the one before it under a storm, want at most %v", i+1, gap, tc.maxGap)
				}
			}
		})
	}
}

// TestRunnerGivenMinSyncPeriodIsFixed: a MinSyncPeriod the operator gives
// is honoured as before the pace existed: a change 200 ms after a sync waits
// for the period, and a storm syncs exactly once per period; the same
// change without one (the default) syncs at once, which tells a given 1 s
// from the default.
func TestRunnerGivenMinSyncPeriodIsFixed(t *testing.T) {
	const cost = 4 * time.Millisecond
	for _, period := range []time.Duration{0, 300 * time.Millisecond, time.Second} {
		t.Run(period.String(), func(t *testing.T) {
			r, b, fc := startCostly(t, RunnerConfig{MinSyncPeriod: period, SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, cost)
			fb := &b.fakeBackend
			r.Trigger()
			if !syncsWithoutWaiting(r, fc, fb, 1) {
				t.Fatal("the first change did not sync at once")
			}
			advance(t, fc, 200*time.Millisecond, func() bool { return false })
			at := fc.Now()
			r.Trigger()
			if period == 0 {
				if !syncsWithoutWaiting(r, fc, fb, 2) {
					t.Fatal("by default a change 200 ms after a sync waited for its sync; want it at once (paced by cost, not a 1 s period)")
				}
				if _, times := fb.snapshot(); !times[1].Equal(at) {
					t.Fatalf("by default a change 200 ms after a sync synced %v after it came, want at once", times[1].Sub(at))
				}
				return
			}
			advance(t, fc, 2*period, syncsDone(fb, 2))
			_, times := fb.snapshot()
			if len(times) != 2 || times[1].Sub(times[0]) != period {
				t.Fatalf("a change 200 ms after a sync synced at %v, want %v after the sync", times, period)
			}
			const stormPeriods = 3
			start := fc.Now()
			next := start
			advance(t, fc, stormPeriods*period, func() bool {
				if !fc.Now().Before(next) {
					r.Trigger()
					next = fc.Now().Add(time.Millisecond)
				}
				return false
			})
			_, times = fb.snapshot()
			if len(times) < 2+stormPeriods {
				t.Fatalf("%d syncs in a storm of %d periods, want one per period", len(times)-2, stormPeriods)
			}
			for i := 2; i < len(times); i++ {
				if gap := times[i].Sub(times[i-1]); gap != period {
					t.Errorf("storm sync %d came %v after the one before it, want exactly %v", i-1, gap, period)
				}
			}
		})
	}
}
