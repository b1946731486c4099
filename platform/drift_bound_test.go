package platform

import (
	"context"
	"fmt"
	"testing"
	"time"

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
