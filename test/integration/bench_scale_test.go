//go:build integration && linux

package integration

import (
	"context"
	"fmt"
	"github.com/crossproxy/crossproxy/test/heapstat"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/kube"
	nft "github.com/crossproxy/crossproxy/platform_linux"
	"github.com/crossproxy/crossproxy/test/harness"
)

// scaleServices is the number of Services of the scale benchmarks
// (BENCH_SERVICES, default 10,000), each with one slice of 10 endpoints.
func scaleServices(tb testing.TB) int {
	n := 10000
	if v := os.Getenv("BENCH_SERVICES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			tb.Fatalf("BENCH_SERVICES=%q: want a number >= 100", v)
		}
	}
	return n
}

// newScaleEnv is an apiserver whose Service range holds n Services, the lab,
// this node, and n Services of 10 endpoints each (half on this node), whose
// slices look like the EndpointSlice controller's: each endpoint has its
// pod's targetRef and the slice the managed-by label and an owner reference.
func newScaleEnv(b *testing.B, n int) *env {
	b.Helper()
	api := harness.New(b, harness.Options{ServiceCIDR: "10.96.0.0/12"})
	e := &env{t: b, api: api, lab: newLab(b), ctx: context.Background(), user: harness.AdminUser}
	e.admin = kubernetes.NewForConfigOrDie(api.AdminConfig())
	e.node = "xpk-node-" + e.lab.ID
	e.createNode()
	e.lab.serveBackends(b, 8080)
	cfg := api.AdminConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	start := time.Now()
	realisticSlices = true
	b.Cleanup(func() { realisticSlices = false })
	populate(b, kubernetes.NewForConfigOrDie(cfg), "bench", n, 10, e.node)
	b.Logf("populated %d Services / %d endpoints in %v", n, n*10, time.Since(start).Round(time.Second))
	return e
}

// loadavg is /proc/loadavg's first three fields, recorded with each figure.
func loadavg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// procStatusKB is a "VmHWM"/"VmRSS" line of /proc/PID/status in KiB.
func procStatusKB(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	v, ok := statusKB(pid, field)
	if !ok {
		tb.Fatalf("no %s in /proc/%d/status", field, pid)
	}
	return v
}

// lastLiveHeapMB is the live heap after the last garbage collection the
// process logged with GODEBUG=gctrace=1 ("A->B->C MB": C is live).
func lastLiveHeapMB(log string) (float64, int) {
	live, gcs := -1.0, 0
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		i := strings.Index(line, " MB, ")
		if i < 0 {
			continue
		}
		j := strings.LastIndex(line[:i], "->")
		if v, err := strconv.ParseFloat(line[j+2:i], 64); err == nil {
			live, gcs = v, gcs+1
		}
	}
	return live, gcs
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// moveEndpoint changes the first endpoint address of Service i's slice.
func moveEndpoint(b *testing.B, client kubernetes.Interface, i, round int) {
	b.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("svc-%05d-1", i)
	s, err := client.DiscoveryV1().EndpointSlices("bench").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		b.Fatalf("get %s: %v", name, err)
	}
	s.Endpoints[0].Addresses = []string{fmt.Sprintf("10.250.%d.%d", round/250, round%250+1)}
	if _, err := client.DiscoveryV1().EndpointSlices("bench").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		b.Fatalf("update %s: %v", name, err)
	}
}

// BenchmarkScale populates the apiserver once with BENCH_SERVICES Services x 10
// endpoints and measures crossproxy against it: the real binary (scaleMemory;
// binary-shipped with GOMEMLIMIT as the shipped DaemonSet sets it),
// the same pipeline in this process with a heap breakdown (scaleHeap), and
// the real binary under a stream of endpoint updates (scaleStream). The
// kube-proxy and stream-kube-proxy runs measure kube-proxy v1.37.2 in
// nftables mode the same way, as issue 12's reference. Every run starts from
// a node namespace without either proxy's tables and leaves none behind.
// -benchtime 1x: one run of each; select one with -bench 'Scale/^stream$'.
func BenchmarkScale(b *testing.B) {
	runtime.MemProfileRate = 4096
	n := scaleServices(b)
	e := newScaleEnv(b, n)
	b.ResetTimer()
	for range b.N {
		b.Run("binary", func(b *testing.B) {
			e.t = b
			scaleMemory(b, e, n, proxyCrossproxy, os.Getenv("BENCH_PROXY_ENV"))
		})
		b.Run("binary-shipped", func(b *testing.B) {
			e.t = b
			scaleMemory(b, e, n, proxyCrossproxy, fmt.Sprintf("GOMEMLIMIT=%d", shippedMemoryLimit(b)))
		})
		b.Run("kube-proxy", func(b *testing.B) { e.t = b; scaleMemory(b, e, n, proxyKubeProxy, "") })
		b.Run("heap", func(b *testing.B) { e.t = b; requireNoProxyTables(b, e); scaleHeap(b, e, n) })
		b.Run("stream", func(b *testing.B) { e.t = b; scaleStream(b, e, n, proxyCrossproxy) })
		b.Run("stream-kube-proxy", func(b *testing.B) { e.t = b; scaleStream(b, e, n, proxyKubeProxy) })
	}
}

// scaleMemory runs the real proxy binary (crossproxy or kube-proxy, see
// startScaleProxy) against the real apiserver holding BENCH_SERVICES Services
// x 10 endpoints, programming the lab's node namespace: start-up, first full
// sync, then 100 endpoint changes one at a time. It reports the process's
// peak RSS (VmHWM), the full and mean partial sync durations (the proxy's
// own kube-proxy histograms), its CPU time (with its children's: kube-proxy's
// nft runs), its RSS at the end, the sampled peak RSS of its children and its
// live heap after the last GC (GODEBUG=gctrace=1). binEnv ("KEY=VALUE ...")
// is added to the binary's environment.
func scaleMemory(b *testing.B, e *env, n int, proxyName, binEnv string) {
	cfg := e.api.AdminConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	client := kubernetes.NewForConfigOrDie(cfg)
	b.Setenv("GODEBUG", "gctrace=1")
	setBinaryEnv(b, binEnv)
	round := scaleRuns * 100
	scaleRuns++
	const (
		fullCount    = "kubeproxy_sync_full_proxy_rules_duration_seconds_count"
		fullSum      = "kubeproxy_sync_full_proxy_rules_duration_seconds_sum"
		partialCount = "kubeproxy_sync_partial_proxy_rules_duration_seconds_count"
		partialSum   = "kubeproxy_sync_partial_proxy_rules_duration_seconds_sum"
	)
	load0 := loadavg()
	t0 := time.Now()
	p := startScaleProxy(b, e, proxyName, "50ms")
	if !p.waitFirstSync(b) {
		return
	}
	ready := time.Since(t0)
	full := p.value(b, fullSum)
	cpuReady := procCPUWithChildren(b, p.pid)
	hwmSync := procStatusKB(b, p.pid, "VmHWM")

	c0, s0 := p.value(b, partialCount), p.value(b, partialSum)
	cpu1 := procCPUWithChildren(b, p.pid)
	const changes = 100
	for i := range changes {
		cur := p.value(b, partialCount)
		moveEndpoint(b, client, i*(n/changes), round+i)
		p.mustWait(b, partialCount, cur+1, time.Minute)
	}
	c1, s1 := p.value(b, partialCount), p.value(b, partialSum)
	fulls := p.value(b, fullCount)
	cpuChanges := procCPUWithChildren(b, p.pid) - cpu1
	hwm := procStatusKB(b, p.pid, "VmHWM")
	rss := procStatusKB(b, p.pid, "VmRSS")
	p.stop()
	live, gcs := lastLiveHeapMB(p.p.logText())

	partial := (s1 - s0) / math.Max(c1-c0, 1)
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(hwmSync)/1024, "peak-rss-first-sync-MiB")
	b.ReportMetric(float64(rss)/1024, "rss-end-MiB")
	b.ReportMetric(full, "full-sync-s")
	b.ReportMetric(partial*1000, "partial-sync-ms")
	b.ReportMetric(cpuReady.Seconds(), "cpu-to-ready-s")
	b.ReportMetric(cpuChanges.Seconds(), "cpu-changes-s")
	b.ReportMetric(p.childPeakMiB(), "child-peak-rss-MiB")
	b.ReportMetric(live, "live-heap-MB")
	b.Logf("%s, %d Services (binary env %q): ready (list + first full sync) %v, full sync %.2fs, cpu to ready %v; %d partial syncs (%d full in all) for %d changes, mean %.2f ms, cpu %v; "+
		"peak RSS %.0f MiB (%.0f after first sync), RSS at end %.0f MiB, children's sampled peak RSS %.0f MiB, live heap after last of %d GCs %.0f MB; load %s -> %s",
		p.name, n, binEnv, ready.Round(time.Millisecond), full, cpuReady.Round(time.Millisecond), int(c1-c0), int(fulls), changes, partial*1000, cpuChanges.Round(time.Millisecond),
		float64(hwm)/1024, float64(hwmSync)/1024, float64(rss)/1024, p.childPeakMiB(), gcs, live, load0, loadavg())
}

// setBinaryEnv sets the environment variables of env ("KEY=VALUE ..."),
// which the crossproxy binary the benchmark starts inherits: BENCH_PROXY_ENV
// for the binary sub-benchmark. The benchmark process itself read its own
// GOMEMLIMIT when it started, so the in-process figures are unaffected.
func setBinaryEnv(b *testing.B, env string) {
	for _, kv := range strings.Fields(env) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			b.Fatalf("binary environment: %q is not KEY=VALUE", kv)
		}
		b.Setenv(k, val)
	}
}

// scaleRuns counts scaleMemory runs, so each run's endpoint changes write
// new addresses: an update that changes nothing makes no watch event.
var scaleRuns int

// shippedMemoryLimit is the memory limit of the crossproxy container in
// installer/linux/daemonset.yaml, in bytes: the DaemonSet passes it to the
// binary as GOMEMLIMIT.
func shippedMemoryLimit(b testing.TB) int64 {
	data, err := os.ReadFile(filepath.Join("..", "..", "installer", "linux", "daemonset.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		b.Fatalf("daemonset.yaml: %v", err)
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok && c.Name == "crossproxy" {
			return q.Value()
		}
	}
	b.Fatal("daemonset.yaml: no memory limit for the crossproxy container")
	return 0
}

// scaleHeap runs crossproxy's pipeline in the benchmark process
// (kube.Source -> core.Tracker -> platform.Runner -> nftables backend in the
// lab's node namespace) against the same kind of apiserver, and after the
// first full sync reports the heap it holds (after GC, minus what the process
// held before) with a breakdown by owner from a heap profile: informer
// caches, tracker, NodeState, the applied model, the netlink batch.
func scaleHeap(b *testing.B, e *env, n int) {
	cfg := e.api.AdminConfig()
	kube.UseProtobuf(cfg)
	client := kubernetes.NewForConfigOrDie(cfg)
	{
		runtime.GC()
		debug.FreeOSMemory()
		before := heapstat.Inuse()
		base := heapProfile()
		log := logrus.New()
		log.SetLevel(logrus.WarnLevel)
		tracker, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
		if err != nil {
			b.Fatal(err)
		}
		backend, err := nft.New(platform.BackendConfig{NetNSPath: e.lab.NetNS(), TableName: "crossproxy"}, log)
		if err != nil {
			b.Fatal(err)
		}
		runner := platform.NewRunner(platform.RunnerConfig{MinSyncPeriod: 50 * time.Millisecond, SyncPeriod: time.Hour, FullSyncPeriod: time.Hour}, tracker, backend, log)
		synced := make(chan platform.SyncResult, 16)
		runner.OnSync(func(r platform.SyncResult) {
			select {
			case synced <- platform.SyncResult{Full: r.Full, Err: r.Err, Duration: r.Duration}:
			default:
			}
		})
		src := &kube.Source{Client: client, NodeName: e.node, Sink: tracker, OnChange: runner.Trigger, Log: log}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		go func() { done <- src.Run(ctx) }()
		go func() { done <- runner.Run(ctx) }()
		r := <-synced
		if r.Err != nil || !r.Full {
			b.Fatalf("first sync: full %v, %v", r.Full, r.Err)
		}
		held := heapstat.Inuse() - before
		prof := heapProfile()
		if path := os.Getenv("BENCH_SCALE_HEAPPROFILE"); path != "" {
			heapstat.WriteProfile(b, path)
		}
		b.ReportMetric(float64(held)/(1<<20), "steady-heap-MiB")
		b.Logf("%d Services: first full sync %v; heap held after GC %.1f MiB (load %s)", n, r.Duration.Round(time.Millisecond), float64(held)/(1<<20), loadavg())
		b.Logf("heap breakdown (in use, sampled at 4 KiB):\n%s", prof.minus(base).table())
		cancel()
		<-done
		<-done
		_ = backend.Cleanup(context.Background())
		_ = backend.Close()
	}
}

// heapOwners are the owners of the breakdown, tried in order against the
// functions of each allocation's stack (innermost first): the first owner
// with a matching frame gets the bytes.
var heapOwners = []struct{ name, match string }{
	{"netlink batch and encoder cache", "platform_linux.(*ruleEncoder)|platform_linux.(*batchConn)|platform_linux.captureMessages|google/nftables"},
	{"applied model (nft ruleset kept by the backend)", "platform_linux."},
	{"NodeState (core snapshot)", "core.(*Tracker).snapshot|core.(*Tracker).Snapshot"},
	{"tracker (core upserts)", "core.(*Tracker)"},
	{"informer caches (decoded objects, stores)", "k8s.io/"},
}

type heapBreakdown map[string]float64

// heapProfile sums the in-use bytes of the heap profile by owner, scaled for
// sampling as pprof does.
func heapProfile() heapBreakdown {
	// The profile describes the heap as of the last completed cycle but one.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		n, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:n]
			break
		}
		recs = make([]runtime.MemProfileRecord, n+100)
	}
	rate := float64(runtime.MemProfileRate)
	out := heapBreakdown{}
	for _, r := range recs {
		objs, bytes := r.InUseObjects(), r.InUseBytes()
		if objs == 0 || bytes == 0 {
			continue
		}
		avg := float64(bytes) / float64(objs)
		scaled := float64(bytes) / (1 - math.Exp(-avg/rate))
		out[ownerOf(r.Stack())] += scaled
	}
	return out
}

func ownerOf(stack []uintptr) string {
	frames := runtime.CallersFrames(stack)
	var names []string
	for {
		f, more := frames.Next()
		names = append(names, f.Function)
		if !more {
			break
		}
	}
	for _, o := range heapOwners {
		for _, alt := range strings.Split(o.match, "|") {
			for _, fn := range names {
				if strings.Contains(fn, alt) {
					return o.name
				}
			}
		}
	}
	return "other"
}

func (h heapBreakdown) minus(base heapBreakdown) heapBreakdown {
	out := heapBreakdown{}
	for k, v := range h {
		out[k] = v - base[k]
	}
	return out
}

func (h heapBreakdown) table() string {
	keys := make([]string, 0, len(h))
	total := 0.0
	for k, v := range h {
		keys = append(keys, k)
		total += v
	}
	slices.SortFunc(keys, func(a, b string) int { return int(h[b] - h[a]) })
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "| %s | %.1f MiB |\n", k, h[k]/(1<<20))
	}
	fmt.Fprintf(&sb, "| total | %.1f MiB |\n", total/(1<<20))
	return sb.String()
}

// refuseOldEndpoints makes connections to the populated endpoints (addresses
// in 10.100.0.0/14 and scaleMemory's 10.250.0.0/16, which no namespace has)
// fail at once with a TCP reset from the node, instead of their SYNs being
// dropped: without a route the node answers with ICMP errors, which the
// kernel rate-limits, so most probes of a Service not yet moved would wait
// out their dial timeout and the latency figures would be multiples of it.
// The rule is in its own table in the lab's node namespace, removed with it.
func refuseOldEndpoints(b *testing.B, l *lab) {
	b.Helper()
	for _, cidr := range []string{"10.100.0.0/14", "10.250.0.0/16"} {
		run(b, "ip", "-n", l.Node, "route", "replace", cidr, "dev", l.PodLink())
	}
	// Declaring the table and deleting it first makes a second stream run
	// (stream-kube-proxy after stream) replace the rule instead of adding it.
	rules := `table ip xpk_bench
delete table ip xpk_bench
table ip xpk_bench {
	chain forward {
		type filter hook forward priority 0;
		ip daddr { 10.100.0.0/14, 10.250.0.0/16 } meta l4proto tcp reject with tcp reset
	}
}
`
	f, err := os.CreateTemp(b.TempDir(), "refuse-*.nft")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f.WriteString(rules); err != nil {
		b.Fatal(err)
	}
	f.Close()
	run(b, "ip", "netns", "exec", l.Node, "nft", "-f", f.Name())
}

// restoreSlices writes the listed contents back over the slices the stream
// changed (written, nil where an update failed), 16 at a time.
func restoreSlices(b *testing.B, client kubernetes.Interface, listed []discovery.EndpointSlice, byName map[string]int, written []*discovery.EndpointSlice) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var mu sync.Mutex
	var failed []string
	for _, w := range written {
		if w == nil {
			continue
		}
		orig := listed[byName[w.Name]].DeepCopy()
		orig.ResourceVersion = w.ResourceVersion
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := client.DiscoveryV1().EndpointSlices("bench").Update(context.Background(), orig, metav1.UpdateOptions{}); err != nil {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %v", orig.Name, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		b.Errorf("restore %d slices after the stream: %s", len(failed), strings.Join(failed[:min(len(failed), 3)], "; "))
	}
}

// Stream parameters of scaleStream: the 50 endpoint updates per
// second for 60 seconds (BENCH_STREAM_RATE and BENCH_STREAM_SECONDS change them).
const (
	streamRate    = 50
	streamSeconds = 60
)

func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

// scaleStream runs the real binary against the populated apiserver and, once
// its first full sync is done, writes a stream of EndpointSlice updates at a
// fixed rate: each moves one Service (a different one each time) from its
// ten endpoints to one of the lab's real backends. Every update is timed
// from just before the API write until a connection from the client
// namespace to the Service's ClusterIP is answered by the new backend: the
// network programming latency, end to end, with the Service's old endpoints
// (addresses nobody routes) unreachable until then. It reports p50/p99/max of
// that latency, the proxy's CPU seconds over the stream, its syncs, and its
// RSS at the end. The proxy (crossproxy or kube-proxy, see startScaleProxy)
// runs with --min-sync-period 1s, both proxies' default, unless BENCH_MIN_SYNC_PERIOD
// is set.
func scaleStream(b *testing.B, e *env, n int, proxyName string) {
	rate := envInt(b, "BENCH_STREAM_RATE", streamRate)
	seconds := envInt(b, "BENCH_STREAM_SECONDS", streamSeconds)
	updates := rate * seconds
	if updates > n {
		b.Fatalf("%d updates need as many Services, have %d", updates, n)
	}
	cfg := e.api.AdminConfig()
	cfg.QPS, cfg.Burst = 1000, 1000
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()

	// The Services' addresses and their slices as they are now: each update
	// writes a listed slice once, so it needs no read first.
	svcs, err := client.CoreV1().Services("bench").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatalf("list services: %v", err)
	}
	clusterIP := make(map[string]string, len(svcs.Items))
	for _, s := range svcs.Items {
		clusterIP[s.Name] = s.Spec.ClusterIP
	}
	sl, err := client.DiscoveryV1().EndpointSlices("bench").List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatalf("list endpointslices: %v", err)
	}
	byName := make(map[string]int, len(sl.Items))
	for i, s := range sl.Items {
		byName[s.Name] = i
	}
	stride := n / updates
	svcs = nil

	refuseOldEndpoints(b, e.lab)
	// written[k] is update k's slice as the apiserver stored it; after the
	// run (registered before the proxy starts, so the proxy is stopped
	// first) each gets its listed endpoints back, so that every run, of
	// either proxy, starts from the same 10-endpoint Services.
	written := make([]*discovery.EndpointSlice, updates)
	b.Cleanup(func() { restoreSlices(b, client, sl.Items, byName, written) })

	minSync := "1s"
	if v := os.Getenv("BENCH_MIN_SYNC_PERIOD"); v != "" {
		minSync = v
	}
	b.Setenv("GODEBUG", "gctrace=1")
	load0 := loadavg()
	p := startScaleProxy(b, e, proxyName, minSync)
	if !p.waitFirstSync(b) {
		return
	}
	partial0 := p.value(b, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count")
	cpu0 := procCPUWithChildren(b, p.pid)
	loadStart := loadavg()

	lat := make([]time.Duration, updates)
	errs := make(chan error, updates)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	wall0 := time.Now()
	for k := range updates {
		<-tick.C
		name := fmt.Sprintf("svc-%05d", k*stride)
		idx, ok := byName[name+"-1"]
		ip := clusterIP[name]
		if !ok || ip == "" {
			b.Fatalf("%s: no slice or ClusterIP", name)
		}
		want := backendAddrs[k%len(backendAddrs)]
		s := sl.Items[idx].DeepCopy()
		ready, node := true, e.node
		s.Endpoints = []discovery.Endpoint{{Addresses: []string{want}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node}}
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			s.Annotations[v1.EndpointsLastChangeTriggerTime] = t0.UTC().Format(time.RFC3339Nano)
			out, err := client.DiscoveryV1().EndpointSlices("bench").Update(ctx, s, metav1.UpdateOptions{})
			if err != nil {
				errs <- fmt.Errorf("update %s: %w", s.Name, err)
				return
			}
			written[k] = out
			target := net.JoinHostPort(ip, "80")
			for {
				got, _ := e.lab.backendOf(target)
				el := time.Since(t0)
				if got == want {
					lat[k] = el
					return
				}
				if el > time.Minute {
					errs <- fmt.Errorf("%s (%s): backend %s not reached after %v (got %q)", name, target, want, el.Round(time.Millisecond), got)
					return
				}
				// Probe often at first, then at 5% of the time waited so
				// far: the figure's resolution stays within 5% without
				// dozens of pending updates flooding the node.
				time.Sleep(min(max(el/20, 5*time.Millisecond), 25*time.Millisecond))
			}
		}()
	}
	tick.Stop()
	writeWall := time.Since(wall0)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	wall := time.Since(wall0)
	cpu := procCPUWithChildren(b, p.pid) - cpu0
	partial1 := p.value(b, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count")
	npCount := p.value(b, "kubeproxy_network_programming_duration_seconds_count")
	npSum := p.value(b, "kubeproxy_network_programming_duration_seconds_sum")
	rss := procStatusKB(b, p.pid, "VmRSS")
	hwm := procStatusKB(b, p.pid, "VmHWM")
	p.stop()
	live, gcs := lastLiveHeapMB(p.p.logText())

	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	b.ReportMetric(q(0.5).Seconds()*1000, "p50-ms")
	b.ReportMetric(q(0.99).Seconds()*1000, "p99-ms")
	b.ReportMetric(lat[len(lat)-1].Seconds()*1000, "max-ms")
	b.ReportMetric(cpu.Seconds(), "proxy-cpu-s")
	b.ReportMetric(float64(rss)/1024, "rss-end-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	b.Logf("%s, %d Services, min-sync-period %s: %d updates at %d/s (written in %v), all seen on the new backend after %v; "+
		"latency p50 %v p90 %v p99 %v max %v; proxy: %d partial syncs, cpu %v over the stream (%.1f%% of one core), "+
		"RSS at end %.0f MiB, peak %.0f MiB, live heap after last of %d GCs %.0f MB; own network_programming mean %.3fs over %v; "+
		"load %s (start) -> %s (stream start) -> %s",
		p.name, n, minSync, updates, rate, writeWall.Round(time.Millisecond), wall.Round(time.Millisecond),
		q(0.5).Round(time.Millisecond), q(0.9).Round(time.Millisecond), q(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
		int(partial1-partial0), cpu.Round(10*time.Millisecond), 100*cpu.Seconds()/wall.Seconds(),
		float64(rss)/1024, float64(hwm)/1024, gcs, live, npSum/max(npCount, 1), npCount, load0, loadStart, loadavg())
}
