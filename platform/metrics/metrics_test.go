package metrics

import (
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

func port(name string, local, cluster int, internalLocal, externalLocal bool, kinds ...core.FrontendKind) *core.ServicePort {
	p := &core.ServicePort{
		Key:                 core.PortKey{Service: types.NamespacedName{Namespace: "ns", Name: name}, Protocol: v1.ProtocolTCP, Family: v1.IPv4Protocol},
		InternalPolicyLocal: internalLocal,
		ExternalPolicyLocal: externalLocal,
	}
	for _, k := range kinds {
		p.Frontends = append(p.Frontends, core.Frontend{Kind: k, Addr: netip.MustParseAddr("10.0.0.1"), Port: 80})
	}
	for i := range cluster {
		p.ClusterEndpoints = append(p.ClusterEndpoints, core.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}), Port: 8080})
	}
	for i := range local {
		p.LocalEndpoints = append(p.LocalEndpoints, core.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 2, 0, byte(i + 1)}), Port: 8080, Local: true})
	}
	return p
}

func TestObserveSyncExportsKubeProxyNames(t *testing.T) {
	m := New()
	start := time.Now()
	st := &core.NodeState{Ports: map[core.PortKey]*core.ServicePort{}}
	for _, p := range []*core.ServicePort{
		port("a", 0, 3, true, false, core.FrontendClusterIP),                        // internal Local, none local
		port("b", 0, 2, false, true, core.FrontendClusterIP, core.FrontendNodePort), // external Local, none local
		port("c", 1, 2, false, true, core.FrontendClusterIP, core.FrontendLoadBalancer),
	} {
		st.Ports[p.Key] = p
	}
	st.HealthChecks = []core.HealthCheck{{NodePort: 30000, LocalEndpoints: 1}}
	st.Problems = []core.Problem{{Kind: "Service", Object: "ns/bad", Field: "spec.loadBalancerSourceRanges[0]", Reason: "invalid"}}
	m.ObserveSync(platform.SyncResult{ID: 1, Full: true, Start: start, Duration: 30 * time.Millisecond, State: st,
		Changes: core.Changes{Full: true, ServiceChanges: 3, EndpointChanges: 5, TriggerTimes: []time.Time{start.Add(-2 * time.Second)}}})
	m.ObserveSync(platform.SyncResult{ID: 2, Start: start, Duration: 5 * time.Millisecond, State: st,
		Changes: core.Changes{ServiceChanges: 1, EndpointChanges: 1}})
	m.ObserveSync(platform.SyncResult{ID: 3, Start: start, Err: fmt.Errorf("apply: %w", errors.New("netlink: EBUSY")), State: st,
		Changes: core.Changes{ServiceChanges: 1}})
	m.ObserveSync(platform.SyncResult{ID: 4, Start: start, Err: fmt.Errorf("x: %w", platform.ErrUnsupported), State: st})

	checks := map[string]float64{
		"kubeproxy_sync_proxy_rules_service_changes_total":  5,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total": 6,
	}
	for name, want := range checks {
		if got := gather(t, m, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := value(t, m.NoLocalEndpoints.WithLabelValues("internal")); got != 1 {
		t.Errorf("no_local_endpoints internal = %v, want 1", got)
	}
	if got := value(t, m.NoLocalEndpoints.WithLabelValues("external")); got != 1 {
		t.Errorf("no_local_endpoints external = %v, want 1", got)
	}
	if got := value(t, m.Programmed.WithLabelValues("frontends")); got != 5 {
		t.Errorf("programmed frontends = %v, want 5", got)
	}
	if got := value(t, m.Programmed.WithLabelValues("endpoints")); got != 7 {
		t.Errorf("programmed endpoints = %v, want 7", got)
	}
	if got := value(t, m.SyncFailures.WithLabelValues("backend")); got != 1 {
		t.Errorf("failures backend = %v", got)
	}
	if got := value(t, m.SyncFailures.WithLabelValues("unsupported")); got != 1 {
		t.Errorf("failures unsupported = %v", got)
	}
	if got := value(t, m.Problems.WithLabelValues("Service")); got != 1 {
		t.Errorf("problems Service = %v", got)
	}
	m.Repaired("load balancer", 3)
	m.Repaired("load balancer", 1)
	if got := value(t, m.Repairs.WithLabelValues("load balancer")); got != 4 {
		t.Errorf("repairs load balancer = %v, want 4", got)
	}
	if got := value(t, m.LastSync); got < float64(start.Unix()) {
		t.Errorf("last timestamp %v before start %v", got, start.Unix())
	}

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		"kubeproxy_sync_proxy_rules_duration_seconds_count 2",
		"kubeproxy_sync_full_proxy_rules_duration_seconds_count 1",
		"kubeproxy_sync_partial_proxy_rules_duration_seconds_count 1",
		"kubeproxy_network_programming_duration_seconds_count 1",
		`kubeproxy_network_programming_duration_seconds_bucket{le="2"} 0`,
		`kubeproxy_network_programming_duration_seconds_bucket{le="3"} 1`,
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds ",
		`crossproxy_programmed_objects{kind="service_ports"} 3`,
		`crossproxy_programmed_objects{kind="health_checks"} 1`,
		"go_goroutines ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func gather(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func TestFailureReason(t *testing.T) {
	for err, want := range map[error]string{
		errors.New("x"): "backend",
		fmt.Errorf("a: %w", platform.ErrUnsupported): "unsupported",
	} {
		if got := FailureReason(err); got != want {
			t.Errorf("FailureReason(%v) = %q, want %q", err, got, want)
		}
	}
}

// value reads a gauge or counter.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}

// TestRepairSyncCountsOnce: a sync that repaired rules others changed counts
// one ruleset repair when it succeeds, none when it fails.
func TestRepairSyncCountsOnce(t *testing.T) {
	m := New()
	drift := []string{"table inet crossproxy deleted", "1 rule deleted in table inet crossproxy-0 by nft (pid 9)"}
	m.ObserveSync(platform.SyncResult{ID: 1, Full: true, Err: errors.New("netlink: EBUSY"), Repair: drift})
	if got := value(t, m.Repairs.WithLabelValues("ruleset")); got != 0 {
		t.Errorf("a failed repair counted: %v", got)
	}
	m.ObserveSync(platform.SyncResult{ID: 2, Full: true, Duration: time.Millisecond, Repair: drift})
	m.ObserveSync(platform.SyncResult{ID: 3, Duration: time.Millisecond})
	if got := value(t, m.Repairs.WithLabelValues("ruleset")); got != 1 {
		t.Errorf("repairs ruleset = %v, want 1", got)
	}
}

// TestOtherProxyGauge: 1 while another proxy is reported, 0 once it is gone.
func TestOtherProxyGauge(t *testing.T) {
	m := New()
	kp := []platform.OtherProxy{{Name: "kube-proxy", Evidence: []string{"nftables table ip kube-proxy"}}}
	m.ObserveSync(platform.SyncResult{ID: 1, Duration: time.Millisecond, OtherProxies: kp})
	if got := value(t, m.OtherProxies.WithLabelValues("kube-proxy")); got != 1 {
		t.Errorf("while kube-proxy is there: %v, want 1", got)
	}
	m.ObserveSync(platform.SyncResult{ID: 2, Err: errors.New("EBUSY"), OtherProxies: kp})
	m.ObserveSync(platform.SyncResult{ID: 3, Duration: time.Millisecond})
	if got := value(t, m.OtherProxies.WithLabelValues("kube-proxy")); got != 0 {
		t.Errorf("after kube-proxy is gone: %v, want 0", got)
	}
}

// TestConntrackFull: the gauge is 1 during an episode and 0 after it; the
// counter counts episodes.
func TestConntrackFull(t *testing.T) {
	m := New()
	var r platform.ConntrackReporter = m
	r.ConntrackFull(true)
	if now, times := value(t, m.ConntrackFullNow), value(t, m.ConntrackFullTimes); now != 1 || times != 1 {
		t.Errorf("in the first episode: gauge %v, episodes %v; want 1, 1", now, times)
	}
	r.ConntrackFull(false)
	r.ConntrackFull(true)
	r.ConntrackFull(false)
	if now, times := value(t, m.ConntrackFullNow), value(t, m.ConntrackFullTimes); now != 0 || times != 2 {
		t.Errorf("after two episodes: gauge %v, episodes %v; want 0, 2", now, times)
	}
}
