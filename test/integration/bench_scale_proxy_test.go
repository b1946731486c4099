//go:build integration && linux

package integration

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/harness"
	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// The proxies the scale benchmarks compare: crossproxy, and kube-proxy
// v1.37.2 in nftables mode as the reference issue 12 asks for.
const (
	proxyCrossproxy = "crossproxy"
	proxyKubeProxy  = "kube-proxy"
)

// firstSyncCap is how long a scale run waits for kube-proxy's first full
// sync: issue 12 lets a run stop it after 10 minutes and say so, instead of
// failing the benchmark. crossproxy gets the same time and fails past it.
const firstSyncCap = 10 * time.Minute

// scaleProxy is the proxy process a scale run measures, crossproxy or
// kube-proxy, read the same way: its process for /proc and its /metrics,
// whose kube-proxy-named series crossproxy writes without labels and
// kube-proxy with an ip_family label.
type scaleProxy struct {
	name   string
	p      *proxy
	pid    int
	labels string
	scrape func() (string, error)
	// reference marks kube-proxy: a first sync past firstSyncCap is
	// reported, not a failure.
	reference bool

	mu sync.Mutex
	// childPeakKB is the largest VmHWM seen among the proxy's children (the
	// nft processes kube-proxy runs), sampled until stopSampling.
	childPeakKB  int64
	stopSampling func()
}

// metric is series (a kube-proxy histogram's _count or _sum) from /metrics.
func (s *scaleProxy) metric(b *testing.B, series string) (float64, bool) {
	b.Helper()
	body, err := s.scrape()
	if err != nil {
		b.Fatalf("%s metrics: %v", s.name, err)
	}
	want := series + s.labels + " "
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, want); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// value is metric with 0 for a series not (yet) written.
func (s *scaleProxy) value(b *testing.B, series string) float64 {
	v, _ := s.metric(b, series)
	return v
}

// wait polls /metrics until series reaches at least want and reports
// whether it did within timeout; a proxy that exits meanwhile fails the
// benchmark with its log.
func (s *scaleProxy) wait(b *testing.B, series string, want float64, timeout time.Duration) bool {
	b.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.p.done:
			b.Fatalf("%s exited (%v) while waiting for %s\n%s", s.name, s.p.err, series, tail(s.p.logText(), 3000))
		default:
		}
		// The metrics server starts with the proxy: until it listens, wait.
		if _, err := s.scrape(); err == nil {
			if v, ok := s.metric(b, series); ok && v >= want {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustWait is wait that fails the benchmark on a timeout.
func (s *scaleProxy) mustWait(b *testing.B, series string, want float64, timeout time.Duration) {
	b.Helper()
	if !s.wait(b, series, want, timeout) {
		b.Fatalf("%s: %s did not reach %v within %v\n%s", s.name, series, want, timeout, tail(s.p.logText(), 3000))
	}
}

// waitFirstSync waits for the first full sync and reports whether it came
// within firstSyncCap. kube-proxy past the cap is stopped, logged and
// reported as the metric first-sync-unfinished; crossproxy fails.
func (s *scaleProxy) waitFirstSync(b *testing.B) bool {
	b.Helper()
	if s.wait(b, "kubeproxy_sync_full_proxy_rules_duration_seconds_count", 1, firstSyncCap) {
		return true
	}
	if !s.reference {
		b.Fatalf("%s: no full sync within %v\n%s", s.name, firstSyncCap, tail(s.p.logText(), 3000))
	}
	cpu := procCPUWithChildren(b, s.pid)
	hwm := procStatusKB(b, s.pid, "VmHWM")
	s.stop()
	b.ReportMetric(1, "first-sync-unfinished")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	b.Logf("%s: first full sync not finished after %v: stopped (issue 12 allows a 10-minute cap); cpu %v, peak RSS %.0f MiB, load %s\nlog tail:\n%s",
		s.name, firstSyncCap, cpu.Round(time.Millisecond), float64(hwm)/1024, loadavg(), tail(s.p.logText(), 1500))
	return false
}

// stop stops the process and the sampling of its children.
func (s *scaleProxy) stop() {
	s.stopSampling()
	s.p.stop()
}

// childPeakMiB is the largest sampled RSS of a child process in MiB.
func (s *scaleProxy) childPeakMiB() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return float64(s.childPeakKB) / 1024
}

// sampleChildren records, every 20 ms, the peak RSS of the proxy's child
// processes: kube-proxy's nftables mode writes each sync through an nft
// process whose memory VmHWM of kube-proxy does not include. A sample misses
// short children; the long ones of a big sync are the ones that matter.
func (s *scaleProxy) sampleChildren() {
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	s.stopSampling = func() { once.Do(func() { close(done) }); wg.Wait() }
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for _, child := range childPIDs(s.pid) {
				if kb, ok := statusKB(child, "VmHWM"); ok {
					s.mu.Lock()
					s.childPeakKB = max(s.childPeakKB, kb)
					s.mu.Unlock()
				}
			}
		}
	}()
}

// childPIDs lists the children of every thread of pid.
func childPIDs(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, w := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(w); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// statusKB is procStatusKB for a process that may be gone.
func statusKB(pid int, field string) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// procCPUWithChildren is procCPU plus the CPU of the children the process
// has waited for (cutime and cstime): the nft runs are part of kube-proxy's
// work; crossproxy has no children, so its figure is procCPU's.
func procCPUWithChildren(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	return procStatTime(tb, pid, 4)
}

// startScaleProxy starts proxy (proxyCrossproxy or proxyKubeProxy) against
// the env's apiserver programming the lab's node namespace, with
// --min-sync-period minSync, a 30 s retry period and full syncs at most
// hourly (kube-proxy's fixed full-sync period), after checking that the
// namespace holds neither proxy's tables; both tables are removed again
// when the sub-benchmark ends, also on failure, so runs never overlap.
func startScaleProxy(b *testing.B, e *env, proxyName, minSync string) *scaleProxy {
	b.Helper()
	requireNoProxyTables(b, e)
	b.Cleanup(func() { removeProxyTables(b, e) })
	var s *scaleProxy
	switch proxyName {
	case proxyCrossproxy:
		p := e.startProxy("--min-sync-period", minSync, "--sync-period", "30s", "--full-sync-period", "1h", "--log-level", "info")
		mport := e.mport
		s = &scaleProxy{name: proxyName, p: p, pid: p.cmd.Process.Pid, scrape: func() (string, error) {
			_, body, _, err := httpGet("http://" + mport + "/metrics")
			return body, err
		}}
	case proxyKubeProxy:
		s = startKubeProxy(b, e, minSync)
	default:
		b.Fatalf("unknown proxy %q", proxyName)
	}
	s.sampleChildren()
	b.Cleanup(s.stop)
	return s
}

// Where kube-proxy serves in the node namespace: its loopback is the lab's
// own, so fixed ports are free; the benchmark reads them through the node.
const (
	kubeProxyMetrics = "127.0.0.1:10249"
	kubeProxyHealthz = "127.0.0.1:10256"
)

// startKubeProxy runs kube-proxy in nftables mode inside the lab's node
// namespace (it has no --netns), configured as test/cluster/kubeproxy.sh
// does: the host's conntrack settings left alone (not writable from a
// namespace), oomScoreAdj 0 (no CAP_SYS_RESOURCE). It gets the node name,
// identity and apiserver crossproxy gets, no cluster CIDR (crossproxy's
// scale runs set none: no local-traffic detection either way), and IPv6 off
// in the node namespace while it runs, so that it runs single-stack IPv4 as
// crossproxy's --ip-families IPv4 does instead of a second, IPv6 proxier.
func startKubeProxy(b *testing.B, e *env, minSync string) *scaleProxy {
	b.Helper()
	path := harness.KubeProxyBinary()
	if path == "" {
		b.Skip("no kube-proxy binary in ${CROSSPROXY_CLUSTER_BIN_DIR:-~/.cache/crossproxy/cluster-bin}: run `make cluster-bin`")
	}
	kc := kubeconfigInto(b, e)
	cfg := harness.KubeProxyConfig(e.node, kc, kubeProxyHealthz, kubeProxyMetrics, minSync)
	cfgPath := filepath.Join(b.TempDir(), "kube-proxy.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	run(b, "ip", "netns", "exec", e.lab.Node, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
	b.Cleanup(func() {
		_ = exec.Command("ip", "netns", "exec", e.lab.Node, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0").Run()
	})
	p := startProcess(e, proxyKubeProxy, "nsenter", "--net="+e.lab.NetNS(), path, "--config", cfgPath, "--v=2")
	pid := p.cmd.Process.Pid
	// nsenter executes kube-proxy in its own process: wait for that, so the
	// figures read from /proc are kube-proxy's.
	for deadline := time.Now().Add(10 * time.Second); ; {
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if strings.TrimSpace(string(comm)) == proxyKubeProxy {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("process %d is %q, not kube-proxy, after 10s\n%s", pid, comm, tail(p.logText(), 2000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	client := httpClientIn(e.lab.Node)
	return &scaleProxy{name: proxyKubeProxy, p: p, pid: pid, labels: `{ip_family="IPv4"}`, reference: true,
		scrape: func() (string, error) {
			_, body, _, err := httpGetWith(client, "http://"+kubeProxyMetrics+"/metrics")
			return body, err
		}}
}

// proxyTables lists the tables of the node namespace that belong to a proxy:
// crossproxy's (inet crossproxy) and kube-proxy's (ip and ip6 kube-proxy).
func proxyTables(b *testing.B, e *env) []string {
	b.Helper()
	out, err := exec.Command("ip", "netns", "exec", e.lab.Node, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		b.Fatalf("nft list tables: %v\n%s", err, out)
	}
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "table" && (f[2] == "crossproxy" || f[2] == "kube-proxy") {
			found = append(found, f[1]+" "+f[2])
		}
	}
	return found
}

// requireNoProxyTables fails unless the node namespace holds neither proxy's
// tables: a scale run measures one proxy starting from nothing.
func requireNoProxyTables(b *testing.B, e *env) {
	b.Helper()
	if t := proxyTables(b, e); len(t) > 0 {
		b.Fatalf("node namespace %s still holds proxy tables %v: a previous run did not clean up", e.lab.Node, t)
	}
}

// removeProxyTables deletes both proxies' tables from the node namespace
// (crossproxy's through its own cleanup command, kube-proxy's as
// test/cluster/kubeproxy.sh does) and fails if one is left.
func removeProxyTables(b *testing.B, e *env) {
	if out, err := exec.Command(binary, "cleanup", "--netns", e.lab.NetNS()).CombinedOutput(); err != nil {
		b.Errorf("crossproxy cleanup: %v\n%s", err, out)
	}
	for _, fam := range []string{"ip", "ip6"} {
		_ = exec.Command("ip", "netns", "exec", e.lab.Node, "nft", "delete", "table", fam, "kube-proxy").Run()
	}
	if t := proxyTables(b, e); len(t) > 0 {
		b.Errorf("proxy tables %v left in %s after cleanup", t, e.lab.Node)
	}
}

// kubeconfigInto writes the admin kubeconfig with its server replaced by a
// loopback port of the lab's node namespace that forwards to the apiserver:
// kube-proxy has no --netns, so it runs inside the node namespace, where the
// apiserver's host loopback address does not exist.
func kubeconfigInto(b *testing.B, e *env) string {
	b.Helper()
	kc, err := e.api.Kubeconfig(harness.AdminUser)
	if err != nil {
		b.Fatal(err)
	}
	host := e.api.AdminConfig().Host
	u, err := url.Parse(host)
	if err != nil {
		b.Fatalf("apiserver address %q: %v", host, err)
	}
	data, err := os.ReadFile(kc)
	if err != nil {
		b.Fatal(err)
	}
	fwd := forwardInto(b, e.lab.Node, u.Host)
	moved := strings.ReplaceAll(string(data), "://"+u.Host, "://"+fwd)
	if moved == string(data) {
		b.Fatalf("kubeconfig %s does not name the apiserver %s", kc, u.Host)
	}
	path := filepath.Join(b.TempDir(), "kubeconfig-node")
	if err := os.WriteFile(path, []byte(moved), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// forwardInto listens on a loopback port of namespace ns and copies each
// connection to target, dialled from this process's own namespace; the
// listener and every connection close when the benchmark ends (after the
// proxy using them is stopped: cleanups run last-registered first).
func forwardInto(b *testing.B, ns, target string) string {
	b.Helper()
	var ln net.Listener
	if err := netnsrun.Do(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		b.Fatalf("listen in %s: %v", ns, err)
	}
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	b.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range open {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(up)
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return ln.Addr().String()
}
