//go:build e2e && linux

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// TestForeignChangesRepairedWithinSeconds: what a firewall reload does to a
// node (`nft flush ruleset`), another tool deleting crossproxy's table, or
// someone emptying one of its chains is undone by crossproxy at once, not at
// the next full sync (an hour away here) nor the next periodic sync (a
// minute away): a ClusterIP and a NodePort answer again within seconds. Its
// own syncs in between never count as changes from outside.
func TestForeignChangesRepairedWithinSeconds(t *testing.T) {
	l := newLabWith(t, "r", "--min-sync-period", "1s", "--sync-period", "1m", "--full-sync-period", "1h")
	c1, ext := l.ns("c1"), l.ns("ext")
	l.setService(svc{name: "web", clusterIPs: []string{"10.96.0.10"}, typ: v1.ServiceTypeNodePort,
		ports: []svcPort{{name: "http", port: 80, nodePort: 30080}}}, []ep{{pod: "b1"}, {pod: "b2"}})
	l.flush()
	l.waitNFT("10.96.0.10", true)
	answers := func() error {
		// crossproxy's Service chains live in shard tables: the main table
		// (masquerading, refusals) must be back too.
		if out, err := exec.Command("ip", "netns", "exec", l.ns("node"), "nft", "list", "chain", "inet", "crossproxy", "nat-postrouting").CombinedOutput(); err != nil {
			return fmt.Errorf("table inet crossproxy not back: %s", out)
		}
		if _, err := tcp(c1, "", hostPort("10.96.0.10", 80), 300*time.Millisecond); err != nil {
			return fmt.Errorf("ClusterIP: %w", err)
		}
		if _, err := tcp(ext, "", hostPort(nodeV4, 30080), 300*time.Millisecond); err != nil {
			return fmt.Errorf("NodePort: %w", err)
		}
		return nil
	}
	eventually(t, "web answers", answers)
	// A change of crossproxy's own (an endpoint more) is a sync, not a repair.
	l.setService(svc{name: "web", clusterIPs: []string{"10.96.0.10"}, typ: v1.ServiceTypeNodePort,
		ports: []svcPort{{name: "http", port: 80, nodePort: 30080}}}, []ep{{pod: "b1"}, {pod: "b2"}, {pod: "b3"}})
	l.flush()
	l.waitNFT("10.244.0.13", true)

	changes := []struct {
		name string
		nft  []string
	}{
		{"nft flush ruleset", []string{"flush", "ruleset"}},
		{"nft delete table inet crossproxy", []string{"delete", "table", "inet", "crossproxy"}},
		{"nft flush chain inet crossproxy nat-prerouting", []string{"flush", "chain", "inet", "crossproxy", "nat-prerouting"}},
	}
	for _, c := range changes {
		// Past --min-sync-period since the last sync, so the figure is the
		// repair's own and not a wait for the rate limit.
		time.Sleep(1200 * time.Millisecond)
		run(t, append([]string{"ip", "netns", "exec", l.ns("node"), "nft"}, c.nft...)...)
		// The repair takes milliseconds: the first probe may already find it
		// done; the log below proves each change was seen and repaired.
		start := time.Now()
		var err error
		for time.Since(start) < 15*time.Second {
			if err = answers(); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: web did not answer again within %v: %v", c.name, took.Round(time.Millisecond), err)
		}
		t.Logf("%s: table back, ClusterIP and NodePort answer again after %v", c.name, took.Round(time.Millisecond))
	}
	time.Sleep(1200 * time.Millisecond)
	data, err := os.ReadFile(l.logPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	if n := strings.Count(log, "rules changed from outside"); n != len(changes) {
		t.Errorf("want %d repairs logged, one per change from outside, got %d:\n%s", len(changes), n, lastLines(log, 40))
	}
	for _, want := range []string{"table inet crossproxy deleted", "table inet crossproxy: 2 rules deleted", "by nft (pid "} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not name %q:\n%s", want, lastLines(log, 40))
		}
	}

	// kube-proxy's table beside crossproxy's: explain names it as the
	// Service's first mismatch and exits non-zero.
	run(t, "ip", "netns", "exec", l.ns("node"), "nft", "add", "table", "ip", "kube-proxy")
	out, err := exec.Command("ip", "netns", "exec", l.ns("node"), l.bin, "explain", "default/web",
		"--manifests", filepath.Join(l.dir, "manifests"), "--node", nodeName,
		"--cluster-cidr", "10.244.0.0/16,fd00:244::/56", "--ip-families", "IPv4,IPv6",
		"--nodeport-addresses", "192.168.50.0/24,fd00:50::/64").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another Service proxy programs this node too: kube-proxy (nftables table ip kube-proxy)") {
		t.Errorf("explain with kube-proxy's table on the node (%v):\n%s", err, out)
	}
}
