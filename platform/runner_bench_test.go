package platform

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// benchRunnerSliceUpdate measures one EndpointSlice update through the
// Runner (Snapshot, backend, observers) with n Services x 10 endpoints,
// while an observer keeps the last state as the debug endpoint does. Each
// Snapshot with a change copies the Ports map (a NodeState is never
// modified): O(Services) per sync.
func benchRunnerSliceUpdate(b *testing.B, n int) {
	tr, slices := benchTracker(b, n)
	r := NewRunner(RunnerConfig{}, tr, &fakeBackend{}, quietLog())
	var kept *core.NodeState
	r.OnSync(func(res SyncResult) { kept = res.State }) // as the debug endpoint does
	ctx := context.Background()
	r.syncOnce(ctx, core.Changes{})
	a := slices[n/2]
	shorter := a.DeepCopy()
	shorter.Endpoints = shorter.Endpoints[:9]
	versions := []*discovery.EndpointSlice{shorter, a}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.UpsertSlice(versions[i%2])
		i++
		res := r.syncOnce(ctx, core.Changes{})
		if len(res.Changes.Ports) != 1 || len(kept.Ports) != n {
			b.Fatalf("changed %d of %d ports", len(res.Changes.Ports), len(res.State.Ports))
		}
	}
}

// benchTracker is a Tracker with n Services of 10 endpoints each, and their
// slices as upserted.
func benchTracker(b *testing.B, n int) (*core.Tracker, []*discovery.EndpointSlice) {
	tr, err := core.NewTracker(core.Options{})
	if err != nil {
		b.Fatal(err)
	}
	tr.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	var slices []*discovery.EndpointSlice
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		tr.UpsertService(testService(name, fmt.Sprintf("10.%d.%d.%d", 96+i/65536, i/256%256, i%256)))
		var addrs []string
		for j := range 10 {
			addrs = append(addrs, fmt.Sprintf("10.%d.%d.%d", 128+i/8192, i/32%256, (i%32)*8+j))
		}
		s := testSlice(name, addrs...)
		slices = append(slices, s)
		tr.UpsertSlice(s)
	}
	return tr, slices
}

// BenchmarkRunnerSliceUpdate10k: one slice update at 10,000 Services (target under 1 ms).
func BenchmarkRunnerSliceUpdate10k(b *testing.B) { benchRunnerSliceUpdate(b, 10000) }

// BenchmarkRunnerSliceUpdate100k: the same at 100,000 Services, the scale at
// which the copy was weighed against reusing the old map (issue 13).
func BenchmarkRunnerSliceUpdate100k(b *testing.B) { benchRunnerSliceUpdate(b, 100000) }

// What a sync costs at 10,000 Services x 10 endpoints, from
// test/results/scale.md ("Through the real kube-apiserver, make
// bench-scale-10k", 19:42-19:46 UTC): a partial sync of one endpoint change
// 0.91 ms (the backend alone, BenchmarkEndpointChange: 0.45 ms; the binary's
// figure is the larger), the first full sync 0.43 s (the shipped binary,
// final code).
const (
	stormPartialCost = 910 * time.Microsecond
	stormFullCost    = 430 * time.Millisecond
)

// busyBackend burns, for each sync, the CPU a real backend's sync costs at
// 10k Services (on Linux mostly the kernel's work on the transaction), so a
// storm's CPU is the syncs' and not a sleep's.
type busyBackend struct{ syncs atomic.Int64 }

func (*busyBackend) Name() string { return "busy" }

func (b *busyBackend) Sync(_ context.Context, _ *core.NodeState, ch core.Changes) error {
	cost := stormPartialCost
	if ch.Full {
		cost = stormFullCost
	}
	for start := time.Now(); time.Since(start) < cost; {
	}
	b.syncs.Add(1)
	return nil
}

func (*busyBackend) Cleanup(context.Context) error { return nil }

func (*busyBackend) Close() error { return nil }

func (*busyBackend) Programmed(context.Context, types.NamespacedName) (*ProgrammedService, error) {
	return nil, ErrUnsupported
}

// countingSource is a Tracker that remembers how many of the benchmark's
// changes its last Snapshot took: the changes written before the Snapshot
// began, all of which it holds (some written during it may be there too,
// and count for the next sync: a latency is never understated).
type countingSource struct {
	*core.Tracker
	written atomic.Int64 // changes upserted so far
	taken   int64        // at the last Snapshot (Runner goroutine only)
}

func (s *countingSource) Snapshot() (*core.NodeState, core.Changes) {
	s.taken = s.written.Load()
	return s.Tracker.Snapshot()
}

// benchRunnerStorm sends rounds of 1,000 EndpointSlice updates, one every
// every, each to another of 10,000 Services, through a running Runner (the
// wall clock) whose backend burns a 10k-Service sync's cost, and reports per
// 1,000 changes the process's CPU and the syncs, and each change's latency
// from its write to the end of the sync that carried it. Each round starts
// after 1.1 s of quiet, past a given 1 s period, so both behaviours start as
// after a quiet moment; a round of 200 changes before the first settles the
// pace after the first full sync. minSync is RunnerConfig.MinSyncPeriod:
// 1 s is the behaviour before issue 51 (the default then, still given with
// --min-sync-period 1s), 0 the pace by cost.
func benchRunnerStorm(b *testing.B, minSync, every time.Duration) {
	const n, round, warmup = 10000, 1000, 200
	tr, full := benchTracker(b, n)
	src := &countingSource{Tracker: tr}
	be := &busyBackend{}
	r := NewRunner(RunnerConfig{MinSyncPeriod: minSync, SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, src, be, quietLog())
	var (
		mu      sync.Mutex
		written []time.Time // when each change was written
		synced  int         // changes carried by a finished sync
		target  int         // signal done once synced reaches it (0: not yet)
		lat     []time.Duration
		kept    *core.NodeState
	)
	done := make(chan struct{}, 1)
	r.OnSync(func(res SyncResult) {
		end := time.Now()
		mu.Lock()
		defer mu.Unlock()
		kept = res.State // as the debug endpoint does
		for ; synced < int(src.taken); synced++ {
			lat = append(lat, end.Sub(written[synced]))
		}
		if target > 0 && synced >= target {
			select {
			case done <- struct{}{}:
			default:
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { _ = r.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	// shorter[j] is Service j's slice less one endpoint; the changes
	// alternate between the two versions, a stride through the Services.
	shorter := make([]*discovery.EndpointSlice, n)
	changed := 0
	feed := func(count int) time.Duration {
		objs := make([]*discovery.EndpointSlice, count)
		for i := range objs {
			j := (changed + i) * 7919 % n
			if (changed+i)/n%2 == 1 {
				objs[i] = full[j]
				continue
			}
			if shorter[j] == nil {
				shorter[j] = full[j].DeepCopy()
				shorter[j].Endpoints = shorter[j].Endpoints[:9]
			}
			objs[i] = shorter[j]
		}
		changed += count
		mu.Lock()
		target = 0
		mu.Unlock()
		select {
		case <-done:
		default:
		}
		start := time.Now()
		for i, o := range objs {
			if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
				time.Sleep(d)
			}
			mu.Lock()
			written = append(written, time.Now())
			mu.Unlock()
			tr.UpsertSlice(o)
			src.written.Add(1)
			r.Trigger()
		}
		mu.Lock()
		target = len(written)
		all := synced >= target
		mu.Unlock()
		if !all {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				b.Fatalf("the changes were not all synced within 10 s of the last")
			}
		}
		return time.Since(start)
	}

	r.Trigger() // the first, full sync
	for be.syncs.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	feed(warmup)
	mu.Lock()
	lat = lat[:0]
	mu.Unlock()
	var cpu, wall time.Duration
	var syncs int64
	rounds := 0
	for b.Loop() {
		time.Sleep(1100 * time.Millisecond)
		cpu0, err := processCPU()
		if err != nil {
			b.Fatal(err)
		}
		syncs0 := be.syncs.Load()
		wall += feed(round)
		cpu1, err := processCPU()
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpu1 - cpu0
		syncs += be.syncs.Load() - syncs0
		rounds++
	}
	mu.Lock()
	defer mu.Unlock()
	if kept == nil || len(kept.Ports) != n {
		b.Fatalf("the last state has %v ports, want %d", kept, n)
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(float64(cpu)/float64(rounds)/float64(time.Millisecond), "cpu-ms/1k-changes")
	b.ReportMetric(float64(syncs)/float64(rounds), "syncs/1k-changes")
	b.ReportMetric(100*float64(cpu)/float64(wall), "cpu-%-of-a-core")
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(at(1), "max-ms")
}

// BenchmarkRunnerStorm10k: 1,000 changes at 10k Services, at 1,000 a second
// (a storm) and at 50 a second (make bench-scale-stream's rate), with the
// fixed 1 s period of kube-proxy's default (given-1s, the behaviour before
// issue 51) and paced by the syncs' cost (paced, the default now). The
// figures are in test/results/npl.md.
func BenchmarkRunnerStorm10k(b *testing.B) {
	for _, rate := range []struct {
		name  string
		every time.Duration
	}{{"1000per_s", time.Millisecond}, {"50per_s", 20 * time.Millisecond}} {
		for _, mode := range []struct {
			name    string
			minSync time.Duration
		}{{"given-1s", time.Second}, {"paced", 0}} {
			b.Run(rate.name+"/"+mode.name, func(b *testing.B) { benchRunnerStorm(b, mode.minSync, rate.every) })
		}
	}
}
