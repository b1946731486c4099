package platform

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

// listingDriftBackend is a driftBackend whose check lists objects, as the
// HNS backend's does: the Runner checks it only when a check is due.
type listingDriftBackend struct{ driftBackend }

func (*listingDriftBackend) DriftCheckLists() {}

// TestRunnerDriftRepairBound: rules changed from outside just after a check
// are repaired within one SyncPeriod, for a check that costs nothing
// (nftables) and for one that lists objects (HNS), although a change-driven
// sync came half a second before the check was due (which once pushed the
// HNS check to the next periodic sync, 1.9 SyncPeriods after the drift).
// The listing check runs once per SyncPeriod, not per sync.
func TestRunnerDriftRepairBound(t *testing.T) {
	const period = 30 * time.Second
	for _, listing := range []bool{false, true} {
		t.Run(fmt.Sprintf("listing=%v", listing), func(t *testing.T) {
			var b Backend
			var db *driftBackend
			if listing {
				lb := &listingDriftBackend{}
				b, db = lb, &lb.driftBackend
			} else {
				db = &driftBackend{}
				b = db
			}
			fc := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC))
			db.clock = fc
			r := NewRunner(RunnerConfig{MinSyncPeriod: time.Second, SyncPeriod: period, FullSyncPeriod: time.Hour, Clock: fc}, &fakeSource{}, b, quietLog())
			results := make(chan SyncResult, 100)
			r.OnSync(func(res SyncResult) { results <- res })
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { _ = r.Run(ctx); close(done) }()
			defer func() { cancel(); <-done }()
			var got []SyncResult
			drain := func() bool {
				for {
					select {
					case res := <-results:
						got = append(got, res)
					default:
						return false
					}
				}
			}
			t0 := fc.Now()
			r.Trigger()
			advanceBy(t, fc, 10*time.Millisecond, time.Second, func() bool { drain(); return len(got) == 1 })
			if len(got) != 1 {
				t.Fatal("no first sync")
			}
			// Drift half a second after the first check.
			advanceBy(t, fc, 10*time.Millisecond, 500*time.Millisecond, func() bool { return false })
			drifted := fc.Now()
			db.mu.Lock()
			db.drifted = []string{"load balancer TCP/10.96.0.10/80 missing"}
			db.mu.Unlock()
			// A change-driven sync half a second before the check is due.
			advanceBy(t, fc, 10*time.Millisecond, t0.Add(period-500*time.Millisecond).Sub(fc.Now()), func() bool { return false })
			r.Trigger()
			repaired := func() bool {
				drain()
				for _, res := range got {
					if res.Repair != nil {
						return true
					}
				}
				return false
			}
			advanceBy(t, fc, 10*time.Millisecond, 2*period, repaired)
			var repair SyncResult
			for _, res := range got {
				if res.Repair != nil {
					repair = res
					break
				}
			}
			if repair.Repair == nil {
				t.Fatalf("drift at %v not repaired within %v (syncs %d)", drifted.Sub(t0), 2*period, len(got))
			}
			if !repair.Full {
				t.Fatal("the repair sync is not full")
			}
			// The fake sync takes no time: the repair starts when the check does.
			if took := repair.Start.Sub(drifted); took > period {
				t.Fatalf("drift at %v repaired by the sync at %v: %v later, want within one SyncPeriod (%v)", drifted.Sub(t0), repair.Start.Sub(t0), took, period)
			}
			db.mu.Lock()
			checks := db.checks
			db.mu.Unlock()
			syncs, _ := db.snapshot()
			if listing && checks != 2 {
				t.Fatalf("listing check ran %d times for %d syncs within one SyncPeriod and a bit, want 2 (at the first sync and when due)", checks, len(syncs))
			}
			if !listing && checks != len(syncs) {
				t.Fatalf("cheap check ran %d times for %d syncs, want before every sync", checks, len(syncs))
			}
			t.Logf("drift at +%v repaired by the sync at +%v; %d syncs, %d checks", drifted.Sub(t0), repair.Start.Sub(t0), len(syncs), checks)
		})
	}
}

// resetCounter is a fake clock whose timers count their resets: each is one
// turn of the Runner's loop.
type resetCounter struct {
	*clocktesting.FakeClock
	mu     sync.Mutex
	resets int
}

type countedTimer struct {
	clock.Timer
	c *resetCounter
}

func (c *resetCounter) NewTimer(d time.Duration) clock.Timer {
	return countedTimer{c.FakeClock.NewTimer(d), c}
}

func (t countedTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	t.c.resets++
	t.c.mu.Unlock()
	return t.Timer.Reset(d)
}

func (c *resetCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

// TestRunnerWaitsOutBackoff: once the retry backoff (up to MaxBackoff, 1 min)
// is longer than SyncPeriod, the periodic sync falls due before the retry
// may run; the Runner then sleeps until the retry instead of waking at every
// tick of the clock to find it may not sync yet.
func TestRunnerWaitsOutBackoff(t *testing.T) {
	b := &fakeBackend{failN: 1000, synced: make(chan struct{}, 1000)}
	fc := &resetCounter{FakeClock: clocktesting.NewFakeClock(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC))}
	b.clock = fc
	r := NewRunner(RunnerConfig{MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second, MaxBackoff: time.Minute, FullSyncPeriod: time.Hour, Clock: fc}, &fakeSource{}, b, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	r.Trigger()
	// Failures 1..7 back off 1, 2, 4, 8, 16, 32 and 60 s.
	advanceBy(t, fc.FakeClock, 100*time.Millisecond, 10*time.Minute, func() bool { s, _ := b.snapshot(); return len(s) == 7 })
	_, times := b.snapshot()
	if len(times) != 7 {
		t.Fatalf("%d syncs, want 7", len(times))
	}
	last := times[6]
	advanceBy(t, fc.FakeClock, 100*time.Millisecond, last.Add(31*time.Second).Sub(fc.Now()), func() bool { return false })
	before := fc.count()
	// 28 s in steps of 100 ms, all after the periodic sync fell due and
	// before the retry may run.
	advanceBy(t, fc.FakeClock, 100*time.Millisecond, 28*time.Second, func() bool { return false })
	if n := fc.count() - before; n > 2 {
		t.Fatalf("the runner woke %d times in 28 s of waiting out a 60 s backoff, want at most 2", n)
	}
	if s, _ := b.snapshot(); len(s) != 7 {
		t.Fatalf("%d syncs before the backoff ended, want 7", len(s))
	}
}
