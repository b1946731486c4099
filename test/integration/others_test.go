//go:build integration && linux

package integration

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/crossproxy/crossproxy/platform/events"
)

// TestReportsAnotherProxyOnTheNode: kube-proxy's nftables table appearing in
// the node's namespace (what `kubeadm upgrade` re-applying kube-proxy's
// DaemonSet does to a migrated node) is reported within a sync period: a
// Warning Event on the Node that `kubectl describe node` shows, a warning in
// the log and crossproxy_other_proxy_detected{proxy="kube-proxy"} 1; the
// gauge drops back to 0 once the table is gone.
func TestReportsAnotherProxyOnTheNode(t *testing.T) {
	e := newEnv(t)
	p := e.startProxy("--sync-period", "1s")
	gauge := func() string {
		_, body, _, err := httpGet("http://" + e.mport + "/metrics")
		if err != nil {
			return ""
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, `crossproxy_other_proxy_detected{proxy="kube-proxy"}`) {
				return strings.Fields(line)[1]
			}
		}
		return "absent"
	}
	waitGauge := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for gauge() != want {
			if time.Now().After(deadline) {
				t.Fatalf("crossproxy_other_proxy_detected{proxy=\"kube-proxy\"} is %q, want %q", gauge(), want)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitGauge("absent")
	nft := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns", "exec", e.lab.Node, "nft"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("nft %v: %v\n%s", args, err, out)
		}
	}
	nft("add", "table", "ip", "kube-proxy")
	waitGauge("1")
	deadline := time.Now().Add(15 * time.Second)
	for {
		list, err := e.admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", e.node).String()})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, ev := range list.Items {
			found = found || (ev.Reason == events.ReasonOtherProxy && ev.InvolvedObject.Kind == "Node" &&
				strings.Contains(ev.Message, "nftables table ip kube-proxy"))
		}
		if found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s Event on node %s: %+v", events.ReasonOtherProxy, e.node, list.Items)
		}
		time.Sleep(200 * time.Millisecond)
	}
	nft("delete", "table", "ip", "kube-proxy")
	waitGauge("0")
	if log := p.logText(); strings.Count(log, "another Service proxy programs this node") != 1 || !strings.Contains(log, "the other Service proxy is gone") {
		t.Errorf("want one warning when kube-proxy appeared and a note when it went:\n%s", tail(log, 3000))
	}
}
