// Package heapstat holds the two heap measurements the memory benchmarks of
// several packages share (platform/kube's informer cache, the integration
// scale benchmarks), so every "held MiB" figure in test/results is taken the
// same way.
package heapstat

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
)

// Inuse returns the heap in use after two collections: the second frees what
// the first only finalized, so the figure is what is really held.
func Inuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// WriteProfile writes the heap profile to path for `go tool pprof
// -sample_index=inuse_space`, to see which functions the held bytes come
// from; a failure fails the benchmark.
func WriteProfile(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatalf("heap profile: %v", err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatalf("heap profile %s: %v", path, err)
	}
}
