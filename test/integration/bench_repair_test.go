//go:build integration && linux

package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// repairCap is how long a repair benchmark waits for a proxy to bring its
// rules back before it reports the proxy as not repairing (BENCH_REPAIR_TIMEOUT,
// seconds; default 300: kube-proxy's nftables mode repairs at its hourly full
// sync, so any cap ends its wait).
func repairCap(b *testing.B) time.Duration {
	if v := os.Getenv("BENCH_REPAIR_TIMEOUT"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 1 {
			b.Fatalf("BENCH_REPAIR_TIMEOUT=%q: want seconds", v)
		}
		return time.Duration(s) * time.Second
	}
	return 5 * time.Minute
}

// BenchmarkRepairAfterForeignChange programs n Services x 10 endpoints (the
// scale environment, BENCH_SERVICES, default 10,000) plus one NodePort Service
// served by the lab's backends through the real apiserver, then does to the
// node what a firewall reload or another tool does: `nft flush ruleset`, or
// deleting the proxy's main table. repair-s is the time from that command's
// return until that table is back and a ClusterIP and a NodePort of the probe
// Service both answer from the client namespace (crossproxy's Service
// chains live in shard tables beside the main one, so its ClusterIPs may
// keep answering while the main table, with masquerading, is gone); a proxy that has not repaired within the
// cap reports unrepaired=1 and repair-s as the cap. Each proxy starts fresh
// for each change, with kube-proxy's defaults (--min-sync-period 1s, syncs
// every 30 s, full syncs hourly), crossproxy and kube-proxy v1.37.2 in
// nftables mode alike.
func BenchmarkRepairAfterForeignChange(b *testing.B) {
	n := scaleServices(b)
	e := newScaleEnv(b, n)
	probe := e.service("probe", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort })
	e.createSlice(e.endpointSlice("probe", "probe-1", backendAddrs...))
	cip := addr(probe)
	np := net.JoinHostPort(nodeAddr, strconv.Itoa(int(probe.Spec.Ports[0].NodePort)))
	answers := func() error {
		for _, a := range []string{cip, np} {
			c, err := e.lab.dial(a, 300*time.Millisecond)
			if err != nil {
				return err
			}
			c.Close()
		}
		return nil
	}
	capAt := repairCap(b)
	// mainTable is the table a proxy cannot work without: deleting it is
	// the second change, and a repair is complete when it is back.
	mainTable := func(proxy string) []string {
		if proxy == proxyKubeProxy {
			return []string{"ip", "kube-proxy"}
		}
		return []string{"inet", "crossproxy"}
	}
	// tableBack lists one small chain of the main table: listing the table
	// itself prints every ClusterIP and endpoint, which takes seconds at
	// 10,000 Services.
	tableBack := func(proxy string) error {
		args := append(append([]string{"netns", "exec", e.lab.Node, "nft", "list", "chain"}, mainTable(proxy)...), "nat-postrouting")
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("table %v not back: %s", mainTable(proxy), out)
		}
		return nil
	}
	changes := []struct {
		name string
		nft  func(proxy string) []string
	}{
		{"flush-ruleset", func(string) []string { return []string{"flush", "ruleset"} }},
		{"delete-table", func(proxy string) []string { return append([]string{"delete", "table"}, mainTable(proxy)...) }},
	}
	for _, proxy := range []string{proxyCrossproxy, proxyKubeProxy} {
		for _, c := range changes {
			b.Run(proxy+"/"+c.name, func(b *testing.B) {
				s := startScaleProxy(b, e, proxy, "1s")
				if !s.waitFirstSync(b) {
					return
				}
				deadline := time.Now().Add(time.Minute)
				for answers() != nil {
					if time.Now().After(deadline) {
						b.Fatalf("%s: the probe Service never answered", proxy)
					}
					time.Sleep(100 * time.Millisecond)
				}
				// Past --min-sync-period since the last sync, as a reload
				// usually is.
				time.Sleep(2 * time.Second)
				args := append([]string{"netns", "exec", e.lab.Node, "nft"}, c.nft(proxy)...)
				if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
					b.Fatalf("nft %v: %v\n%s", c.nft(proxy), err, out)
				}
				start := time.Now()
				b.ResetTimer()
				var err error
				for time.Since(start) < capAt {
					if err = tableBack(proxy); err == nil {
						if err = answers(); err == nil {
							break
						}
					}
					time.Sleep(50 * time.Millisecond)
				}
				took := time.Since(start)
				b.StopTimer()
				unrepaired := 0.0
				if err != nil {
					unrepaired, took = 1, capAt
				}
				b.ReportMetric(took.Seconds(), "repair-s")
				b.ReportMetric(unrepaired, "unrepaired")
				b.Logf("%s %s at %d Services: %s (load %s)", proxy, c.name, n, map[bool]string{
					true:  fmt.Sprintf("answers again after %v", took.Round(time.Millisecond)),
					false: fmt.Sprintf("still dead after %v (%v)", capAt, err)}[err == nil], loadavg())
				if proxy == proxyCrossproxy {
					// What the proxy says of the repair: when it heard of
					// the change and how long the full sync took.
					for _, line := range strings.Split(s.p.logText(), "\n") {
						if strings.Contains(line, "changed from outside") || (strings.Contains(line, "rules in sync") && strings.Contains(line, "full=true")) {
							b.Logf("crossproxy: %s", tail(line, 300))
						}
					}
				}
			})
		}
	}
}
