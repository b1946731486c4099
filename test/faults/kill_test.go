//go:build faults && linux

package faults

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossproxy/crossproxy/test/harness"
)

// TestKillInFullSync (fault 2): the proxy is SIGKILLed while its first full
// sync of 10,000 Services (2,000 with -short) is being computed and
// committed, at points spread over the sync's measured duration, each time
// into a node without its rules. The kernel must hold either nothing of the
// new ruleset or all of it, never a part: after each kill the Services'
// ClusterIPs found in the ruleset are counted (none or all), and three
// Services (the first, a middle and the last) must all answer or all be
// refused. A proxy started after the last kill must converge.
func TestKillInFullSync(t *testing.T) {
	for _, which := range proxies() {
		t.Run(which, func(t *testing.T) { killInFullSync(t, which) })
	}
}

var bulkIPs = regexp.MustCompile(`\b10\.96\.(1[2-9][0-9]|2[0-4][0-9])\.\d+\b`)

func killInFullSync(t *testing.T, which string) {
	count, kills := 10000, []float64{0.1, 0.3, 0.5, 0.7, 0.85, 1.0}
	if testing.Short() {
		count, kills = 2000, []float64{0.2, 0.5, 0.8}
	}
	n := newNode(t, harness.Options{})
	objs := bulkServices(n, "bulk", count)
	start := time.Now()
	storeMany(t, n, objs)
	for {
		l, err := n.admin.CoreV1().Services("default").List(n.ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) >= count {
			break
		}
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the API server lists %d Services two minutes after %d were stored (%v)", len(l.Items), count, err)
		}
		time.Sleep(time.Second)
	}
	samples := 3
	answers := func() (int, string) { return bulkAnswers(n, count) }
	inKernel := func() int {
		out, err := exec.Command("ip", "netns", "exec", n.lab.Node, "nft", "list", "ruleset").Output()
		if err != nil {
			t.Fatalf("nft list ruleset: %v", err)
		}
		seen := map[string]bool{}
		for _, m := range bulkIPs.FindAllString(string(out), -1) {
			seen[m] = true
		}
		return len(seen)
	}
	clean := func() {
		if out, err := exec.Command(binary, "cleanup", "--netns", n.lab.NetNS()).CombinedOutput(); err != nil {
			t.Fatalf("crossproxy cleanup: %v\n%s", err, out)
		}
		_ = exec.Command("ip", "netns", "exec", n.lab.Node, "nft", "delete", "table", "ip", "kube-proxy").Run()
		if c := inKernel(); c != 0 {
			t.Fatalf("%d bulk ClusterIPs left after cleanup", c)
		}
	}
	startLine := map[string]string{crossproxy: `msg="sync start" full=true`, kubeProxy: `"Syncing nftables rules" ipFamily="IPv4" fullSync=true`}[which]
	debug := map[string]string{crossproxy: "--log-level=debug", kubeProxy: "--v=2"}[which]

	// A whole first sync, for its duration.
	p := n.start(which, debug)
	p.waitMetric(t, fullSyncs, 1, 10*time.Minute)
	sum, _ := p.metric("kubeproxy_sync_full_proxy_rules_duration_seconds_sum")
	full := time.Duration(sum * float64(time.Second))
	if c := inKernel(); c != count {
		t.Fatalf("%s after a whole full sync: %d of %d bulk ClusterIPs in the ruleset", which, c, count)
	}
	p.stop()

	var outcomes []string
	partial := 0
	for _, frac := range kills {
		clean()
		p := n.start(which, debug)
		deadline := time.Now().Add(5 * time.Minute)
		for !strings.Contains(p.logText(), startLine) {
			p.alive(t, "before its first full sync")
			if time.Now().After(deadline) {
				t.Fatalf("%s: no full sync started in 5 minutes", which)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(time.Duration(frac * float64(full)))
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		// Whatever the proxy left running (kube-proxy's nft) finishes.
		time.Sleep(2 * time.Second)
		c := inKernel()
		ok, got := answers()
		state := map[bool]string{true: "new", false: "old"}[c == count]
		if (c != 0 && c != count) || (ok != 0 && ok != samples) || (c == count) != (ok == samples) {
			state, partial = "PART", partial+1
		}
		outcomes = append(outcomes, fmt.Sprintf("kill at %.0f%%: %s (%d ClusterIPs, %d/%d answer: %s)", frac*100, state, c, ok, samples, got))
	}

	// The restart after the last kill converges.
	restart := time.Now()
	p = n.start(which, debug)
	var converged time.Duration
	for {
		if ok, _ := answers(); ok == samples && inKernel() == count {
			converged = time.Since(restart)
			break
		}
		p.alive(t, "after the kills")
		if time.Since(restart) > 10*time.Minute {
			t.Fatalf("%s: not converged 10 minutes after the restart", which)
		}
		time.Sleep(200 * time.Millisecond)
	}
	figure(t, "%s SIGKILL in a full sync of %d Services (full sync %v): %s; %d partial; restarted proxy converged in %v",
		which, count, full.Round(time.Millisecond), strings.Join(outcomes, "; "), partial, converged.Round(100*time.Millisecond))
	if partial > 0 {
		t.Errorf("%s: %d kills left a part of the ruleset in the kernel", which, partial)
	}
}
