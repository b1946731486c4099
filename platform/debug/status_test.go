package debug

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

func TestSummaryReportsSyncsAndNamesWhyUnhealthy(t *testing.T) {
	node, svc, slice, other := objects()
	bad := svc.DeepCopy()
	bad.Name = "bad"
	bad.Spec.Ports[0].Port = 0 // an input problem the core rejects, naming the field
	state, err := core.Compute(core.Options{}, node, []*v1.Service{svc, bad}, []*discovery.EndpointSlice{slice, other})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	healthy, why := true, ""
	s := &Summary{NodeName: "n1", Version: "v1.2.3", Backend: "nftables", Clock: func() time.Time { return now },
		Healthz: func() (bool, string) { return healthy, why }}
	s.Start()

	st := s.Status()
	if st.Healthy || len(st.Reasons) != 1 || !strings.Contains(st.Reasons[0], "no sync yet") {
		t.Fatalf("before any sync: healthy=%v %q, want unhealthy: no sync yet", st.Healthy, st.Reasons)
	}

	s.Observe(platform.SyncResult{ID: 1, Full: true, Start: now.Add(-3 * time.Second), Duration: 40 * time.Millisecond, State: state})
	s.Observe(platform.SyncResult{ID: 2, Start: now.Add(-time.Second), Duration: time.Millisecond, State: state})
	st = s.Status()
	if !st.Healthy || len(st.Reasons) != 0 {
		t.Fatalf("after two syncs: healthy=%v %q", st.Healthy, st.Reasons)
	}
	if st.LastFull.ID != 1 || st.LastPartial.ID != 2 || st.LastSync.ID != 2 || st.Syncs != 2 {
		t.Errorf("syncs: last %+v full %+v partial %+v count %d", st.LastSync, st.LastFull, st.LastPartial, st.Syncs)
	}
	if st.Programmed.Services != 1 || st.Programmed.Endpoints != 1 || st.Programmed.ServicePorts != 1 {
		t.Errorf("programmed %+v, want web's one port and endpoint (bad is rejected)", st.Programmed)
	}
	if len(st.InputProblems) != 1 || !strings.Contains(st.InputProblems[0], "default/bad") || len(st.Warnings) != 1 {
		t.Errorf("input problems %q, warnings %q: want default/bad's port named once", st.InputProblems, st.Warnings)
	}

	// A repair, another proxy, a failure: each named, the serious ones first.
	s.Observe(platform.SyncResult{ID: 3, Full: true, Start: now, Duration: time.Millisecond, State: state, Repair: []string{"table inet crossproxy flushed"}})
	kp := platform.OtherProxy{Name: "kube-proxy", Evidence: []string{"nftables table ip kube-proxy"}}
	s.Observe(platform.SyncResult{ID: 4, Start: now, Err: errors.New("netlink: operation not permitted"), OtherProxies: []platform.OtherProxy{kp}})
	s.Observe(platform.SyncResult{ID: 5, Start: now, Err: errors.New("netlink: operation not permitted"), OtherProxies: []platform.OtherProxy{kp}})
	healthy, why = false, "an update has waited 1m5s for a sync"
	st = s.Status()
	if st.Healthy || len(st.Reasons) != 3 {
		t.Fatalf("reasons %q, want three", st.Reasons)
	}
	for i, want := range []string{"kube-proxy (nftables table ip kube-proxy)", "the last 2 sync(s) failed: netlink: operation not permitted", "/healthz fails: an update has waited"} {
		if !strings.Contains(st.Reasons[i], want) {
			t.Errorf("reason %d = %q, want %q", i, st.Reasons[i], want)
		}
	}
	if st.DriftRepairs != 1 || st.SyncFailures != 2 || st.FailingSince != 2 || st.LastSync.ID != 3 {
		t.Errorf("repairs %d failures %d consecutive %d last %d", st.DriftRepairs, st.SyncFailures, st.FailingSince, st.LastSync.ID)
	}
	if !strings.Contains(strings.Join(st.Warnings, ";"), "table inet crossproxy flushed") {
		t.Errorf("warnings %q do not name the repair", st.Warnings)
	}

	// Recovery: the failures stop counting, the other proxy leaves.
	healthy = true
	s.Observe(platform.SyncResult{ID: 6, Start: now, Duration: time.Millisecond, State: state})
	if st = s.Status(); !st.Healthy || st.FailingSince != 0 || st.SyncFailures != 2 {
		t.Errorf("after recovery: healthy=%v %q consecutive %d", st.Healthy, st.Reasons, st.FailingSince)
	}
}

func TestDescribeKeepsTheEndpointsWordsAndDropsBinary(t *testing.T) {
	refusal := apierrors.NewGenericServerResponse(403, "get", schema.GroupResource{Resource: "pods"}, "x", "", 0, false)
	if err := describe(refusal, []byte("forbidden: system:serviceaccount:kube-system:stranger may not get proxies.crossproxy.io \"a\"\n")); !strings.Contains(err.Error(), "stranger may not get") {
		t.Errorf("plain-text refusal: %v", err)
	}
	unavailable := apierrors.NewServiceUnavailable("error trying to reach service: net/http: TLS handshake timeout")
	protobuf := []byte("k8s\x00\n\x0c\n\x02v1\x12\x06Status\x12\x10error trying to")
	if err := describe(unavailable, protobuf); err.Error() != unavailable.Error() {
		t.Errorf("protobuf Status: %q, want the decoded message %q", err, unavailable)
	}
	if err := describe(unavailable, []byte(`{"kind":"Status"}`)); err.Error() != unavailable.Error() {
		t.Errorf("JSON Status: %q", err)
	}
}
