package platform

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossproxy/crossproxy/core"
)

// benchRunnerSliceUpdate measures one EndpointSlice update through the
// Runner (Snapshot, backend, observers) with n Services x 10 endpoints,
// while an observer keeps the last state as the debug endpoint does. Each
// Snapshot with a change copies the Ports map (a NodeState is never
// modified): O(Services) per sync.
func benchRunnerSliceUpdate(b *testing.B, n int) {
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

// BenchmarkRunnerSliceUpdate10k: one slice update at 10,000 Services (target under 1 ms).
func BenchmarkRunnerSliceUpdate10k(b *testing.B) { benchRunnerSliceUpdate(b, 10000) }

// BenchmarkRunnerSliceUpdate100k: the same at 100,000 Services, the scale at
// which the copy was weighed against reusing the old map (issue 13).
func BenchmarkRunnerSliceUpdate100k(b *testing.B) { benchRunnerSliceUpdate(b, 100000) }
