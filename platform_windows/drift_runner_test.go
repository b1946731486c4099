package hns

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// nodeSource is a platform.StateSource holding one state: the first
// snapshot and forced ones are full, the others report no changed port.
type nodeSource struct {
	mu    sync.Mutex
	state *core.NodeState
	snaps int
	full  bool
}

func (s *nodeSource) Snapshot() (*core.NodeState, core.Changes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snaps++
	c := core.Changes{Full: s.full || s.snaps == 1}
	s.full = false
	return s.state, c
}

func (s *nodeSource) ForceFull() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full = true
}

// TestDriftBoundThroughRunner: the HNS backend under the shared Runner, on
// a fake clock with kube-proxy's periods. An HNS restart half a second after
// a drift check loses every load balancer, remote endpoint and the
// source-VIP endpoint; a change-driven sync comes half a second before the
// next check is due (it must not postpone the check). Everything is back
// within one SyncPeriod plus one sync, and partial syncs list nothing.
func TestDriftBoundThroughRunner(t *testing.T) {
	const period = 30 * time.Second
	r, _, _ := driftRig(t, "10.244.1.5")
	src := &nodeSource{state: services(5)}
	fc := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC))
	log := logrus.New()
	log.SetOutput(testWriter{t})
	run := platform.NewRunner(platform.RunnerConfig{MinSyncPeriod: time.Second, SyncPeriod: period, FullSyncPeriod: time.Hour, Clock: fc}, src, r.backend, log)
	var mu sync.Mutex
	var results []platform.SyncResult
	run.OnSync(func(res platform.SyncResult) {
		mu.Lock()
		defer mu.Unlock()
		results = append(results, res)
	})
	synced := func() []platform.SyncResult {
		mu.Lock()
		defer mu.Unlock()
		return append([]platform.SyncResult(nil), results...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = run.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	t0 := fc.Now()
	run.Trigger()
	stepClock(t, fc, time.Second, func() bool { return len(synced()) == 1 })
	if res := synced(); len(res) != 1 || res[0].Err != nil {
		t.Fatalf("first sync: %+v", res)
	}
	want := stateDump(r.fake)
	stepClock(t, fc, 500*time.Millisecond, func() bool { return false })
	drifted := fc.Now()
	r.fake.RestartLosingState(r.backend.sourceVIP)
	r.fake.ResetCalls()
	stepClock(t, fc, t0.Add(period-500*time.Millisecond).Sub(fc.Now()), func() bool { return false })
	run.Trigger()
	stepClock(t, fc, time.Second, func() bool { return len(synced()) == 2 })
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("the change-driven sync before the check was due made calls: %v", r.fake.Calls())
	}
	own := "endpoint 10.244.1.2 remote=false pa=invalid IP mac=" + hostMAC + "\n"
	back := func() bool { return strings.Replace(stateDump(r.fake), own, "", 1) == want }
	reported := func() bool {
		for _, res := range synced() {
			if res.Repair != nil {
				return true
			}
		}
		return false
	}
	stepClock(t, fc, 2*period, func() bool { return back() && reported() })
	if !back() {
		t.Fatalf("not repaired within %v:\n%s\nwant:\n%s", 2*period, stateDump(r.fake), want)
	}
	var repair platform.SyncResult
	for _, res := range synced() {
		if res.Repair != nil {
			repair = res
		}
	}
	if repair.Repair == nil || !repair.Full || repair.Err != nil {
		t.Fatalf("no full repair sync among %d syncs: %+v", len(synced()), repair)
	}
	if took := repair.Start.Add(repair.Duration).Sub(drifted); took > period+time.Second {
		t.Fatalf("HNS restart at +%v repaired by the sync at +%v, %v later: want within one SyncPeriod (%v) plus one sync",
			drifted.Sub(t0), repair.Start.Sub(t0), took, period)
	}
	t.Logf("HNS restart at +%v repaired by the sync at +%v; calls of the check and the repair: %d %v",
		drifted.Sub(t0), repair.Start.Sub(t0), r.fake.TotalCalls(), r.fake.Calls())
}

// stepClock steps fc 10 ms at a time while the runner waits on its timer,
// until until() holds or d has passed.
func stepClock(t *testing.T, fc *clocktesting.FakeClock, d time.Duration, until func() bool) {
	t.Helper()
	end := fc.Now().Add(d)
	deadline := time.Now().Add(30 * time.Second)
	for !until() && fc.Now().Before(end) {
		if time.Now().After(deadline) {
			t.Fatalf("the runner stopped waiting on its timer at %v", fc.Now())
		}
		if fc.HasWaiters() {
			fc.Step(min(10*time.Millisecond, end.Sub(fc.Now())))
		}
		time.Sleep(50 * time.Microsecond)
	}
}
