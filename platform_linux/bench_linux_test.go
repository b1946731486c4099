package nft

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/netnsrun"

	"github.com/crossproxy/crossproxy/core"
)

// benchSizes are the Service counts a benchmark runs: def, or the one
// BENCH_SERVICES names (e.g. 100000: make bench-scale-backend).
func benchSizes(b *testing.B, def ...int) []int {
	v := os.Getenv("BENCH_SERVICES")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("BENCH_SERVICES=%q: want a number of Services", v)
	}
	return []int{n}
}

// newBenchBackend is newTestBackend in the layout the benchmark is asked for:
// BENCH_OWN_CHAINS=1 gives every port chains of its own (the layout before the
// shared maps, and that of ports with ClientIP affinity or source ranges), so
// both can be measured on the same machine; BENCH_SHARDS=N spreads those
// chains over N shard tables instead of one per 256 ports.
func newBenchBackend(b *testing.B, ns string) *Backend {
	be := newTestBackend(b, ns)
	be.cfg.ownChains = os.Getenv("BENCH_OWN_CHAINS") == "1"
	if v := os.Getenv("BENCH_SHARDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_SHARDS=%q: want a number of shard tables", v)
		}
		be.cfg.Shards = n
	}
	return be
}

// resetPeakRSS makes VmHWM start again from the current resident size.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0o644) }

// peakRSSMB reads the process's peak resident size since the last reset.
func peakRSSMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.Atoi(f[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

// cpuTime is the process's user plus system CPU time: on a busy machine it
// says what a sync costs better than the wall clock, which includes waiting
// for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapInuse is the heap in use after a collection: what the process holds.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkFullSync writes n Services x 10 endpoints into an empty table,
// the first sync of a node. held-MiB is the heap the backend keeps after the
// sync (what it applied, for the next partial sync's diff; the NodeState is
// the benchmark's and was allocated before).
func BenchmarkFullSync(b *testing.B) {
	for _, n := range benchSizes(b, 1000, 10000, 30000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) { benchFullSync(b, n, false) })
	}
}

// BenchmarkFullSyncWatched is BenchmarkFullSync with the drift watcher
// subscribed to nf_tables notifications, as in the running proxy: the kernel
// then writes a notification for every object of the batch, and the
// difference to BenchmarkFullSync is what following them costs.
func BenchmarkFullSyncWatched(b *testing.B) {
	for _, n := range benchSizes(b, 1000, 10000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) { benchFullSync(b, n, true) })
	}
}

func benchFullSync(b *testing.B, n int, watched bool) {
	ns := testNS(b)
	be := newBenchBackend(b, ns)
	st := scaleStateN(n, 10)
	ctx := context.Background()
	if watched {
		watchDrift(b, be, nil)
	}
	var peak, held float64
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if err := be.Cleanup(ctx); err != nil {
			b.Fatal(err)
		}
		before := heapInuse()
		resetPeakRSS()
		b.StartTimer()
		c0 := cpuTime()
		if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
		peak = max(peak, peakRSSMB())
		b.StopTimer()
		held = float64(heapInuse()-before) / (1 << 20)
		b.StartTimer()
	}
	b.ReportMetric(peak, "peak-RSS-MB")
	b.ReportMetric(held, "held-MiB")
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
	s := be.LastSync()
	b.ReportMetric(float64(s.Kernel.Milliseconds()), "kernel-ms")
	b.ReportMetric(float64(s.Commands), "commands")
}

// BenchmarkFullResync times a full sync over the rules a previous process
// left (a restarted proxy: a new backend, the same state): every set is
// replaced while the old rules still hold references to it until the commit.
func BenchmarkFullResync(b *testing.B) {
	for _, n := range benchSizes(b, 10000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ns := testNS(b)
			st := scaleStateN(n, 10)
			ctx := context.Background()
			if err := newBenchBackend(b, ns).Sync(ctx, st, core.Changes{Full: true}); err != nil {
				b.Fatal(err)
			}
			var kernel time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				be := newBenchBackend(b, ns)
				if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
					b.Fatal(err)
				}
				kernel += be.LastSync().Kernel
			}
			b.ReportMetric(float64(kernel.Milliseconds())/float64(b.N), "kernel-ms/op")
		})
	}
}

// BenchmarkPeriodicFullSync times the periodic full sync of a running proxy
// when nothing changed and nobody else committed: a diff against what the
// backend last programmed, which sends nothing (commands, kernel-ms).
func BenchmarkPeriodicFullSync(b *testing.B) {
	for _, n := range benchSizes(b, 10000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ns := testNS(b)
			st := scaleStateN(n, 10)
			ctx := context.Background()
			be := newBenchBackend(b, ns)
			if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
				b.Fatal(err)
			}
			var kernel time.Duration
			commands := 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
					b.Fatal(err)
				}
				s := be.LastSync()
				if !s.AsDiff {
					b.Fatalf("periodic full sync %d was a rewrite, not a diff", i)
				}
				kernel += s.Kernel
				commands += s.Commands
			}
			b.ReportMetric(float64(kernel.Microseconds())/1000/float64(b.N), "kernel-ms/op")
			b.ReportMetric(float64(commands)/float64(b.N), "commands/op")
		})
	}
}

// watchDrift runs the backend's drift watcher until the benchmark ends,
// sending what it reports to noted (dropped when noted is nil or full).
func watchDrift(b *testing.B, be *Backend, noted chan<- string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- be.WatchDrift(ctx, func(what string) {
			select {
			case noted <- what:
			default:
			}
		})
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	time.Sleep(50 * time.Millisecond) // subscribed before the first batch
}

// BenchmarkForeignFlushRepair flushes the ruleset of a namespace holding n
// Services x 10 endpoints, as a firewall reload does, and times what the
// running proxy does about it: notice-ms from the flush's return to the
// watcher's report, repair-ms from the flush's return to the end of the full
// sync that restores the rules (the runner starts it at once when the last
// sync is older than --min-sync-period).
func BenchmarkForeignFlushRepair(b *testing.B) {
	for _, n := range benchSizes(b, 1000, 10000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			ns := testNS(b)
			be := newTestBackend(b, ns)
			st := scaleStateN(n, 10)
			ctx := context.Background()
			noted := make(chan string, 64)
			watchDrift(b, be, noted)
			if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
				b.Fatal(err)
			}
			var notice, repair time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				time.Sleep(100 * time.Millisecond)
				for len(noted) > 0 {
					<-noted
				}
				nftIn(b, ns, "flush", "ruleset")
				b.StartTimer()
				start := time.Now()
				select {
				case <-noted:
				case <-time.After(30 * time.Second):
					b.Fatal("the flush was not reported within 30 s")
				}
				notice += time.Since(start)
				if d, err := be.CheckDrift(ctx); err != nil || len(d) == 0 {
					b.Fatalf("CheckDrift after a flush: %q %v", d, err)
				}
				if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
					b.Fatal(err)
				}
				repair += time.Since(start)
			}
			b.ReportMetric(float64(notice.Microseconds())/1000/float64(b.N), "notice-ms")
			b.ReportMetric(float64(repair.Microseconds())/1000/float64(b.N), "repair-ms")
		})
	}
}

// BenchmarkEndpointChange changes one endpoint of one Service among n (10,000
// is the target; 1,000 shows how the kernel's share grows; BENCH_SERVICES sets
// n) and syncs that change alone: a partial sync of model, plan and one
// netlink batch.
func BenchmarkEndpointChange(b *testing.B) {
	for _, n := range benchSizes(b, 1000, 10000) {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) { benchEndpointChange(b, n) })
	}
}

// benchEndpointChange times steady-state endpoint changes. The first seconds
// after a large full sync are not steady: the kernel is still growing the hash
// tables of the maps it just filled (rhashtable's deferred rehash) and Go's
// collector is returning the full sync's garbage, so a change then costs about
// twice as much. Those changes run before the timer starts; their mean over
// the first second is reported apart as first-1s-ms/op, so neither figure
// hides the other.
func benchEndpointChange(b *testing.B, n int) {
	ns := testNS(b)
	be := newBenchBackend(b, ns)
	st := scaleStateN(n, 10)
	ctx := context.Background()
	if err := be.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		b.Fatal(err)
	}
	keys := make([]core.PortKey, 0, len(st.Ports))
	for k := range st.Ports {
		keys = append(keys, k)
	}
	var kernel, build time.Duration
	seq := 0
	change := func() {
		k := keys[seq%len(keys)]
		p := *st.Ports[k]
		eps := append([]core.Endpoint(nil), p.ClusterEndpoints...)
		eps[0].Addr = netip.AddrFrom4([4]byte{10, 255, byte(seq >> 8), byte(seq)})
		seq++
		p.ClusterEndpoints = eps
		st.Ports[k] = &p
		if err := be.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}}); err != nil {
			b.Fatal(err)
		}
		kernel += be.LastSync().Kernel
		build += be.LastSync().Build
	}
	start := time.Now()
	first := 0
	for time.Since(start) < time.Second {
		change()
		first++
	}
	firstMean := float64(time.Since(start).Microseconds()) / float64(first) / 1000
	for time.Since(start) < 2*time.Second {
		change()
	}
	kernel, build = 0, 0
	c0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		change()
	}
	b.StopTimer()
	// After ResetTimer: it drops metrics reported before it.
	b.ReportMetric(firstMean, "first-1s-ms/op")
	b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N)/1000, "cpu-ms/op")
	b.ReportMetric(float64(kernel.Microseconds())/float64(b.N)/1000, "kernel-ms/op")
	b.ReportMetric(float64(build.Microseconds())/float64(b.N)/1000, "build-ms/op")
	b.ReportMetric(float64(be.LastSync().Commands), "commands")
}

// BenchmarkFirstPacket times a TCP connect through a ClusterIP (the SYN
// crosses the rules, the SYN-ACK returns) with 100 and 30,000 Services
// programmed (BENCH_SERVICES replaces 30,000), from the node to a server in a
// second namespace.
func BenchmarkFirstPacket(b *testing.B) {
	sizes := append([]int{100}, benchSizes(b, 30000)...)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			node, srv := testNS(b), testNS(b)
			for _, args := range [][]string{
				{"ip", "-n", node, "link", "set", "lo", "up"},
				{"ip", "-n", srv, "link", "set", "lo", "up"},
				{"ip", "-n", node, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", srv},
				{"ip", "-n", node, "addr", "add", "10.201.0.1/24", "dev", "v0"},
				{"ip", "-n", srv, "addr", "add", "10.201.0.2/24", "dev", "v1"},
				{"ip", "-n", node, "link", "set", "v0", "up"},
				{"ip", "-n", srv, "link", "set", "v1", "up"},
				{"ip", "-n", node, "route", "add", "10.96.0.0/12", "dev", "v0"},
			} {
				if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
					b.Fatalf("%v: %v %s", args, err, out)
				}
			}
			ln := listenIn(b, srv, "10.201.0.2:8080")
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			st := scaleStateN(n, 10)
			// The measured Service is the last one, its endpoint the server.
			var target *core.ServicePort
			for _, p := range st.Ports {
				if target == nil || p.ClusterIP.Less(target.ClusterIP) == false {
					target = p
				}
			}
			target.ClusterEndpoints = []core.Endpoint{ep("10.201.0.2", 8080, false)}
			be := newBenchBackend(b, node)
			if err := be.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
				b.Fatal(err)
			}
			dst := netip.AddrPortFrom(target.ClusterIP, target.Port).String()
			err := netnsrun.Do(node, func() error {
				d := net.Dialer{Timeout: time.Second}
				for i := 0; i < 50; i++ { // warm up
					c, err := d.Dial("tcp", dst)
					if err != nil {
						return err
					}
					c.Close()
				}
				lat := make([]time.Duration, b.N)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					s := time.Now()
					c, err := d.Dial("tcp", dst)
					if err != nil {
						return err
					}
					lat[i] = time.Since(s)
					c.Close()
				}
				b.StopTimer()
				// Percentiles say more than the mean on a shared machine,
				// where a connect sometimes waits for a CPU.
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(lat[len(lat)/10].Nanoseconds())/1000, "p10-µs")
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1000, "p50-µs")
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		})
	}
}

func listenIn(b *testing.B, ns, addr string) net.Listener {
	var ln net.Listener
	if err := netnsrun.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	return ln
}
