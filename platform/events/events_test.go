package events

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/crossproxy/crossproxy/core"
)

func drain(ch chan string) []string {
	var out []string
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestProblemsReportedOncePerOccurrence(t *testing.T) {
	fake := record.NewFakeRecorder(100)
	r := newWithRecorder(fake, nil, "node-a")
	web := types.NamespacedName{Namespace: "ns", Name: "web"}
	bad := core.Problem{Kind: "Service", Object: "ns/web", Field: "spec.loadBalancerSourceRanges[0]", Reason: `"10.0.0.0/33" is not a CIDR`, Service: web}
	optionOnly := core.Problem{Kind: "Options", Field: "x", Reason: "y"}

	r.Problems([]core.Problem{bad, optionOnly})
	got := drain(fake.Events)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonInvalid+" node node-a: Service ns/web field spec.loadBalancerSourceRanges[0]") {
		t.Fatalf("first sync events: %q", got)
	}
	r.Problems([]core.Problem{bad})
	if got := drain(fake.Events); len(got) != 0 {
		t.Fatalf("repeated problem reported again: %q", got)
	}
	r.Problems(nil)
	r.Problems([]core.Problem{bad})
	if got := drain(fake.Events); len(got) != 1 {
		t.Fatalf("problem that came back: %q", got)
	}
}

func TestUnsupported(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	r := newWithRecorder(fake, nil, "win-1")
	r.Unsupported(types.NamespacedName{Namespace: "ns", Name: "web"}, "sessionAffinity timeout", "HNS has no affinity timeout; 10800s requested")
	got := drain(fake.Events)
	if len(got) != 1 || got[0] != "Warning "+ReasonUnsupported+" node win-1 cannot express sessionAffinity timeout: HNS has no affinity timeout; 10800s requested" {
		t.Fatalf("events %q", got)
	}
}

func TestOtherProxiesReportedOncePerAppearance(t *testing.T) {
	fake := record.NewFakeRecorder(10)
	fake.IncludeObject = true
	r := newWithRecorder(fake, nil, "node-a")
	kp := map[string]string{"kube-proxy": "nftables table ip kube-proxy"}
	r.OtherProxies(kp)
	got := drain(fake.Events)
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+ReasonOtherProxy+" another Service proxy programs node node-a beside crossproxy: kube-proxy (nftables table ip kube-proxy)") ||
		!strings.Contains(got[0], "kind=Node") {
		t.Fatalf("first report: %q", got)
	}
	r.OtherProxies(kp)
	if got := drain(fake.Events); len(got) != 0 {
		t.Fatalf("reported again while it stays: %q", got)
	}
	r.OtherProxies(nil)
	r.OtherProxies(kp)
	if got := drain(fake.Events); len(got) != 1 {
		t.Fatalf("back after it went: %q", got)
	}
}
