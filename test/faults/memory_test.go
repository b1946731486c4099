//go:build faults && linux

package faults

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/harness"
)

// memoryLimit is the shipped DaemonSet's container memory limit
// (installer/linux/daemonset.yaml), which is also crossproxy's GOMEMLIMIT.
const memoryLimit = 512 << 20

// TestMemoryLimit (fault 3): 30,000 Services with an endpoint each arrive in
// a burst (written into etcd in transactions of 100, as fast as etcd takes
// them) while the proxy runs with the DaemonSet's GOMEMLIMIT (crossproxy)
// and a prober connects to a NodePort Service every 50 ms. The proxy's
// resident memory is sampled every 50 ms. The container limit itself is
// emulated: this machine's memory cgroups belong to the machinery that runs
// the session, so instead of the kernel's OOM killer the test SIGKILLs the
// proxy the moment its resident memory passes the limit, as the OOM killer
// would; the node must then keep its last rules and a restarted proxy must
// converge. Full form only.
func TestMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("full form only (make test-faults)")
	}
	for _, which := range proxies() {
		t.Run(which, func(t *testing.T) { memoryBurst(t, which) })
	}
}

// rss is the resident memory of pid, and its peak (VmRSS, VmHWM).
func rss(pid int) (cur, peak int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = v << 10
		case "VmHWM:":
			peak = v << 10
		}
	}
	return cur, peak
}

func memoryBurst(t *testing.T, which string) {
	const count = 30000
	n := newNode(t, harness.Options{})
	if which == crossproxy {
		n.env = []string{fmt.Sprintf("GOMEMLIMIT=%d", memoryLimit)}
	}
	p := n.start(which)
	probeSvc := n.service("probe", nodePort)
	n.createSlice(n.slice("probe", "probe-1", podAddrs...))
	n.lab.waitBackends(t, clusterAddr(probeSvc), 30*time.Second, podAddrs...)
	probe := n.lab.probe(50*time.Millisecond, nodePortAddr(probeSvc), clusterAddr(probeSvc))
	defer probe.stop()

	objs := bulkServices(n, "burst", count)
	pid := p.cmd.Process.Pid
	var peak atomic.Int64
	oom := make(chan time.Time, 1)
	stopSampling := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopSampling:
				return
			case <-p.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			cur, hwm := rss(pid)
			peak.Store(max(peak.Load(), hwm))
			if cur > memoryLimit {
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				oom <- time.Now()
				return
			}
		}
	}()
	full0, _ := p.metric(fullSyncs)
	start := time.Now()
	storeMany(t, n, objs)
	stored := time.Since(start)

	allAnswer := func() bool {
		ok, _ := bulkAnswers(n, count)
		return ok == 3
	}
	var outcome string
	deadline := time.Now().Add(10 * time.Minute)
	for {
		select {
		case at := <-oom:
			<-p.done
			tried, failed, first := probe.window(start, time.Now())
			// The node keeps its last rules; a restarted proxy (the
			// kubelet's restart) converges.
			restart := time.Now()
			n.start(which)
			for !allAnswer() {
				if time.Since(restart) > 10*time.Minute {
					t.Fatalf("%s: not converged 10 minutes after the restart", which)
				}
				time.Sleep(time.Second)
			}
			outcome = fmt.Sprintf("resident memory passed the 512 MiB limit %v after the burst began (peak sampled %d MiB): killed as the OOM killer would; "+
				"probe Service meanwhile %d tried, %d failed (%s); the restarted proxy converged in %v",
				at.Sub(start).Round(100*time.Millisecond), peak.Load()>>20, tried, failed, first, time.Since(restart).Round(100*time.Millisecond))
		default:
		}
		if outcome != "" {
			break
		}
		if allAnswer() {
			close(stopSampling)
			full1, _ := p.metric(fullSyncs)
			syncs, _ := p.metric("kubeproxy_sync_proxy_rules_duration_seconds_count")
			tried, failed, first := probe.window(start, time.Now())
			_, hwm := rss(pid)
			peak.Store(max(peak.Load(), hwm))
			outcome = fmt.Sprintf("not killed: peak resident memory %d MiB (limit 512 MiB); converged %v after the burst began; %v syncs in all, %v full during the burst; probe Service %d tried, %d failed (%s)",
				peak.Load()>>20, time.Since(start).Round(100*time.Millisecond), syncs, full1-full0, tried, failed, first)
			break
		}
		if len(oom) == 0 {
			p.alive(t, "during the burst (not by the emulated limit)")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the burst not proxied 10 minutes after it began", which)
		}
		time.Sleep(time.Second)
	}
	figure(t, "%s burst of %d Services (stored in %v): %s", which, count, stored.Round(100*time.Millisecond), outcome)
	if _, _, err := probe.window(start, time.Now(), podAddrs...); err != "" && which == crossproxy {
		t.Errorf("crossproxy: the probe Service failed during the burst: %s", err)
	}
}
