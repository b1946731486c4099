package core

import (
	"fmt"
	"runtime"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// benchObjects builds n ClusterIP Services with one TCP port and one slice of
// eps endpoints each, spread over 20 nodes (so some are local).
func benchObjects(n, eps int) ([]*v1.Service, []*discovery.EndpointSlice) {
	services := make([]*v1.Service, 0, n)
	sl := make([]*discovery.EndpointSlice, 0, n)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		services = append(services, testService(name, clusterIPs(fmt.Sprintf("10.96.%d.%d", i/250, i%250+1))))
		s := testSlice(name+"-abcde", name)
		for j := range eps {
			s.Endpoints = append(s.Endpoints, ep(fmt.Sprintf("10.%d.%d.%d", 100+j, i/250, i%250+1), fmt.Sprintf("n%d", (i+j)%20)))
		}
		sl = append(sl, s)
	}
	return services, sl
}

// BenchmarkCompute10kServices is the full computation for 10,000 Services x
// 10 endpoints (target: under 200 ms).
func BenchmarkCompute10kServices(b *testing.B) {
	services, sl := benchObjects(10000, 10)
	node := defaultNode()
	b.ReportAllocs()
	for b.Loop() {
		st, err := Compute(Options{}, node, services, sl)
		if err != nil || len(st.Ports) != 10000 {
			b.Fatalf("ports %d, err %v", len(st.Ports), err)
		}
	}
}

// BenchmarkTrackerInitialSnapshot10k loads 10,000 Services x 10 endpoints into
// a Tracker and takes the first (Full) Snapshot. held-MiB is the heap the
// tracker and the NodeState hold afterwards (the objects are the caller's).
func BenchmarkTrackerInitialSnapshot10k(b *testing.B) {
	services, sl := benchObjects(10000, 10)
	node := defaultNode()
	b.ReportAllocs()
	var held float64
	for b.Loop() {
		b.StopTimer()
		before := heapInuse()
		b.StartTimer()
		tr, _ := NewTracker(Options{})
		tr.SetNode(node)
		for _, s := range services {
			tr.UpsertService(s)
		}
		for _, s := range sl {
			tr.UpsertSlice(s)
		}
		st, ch := tr.Snapshot()
		if len(st.Ports) != 10000 || len(ch.Ports) != 10000 {
			b.Fatal("wrong size")
		}
		b.StopTimer()
		held = float64(heapInuse()-before) / (1 << 20)
		runtime.KeepAlive(tr)
		runtime.KeepAlive(st)
		b.StartTimer()
	}
	b.ReportMetric(held, "held-MiB")
}

// heapInuse is the heap in use after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkTrackerSliceUpdate10k is one EndpointSlice update followed by a
// Snapshot on a Tracker holding 10,000 Services x 10 endpoints, the old
// NodeState kept intact (target: under 1 ms).
func BenchmarkTrackerSliceUpdate10k(b *testing.B) {
	services, sl := benchObjects(10000, 10)
	tr, _ := NewTracker(Options{})
	tr.SetNode(defaultNode())
	for _, s := range services {
		tr.UpsertService(s)
	}
	for _, s := range sl {
		tr.UpsertSlice(s)
	}
	tr.Snapshot()
	// Two versions of one slice: with and without its last endpoint.
	a := sl[5000]
	shorter := a.DeepCopy()
	shorter.Endpoints = shorter.Endpoints[:9]
	versions := []*discovery.EndpointSlice{shorter, a}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tr.UpsertSlice(versions[i%2])
		i++
		st, ch := tr.Snapshot()
		if len(ch.Ports) != 1 || len(st.Ports) != 10000 {
			b.Fatalf("changed %d of %d ports", len(ch.Ports), len(st.Ports))
		}
	}
}
