//go:build faults && linux

package faults

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/harness"
)

// TestAPIServerOutage (fault 1): the node's packets to the API server are
// dropped for 20 s and 60 s (20 s only with -short) while a Service's endpoints move and a
// new Service appears; then the route heals. The old rules must keep
// serving throughout the outage (a prober connects to the ClusterIP and the
// NodePort every 50 ms and every answer must come from the old pod); after
// the heal the node must converge (the moved Service answered only by its
// new pod, the new Service answering) within 3 s for crossproxy. In the
// relist variant the control plane is upgraded instead: the node's
// connections to the API server are refused for as long, the API server is
// restarted meanwhile and etcd compacted at the current revision, so the
// proxy's watches, resuming where they were, come back to "too old
// resource version" and must relist.
//
// The time to converge depends on where in its retransmission backoff the
// stuck connection, or the dial after it, is when the route heals; the full
// form cuts for 20 s (less than client-go's default health check of 30 s +
// 15 s) and for 60 s.
func TestAPIServerOutage(t *testing.T) {
	lengths := []time.Duration{20 * time.Second, 60 * time.Second}
	if testing.Short() {
		lengths = lengths[:1]
	}
	for _, which := range proxies() {
		for _, cutFor := range lengths {
			t.Run(fmt.Sprintf("%s/drop-%v", which, cutFor), func(t *testing.T) { outage(t, which, cutFor, false) })
		}
		cutFor := lengths[len(lengths)-1]
		t.Run(fmt.Sprintf("%s/relist-%v", which, cutFor), func(t *testing.T) { outage(t, which, cutFor, true) })
	}
}

// convergeLimit is how long after the heal crossproxy may take to converge.
const convergeLimit = 3 * time.Second

func outage(t *testing.T, which string, cutFor time.Duration, relist bool) {
	n := newNode(t, harness.Options{})
	// Verbose enough to show client-go's watch restarts and relists.
	p := n.start(which, map[string]string{crossproxy: "--log-level=debug", kubeProxy: "--v=4"}[which])
	web := n.service("web", nodePort)
	n.createSlice(n.slice("web", "web-1", podAddrs[0]))
	n.lab.waitBackends(t, clusterAddr(web), 30*time.Second, podAddrs[0])
	n.lab.waitBackends(t, nodePortAddr(web), 10*time.Second, podAddrs[0])
	// A few seconds of quiet before the cut, as on a node whose watches
	// have been idle.
	time.Sleep(5 * time.Second)

	probe := n.lab.probe(50*time.Millisecond, clusterAddr(web), nodePortAddr(web))
	defer probe.stop()
	cut := time.Now()
	if relist {
		n.refuse()
	} else {
		n.cut()
	}
	time.Sleep(2 * time.Second)
	n.setEndpoints("web", "web-1", podAddrs[1])
	web2 := n.service("web2", nodePort)
	n.createSlice(n.slice("web2", "web2-1", podAddrs[2]))
	if relist {
		if err := n.api.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		compactEtcd(t, n)
		if err := n.api.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		// A change after the restart, which the old watches never saw.
		n.setEndpoints("web", "web-1", podAddrs[1], podAddrs[2])
	}
	code, body := p.healthz()
	time.Sleep(time.Until(cut.Add(cutFor)))
	code2, body2 := p.healthz()
	p.alive(t, "during the outage")
	healed := time.Now()
	if relist {
		n.accept()
	} else {
		n.heal()
	}
	tried, failed, first := probe.window(cut, healed, podAddrs[0])

	wantWeb := podAddrs[1:2]
	if relist {
		wantWeb = podAddrs[1:3]
	}
	var took time.Duration
	_, err := n.lab.reach(clusterAddr(web), 60*time.Second, wantWeb...)
	if err == nil {
		_, err = n.lab.reach(clusterAddr(web2), 60*time.Second, podAddrs[2])
	}
	if err == nil {
		_, err = n.lab.reach(nodePortAddr(web2), 10*time.Second, podAddrs[2])
	}
	took = time.Since(healed)
	probe.stop()
	converged := fmt.Sprintf("converged %v after the heal", took.Round(10*time.Millisecond))
	if err != nil {
		converged = fmt.Sprintf("not converged %v after the heal: %v", took.Round(time.Second), err)
	}
	said := outageLog(p)
	figure(t, "%s API server outage %v (relist %v): during it %d connections tried, %d failed (first %s); /healthz %d %q 2 s in, %d %q at the end; %s; the proxy said: %s",
		which, cutFor, relist, tried, failed, first, code, oneLine(body), code2, oneLine(body2), converged, said)
	if failed > 0 {
		t.Errorf("%s: %d of %d connections failed during the outage (first: %s)", which, failed, tried, first)
	}
	if which != crossproxy {
		return
	}
	if err != nil || took > convergeLimit {
		t.Errorf("crossproxy %s, want within %v", converged, convergeLimit)
	}

}

// compactEtcd compacts the harness's etcd at its current revision, as the
// API server's own compaction does every 5 minutes: a watch from before it
// can only be answered with "too old resource version".
func compactEtcd(t testing.TB, n *node) {
	t.Helper()
	base := etcdURL(t, n)
	m := etcdCall(t, base, "/v3/kv/range", map[string]string{"key": "AA=="}) // key "\x00": any key answers the header
	hdr, _ := m["header"].(map[string]any)
	rev, err := strconv.ParseInt(fmt.Sprint(hdr["revision"]), 10, 64)
	if err != nil {
		t.Fatalf("etcd revision from %v: %v", m, err)
	}
	etcdCall(t, base, "/v3/kv/compaction", map[string]any{"revision": rev, "physical": true})
}

// outageLog is what the proxy logged about the API server,
// its watches and its syncs, shortened.
func outageLog(p *proc) string {
	var out []string
	for _, line := range strings.Split(p.logText(), "\n") {
		l := strings.ToLower(line)
		if strings.Contains(l, "too old") || strings.Contains(l, "reachable") || strings.Contains(l, "watch closed") ||
			strings.Contains(l, "watch ended") || strings.Contains(l, "failed to watch") || strings.Contains(l, "failed to list") {
			out = append(out, tail(strings.TrimSpace(line), 220))
		}
	}
	if len(out) > 8 {
		out = append(out[:4], append([]string{fmt.Sprintf("(%d more)", len(out)-8)}, out[len(out)-4:]...)...)
	}
	if len(out) == 0 {
		return "nothing about the API server"
	}
	return strings.Join(out, " | ")
}

func oneLine(s string) string { return tail(strings.ReplaceAll(s, "\n", " "), 200) }
