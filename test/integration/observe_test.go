//go:build integration && linux

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestHealthAndMetrics checks /healthz, /livez and /metrics over HTTP, the
// health-check node port of a LoadBalancer Service with externalTrafficPolicy
// Local, and /healthz failing while the Node is being deleted.
func TestHealthAndMetrics(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	hz := "http://" + e.health
	// Healthy from the start (nothing has waited 2 x syncPeriod yet); once
	// the first sync is done, lastUpdated is set and nothing is pending.
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := waitHTTP(t, hz+"/healthz", 200)
		var rep struct {
			LastUpdated  time.Time  `json:"lastUpdated"`
			NodeEligible *bool      `json:"nodeEligible"`
			PendingSince *time.Time `json:"pendingSince"`
		}
		if err := json.Unmarshal([]byte(body), &rep); err != nil || rep.NodeEligible == nil || !*rep.NodeEligible {
			t.Fatalf("healthz body %q (%v)", body, err)
		}
		if !rep.LastUpdated.IsZero() && rep.PendingSince == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sync reported by healthz: %q", body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitHTTP(t, hz+"/livez", 200)

	// A LoadBalancer Service with ETP Local: its endpoint is first on
	// another node (503), then on this one (200, weight 1).
	lb := e.service("lb", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	})
	if lb.Spec.HealthCheckNodePort == 0 {
		t.Fatal("apiserver allocated no healthCheckNodePort")
	}
	remote := e.endpointSlice("lb", "lb-1", backendAddrs[0])
	other := "another-node"
	remote.Endpoints[0].NodeName = &other
	slice := e.createSlice(remote)
	// The health-check node port listens on the node's NodePort address,
	// in the node's namespace, and is probed from the client's.
	hcURL := "http://" + nodeAddr + ":" + strconv.Itoa(int(lb.Spec.HealthCheckNodePort)) + "/"
	probe := e.lab.httpClient()
	body := waitHTTPWith(t, probe, hcURL, 503)
	if !strings.Contains(body, `"localEndpoints":0`) {
		t.Fatalf("health check with no local endpoint: %q", body)
	}
	slice.Endpoints = e.endpointSlice("lb", "lb-1", backendAddrs[0]).Endpoints
	e.updateSlice(slice)
	body = waitHTTPWith(t, probe, hcURL, 200)
	_, _, hdr, err := httpGetWith(probe, hcURL)
	if err != nil || hdr.Get("X-Load-Balancing-Endpoint-Weight") != "1" || !strings.Contains(body, `"localEndpoints":1`) || !strings.Contains(body, `"name":"lb"`) {
		t.Fatalf("health check with one local endpoint: %q weight %q (%v)", body, hdr.Get("X-Load-Balancing-Endpoint-Weight"), err)
	}

	// Metrics under kube-proxy's names.
	deadline = time.Now().Add(10 * time.Second)
	for {
		n, _ := metric(t, e.mport, "kubeproxy_network_programming_duration_seconds_count")
		if n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("network_programming_duration_seconds_count %v, want >= 1", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for series, min := range map[string]float64{
		"kubeproxy_sync_proxy_rules_duration_seconds_count":      1,
		"kubeproxy_sync_full_proxy_rules_duration_seconds_count": 1,
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds":      float64(time.Now().Add(-time.Minute).Unix()),
		"kubeproxy_sync_proxy_rules_service_changes_total":       2, // kubernetes, lb
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":      2,
		`crossproxy_programmed_objects{kind="health_checks"}`:    1,
		`crossproxy_programmed_objects{kind="service_ports"}`:    2,
	} {
		if v, ok := metric(t, e.mport, series); !ok || v < min {
			t.Errorf("%s = %v (found %v), want >= %v", series, v, ok, min)
		}
	}
	if _, ok := metric(t, e.mport, "kubeproxy_sync_partial_proxy_rules_duration_seconds_count"); !ok {
		t.Errorf("partial sync histogram missing")
	}
	if _, ok := metric(t, e.mport, `kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy="external"}`); !ok {
		t.Errorf("no_local_endpoints gauge missing")
	}

	// The Node is being deleted (a finalizer holds it): /healthz fails,
	// /livez does not.
	n, err := e.admin.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Finalizers = []string{"crossproxy.test/hold"}
	if _, err := e.admin.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CoreV1().Nodes().Delete(e.ctx, e.node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, hz+"/healthz", 503)
	waitHTTP(t, hz+"/livez", 200)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := e.admin.CoreV1().Nodes().Patch(e.ctx, e.node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, hz+"/healthz", 503)
	// Traffic still flows with the Node gone (last known addresses kept).
	e.lab.waitBackends(t, addr(lb), backendAddrs[0])
}

// TestKubeProxyConfigFile runs crossproxy with a kube-proxy config file: the
// settings it holds apply (the metrics address comes from the file), flags
// override it, and ignored fields are reported at start.
func TestKubeProxyConfigFile(t *testing.T) {
	e := newEnv(t)
	kc, err := e.api.Kubeconfig(e.user)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr, healthAddr := freeAddr(t), freeAddr(t)
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
metricsBindAddress: %s
healthzBindAddress: 127.0.0.1:1
clusterCIDR: 10.244.0.0/16
featureGates:
  SomeGate: true
oomScoreAdj: -999
nftables:
  minSyncPeriod: 100ms
  syncPeriod: 10s
`, kc, e.node, metricsAddr)
	path := filepath.Join(e.api.Dir, "kube-proxy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startRaw(e, "run", "--config", path, "--netns", e.lab.NetNS(), "--ip-families", "IPv4", "--healthz-bind-address", healthAddr)
	web := e.service("web")
	e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(web), backendAddrs[0])
	waitHTTP(t, "http://"+metricsAddr+"/metrics", 200)
	waitHTTP(t, "http://"+healthAddr+"/healthz", 200) // the flag beat the file's 127.0.0.1:1
	log := p.logText()
	for _, want := range []string{"configuration loaded", "config field ignored: featureGates", "config field ignored: oomScoreAdj"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// An invalid value stops the start, naming the field.
	bad := filepath.Join(e.api.Dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: 10.244.0.0/33\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := startRaw(e, "run", "--config", bad, "--netns", e.lab.NetNS())
	select {
	case <-q.done:
	case <-time.After(10 * time.Second):
		t.Fatal("crossproxy with an invalid config did not stop")
	}
	if q.err == nil || !strings.Contains(q.logText(), "clusterCIDR") {
		t.Fatalf("invalid config: exit %v, output %q", q.err, q.logText())
	}
}
