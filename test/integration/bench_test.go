//go:build integration && linux

package integration

import (
	"context"
	"fmt"
	"github.com/crossproxy/crossproxy/test/heapstat"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/kube"
	"github.com/crossproxy/crossproxy/test/harness"
)

// populate creates services Services in namespace ns, each with one
// EndpointSlice of perSlice endpoints, with workers parallel clients.
func populate(tb testing.TB, client kubernetes.Interface, ns string, services, perSlice int, node string) {
	tb.Helper()
	ctx := context.Background()
	if ns != "default" {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= services {
					return
				}
				if err := createServiceWithSlice(ctx, client, ns, i, perSlice, node); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
}

// realisticSlices makes populate write slices as the EndpointSlice
// controller does (targetRefs, managed-by label, owner reference); the scale
// benchmarks set it, the older ones keep their figures comparable.
var realisticSlices bool

func createServiceWithSlice(ctx context.Context, client kubernetes.Interface, ns string, i, perSlice int, node string) error {
	name := fmt.Sprintf("svc-%05d", i)
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
	}
	svcOut, err := client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create service %s: %w", name, err)
	}
	port, proto, pname := int32(8080), v1.ProtocolTCP, "http"
	s := &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Namespace: ns, Labels: map[string]string{discovery.LabelServiceName: name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	for j := range perSlice {
		ready := true
		n := i*perSlice + j
		nn := node
		if j%2 == 1 {
			nn = "other-node"
		}
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 100+n/65536, (n/256)%256, n%256)},
			Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &nn,
		})
		if realisticSlices {
			s.Endpoints[j].TargetRef = &v1.ObjectReference{Kind: "Pod", Namespace: ns, Name: fmt.Sprintf("%s-%d-7d9f8b6c5-x%04d", name, j, n%10000),
				UID: types.UID(fmt.Sprintf("5b1c8e3a-0000-4000-8000-%012d", n))}
		}
	}
	if realisticSlices {
		s.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
		s.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: svcOut.UID}}
	}
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create endpointslice %s: %w", s.Name, err)
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInformerPath10kServices100kEndpoints measures what crossproxy's
// API side costs for a large cluster, against the real apiserver: the
// initial list and watch of 10,000 Services and 10,000 EndpointSlices
// (100,000 endpoints) through platform/kube into core.Tracker, the first
// NodeState computed from it, and the heap both hold afterwards.
func BenchmarkInformerPath10kServices100kEndpoints(b *testing.B) {
	const services, perSlice = 10000, 10
	api := harness.New(b, harness.Options{ServiceCIDR: "10.96.0.0/16"})
	admin := api.AdminConfig()
	admin.QPS, admin.Burst = 5000, 5000
	adminClient := kubernetes.NewForConfigOrDie(admin)
	node := "bench-node"
	if _, err := adminClient.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	populate(b, adminClient, "bench", services, perSlice, node)
	b.Logf("populated %d Services / %d endpoints in %v", services, services*perSlice, time.Since(start).Round(time.Millisecond))

	cfg := api.AdminConfig()
	kube.UseProtobuf(cfg)
	client := kubernetes.NewForConfigOrDie(cfg)
	b.ResetTimer()
	for range b.N {
		heap0, cpu0 := heapstat.Inuse(), cpuTime()
		tracker, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		src := &kube.Source{Client: client, NodeName: node, Sink: tracker}
		done := make(chan error, 1)
		t0 := time.Now()
		go func() { done <- src.Run(ctx) }()
		<-src.Synced()
		synced := time.Since(t0)
		cpuSync := cpuTime() - cpu0
		t1 := time.Now()
		st, _ := tracker.Snapshot()
		compute := time.Since(t1)
		cpuTotal := cpuTime() - cpu0
		heap := heapstat.Inuse() - heap0
		eps := 0
		for _, p := range st.Ports {
			eps += len(p.ClusterEndpoints)
		}
		if len(st.Ports) < services || eps < services*perSlice {
			b.Fatalf("state has %d ports / %d endpoints, want >= %d / %d", len(st.Ports), eps, services, services*perSlice)
		}
		b.ReportMetric(synced.Seconds(), "list-watch-s")
		b.ReportMetric(compute.Seconds(), "first-state-s")
		b.ReportMetric(cpuSync.Seconds(), "cpu-list-watch-s")
		b.ReportMetric(cpuTotal.Seconds(), "cpu-total-s")
		b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
		b.Logf("synced in %v (cpu %v), first NodeState (%d ports, %d endpoints) in %v; cpu total %v; heap held %.1f MiB",
			synced.Round(time.Millisecond), cpuSync.Round(time.Millisecond), len(st.Ports), eps, compute.Round(time.Millisecond),
			cpuTotal.Round(time.Millisecond), float64(heap)/(1<<20))
		runtime.KeepAlive(st)
		cancel()
		<-done
	}
}

// BenchmarkNetworkProgrammingLatency measures API change → rules in the
// kernel: crossproxy (real process, nftables in the lab's node namespace,
// default min-sync-period 1s unless BENCH_MIN_SYNC_PERIOD is set) follows 1,000
// Services while a background stream updates EndpointSlices at ~20/s; each
// measured change moves one Service to another backend and is timed until a
// connection from the client namespace reaches the new backend.
func BenchmarkNetworkProgrammingLatency(b *testing.B) {
	e := newEnv(b)
	cfg := e.api.AdminConfig()
	cfg.QPS, cfg.Burst = 2000, 2000
	client := kubernetes.NewForConfigOrDie(cfg)
	populate(b, client, "bench", 1000, 4, e.node)
	minSync := "1s"
	if v := os.Getenv("BENCH_MIN_SYNC_PERIOD"); v != "" {
		minSync = v
	}
	e.startProxy("--min-sync-period", minSync, "--sync-period", "30s", "--log-level", "info")

	web := e.service("probe")
	slice := e.createSlice(e.endpointSlice("probe", "probe-1", backendAddrs[0]))
	e.lab.waitBackends(b, addr(web), backendAddrs[0])

	// Background churn: flip endpoint readiness of the bench Services.
	ctx, cancel := context.WithCancel(context.Background())
	var churn sync.WaitGroup
	var churned atomic.Int64
	churn.Add(1)
	go func() {
		defer churn.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			name := fmt.Sprintf("svc-%05d-1", i%1000)
			s, err := client.DiscoveryV1().EndpointSlices("bench").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				continue
			}
			r := i%3 != 0
			s.Endpoints[0].Conditions.Ready = &r
			if _, err := client.DiscoveryV1().EndpointSlices("bench").Update(ctx, s, metav1.UpdateOptions{}); err == nil {
				churned.Add(1)
			}
		}
	}()
	defer func() { cancel(); churn.Wait() }()

	cpu0, wall0 := procCPU(b, e.proxy.cmd.Process.Pid), time.Now()
	changes := 100
	if b.N > changes {
		changes = b.N
	}
	var lat []time.Duration
	cur := 0
	b.ResetTimer()
	for i := range changes {
		next := (cur + 1) % len(backendAddrs)
		slice.Endpoints = e.endpointSlice("probe", "probe-1", backendAddrs[next]).Endpoints
		slice.Annotations[v1.EndpointsLastChangeTriggerTime] = time.Now().UTC().Format(time.RFC3339Nano)
		t0 := time.Now()
		slice = e.updateSlice(slice)
		deadline := t0.Add(20 * time.Second)
		for {
			got, err := e.lab.backendOf(addr(web))
			if err == nil && got == backendAddrs[next] {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("change %d: backend %s not reached after 20s (got %q, %v)", i, backendAddrs[next], got, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(t0))
		cur = next
		time.Sleep(time.Duration(100+i*37%300) * time.Millisecond)
	}
	b.StopTimer()
	cpuShare := (procCPU(b, e.proxy.cmd.Process.Pid) - cpu0).Seconds() / time.Since(wall0).Seconds()
	b.ReportMetric(cpuShare*100, "proxy-cpu-%")
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	b.ReportMetric(p(0.5).Seconds()*1000, "p50-ms")
	b.ReportMetric(p(0.99).Seconds()*1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
	b.Logf("min-sync-period %s, %d measured changes, %d background slice updates: p50 %v p99 %v max %v; crossproxy used %.1f%% of one core",
		minSync, len(lat), churned.Load(), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), cpuShare*100)
	if v, ok := metric(b, e.mport, "kubeproxy_network_programming_duration_seconds_count"); ok {
		sum, _ := metric(b, e.mport, "kubeproxy_network_programming_duration_seconds_sum")
		b.Logf("crossproxy's own network_programming_duration_seconds: %v observations, mean %.3fs", v, sum/max(v, 1))
	}
}

// procCPU is the user+system CPU time a process has used (/proc/PID/stat).
func procCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	return procStatTime(tb, pid, 2)
}

// procStatTime sums the first n CPU-time fields of /proc/PID/stat (utime,
// stime, cutime, cstime: the 14th to 17th fields of the line, the 11th to
// 14th after the command name, which is in parentheses).
func procStatTime(tb testing.TB, pid, n int) time.Duration {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatalf("read process stat: %v", err)
	}
	rest := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ticks int64
	for _, f := range rest[11 : 11+n] {
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	const userHZ = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / userHZ
}
