package health

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestStatus(timeout time.Duration) (*Status, *clock) {
	c := &clock{t: time.Unix(1000, 0)}
	s := NewStatus(timeout)
	s.now = c.now
	s.oldestPending = c.t
	return s, c
}

func get(t *testing.T, h http.Handler, path string) (int, Report) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var r Report
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("%s body %q: %v", path, rec.Body.String(), err)
	}
	return rec.Code, r
}

func TestStatusFollowsPendingUpdates(t *testing.T) {
	s, c := newTestStatus(2 * time.Second)
	h := s.Handler()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	s.SetNode(node)

	// Start counts as pending: healthy until the timeout passes.
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("fresh start: livez %d, want 200", code)
	}
	c.t = c.t.Add(2 * time.Second)
	if code, _ := get(t, h, "/livez"); code != 503 {
		t.Fatalf("first sync overdue: livez %d, want 503", code)
	}
	s.Updated(c.t)
	if code, r := get(t, h, "/healthz"); code != 200 || !r.Healthy || r.NodeEligible == nil || !*r.NodeEligible {
		t.Fatalf("after sync: healthz %d %+v", code, r)
	}

	// A queued change is fine until it waits 2 x sync period.
	s.QueuedUpdate(c.t)
	c.t = c.t.Add(time.Second)
	s.QueuedUpdate(c.t) // later changes do not reset the oldest
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("update pending 1s: livez %d", code)
	}
	c.t = c.t.Add(time.Second)
	if code, r := get(t, h, "/livez"); code != 503 || r.PendingSince == nil {
		t.Fatalf("update pending 2s: livez %d %+v", code, r)
	}
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("update pending 2s: healthz %d", code)
	}
	s.Updated(c.t)
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("after second sync: livez %d", code)
	}
}

func TestHealthzFailsWhileNodeGoesAway(t *testing.T) {
	s, c := newTestStatus(time.Minute)
	s.Updated(c.t)
	h := s.Handler()
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("node unknown: healthz %d, want 503", code)
	}
	now := metav1.NewTime(c.t)
	s.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", DeletionTimestamp: &now}})
	if code, r := get(t, h, "/healthz"); code != 503 || *r.NodeEligible {
		t.Fatalf("node deleting: healthz %d %+v", code, r)
	}
	if code, _ := get(t, h, "/livez"); code != 200 {
		t.Fatalf("node deleting: livez %d, want 200 (liveness ignores the node)", code)
	}
	s.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1.NodeSpec{Taints: []v1.Taint{{Key: toBeDeletedTaint, Effect: v1.TaintEffectNoSchedule}}}})
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("node tainted for deletion: healthz %d", code)
	}
	s.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Fatalf("node back: healthz %d", code)
	}
	s.SetNode(nil)
	if code, _ := get(t, h, "/healthz"); code != 503 {
		t.Fatalf("node deleted: healthz %d", code)
	}
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

type hcBody struct {
	Service             struct{ Namespace, Name string }
	LocalEndpoints      int
	ServiceProxyHealthy bool
}

func probe(t *testing.T, port uint16) (int, string, hcBody) {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(port)) + "/")
	if err != nil {
		t.Fatalf("probe %d: %v", port, err)
	}
	defer resp.Body.Close()
	var b hcBody
	if err := json.NewDecoder(resp.Body).Decode(&b); err != nil {
		t.Fatalf("probe %d body: %v", port, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), b
}

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

func TestNodePortsServeLocalEndpointCount(t *testing.T) {
	healthy := true
	n := &NodePorts{ProxyHealthy: func() bool { return healthy }}
	defer n.Close()
	p1, p2 := freePort(t), freePort(t)
	web := types.NamespacedName{Namespace: "ns", Name: "web"}
	db := types.NamespacedName{Namespace: "ns", Name: "db"}
	if err := n.Sync([]core.HealthCheck{{Service: web, NodePort: p1, LocalEndpoints: 2}, {Service: db, NodePort: p2}}, loopback); err != nil {
		t.Fatal(err)
	}
	code, weight, body := probe(t, p1)
	if code != 200 || weight != "2" || body.LocalEndpoints != 2 || body.Service.Name != "web" || !body.ServiceProxyHealthy {
		t.Fatalf("web: %d weight %q %+v", code, weight, body)
	}
	if code, weight, _ := probe(t, p2); code != 503 || weight != "0" {
		t.Fatalf("db with no local endpoints: %d weight %q", code, weight)
	}
	healthy = false
	if code, _, body := probe(t, p1); code != 503 || body.ServiceProxyHealthy {
		t.Fatalf("web with proxy unhealthy: %d %+v", code, body)
	}
	healthy = true

	// Counts update in place; removed ports close.
	if err := n.Sync([]core.HealthCheck{{Service: db, NodePort: p2, LocalEndpoints: 1}}, loopback); err != nil {
		t.Fatal(err)
	}
	if code, weight, _ := probe(t, p2); code != 200 || weight != "1" {
		t.Fatalf("db with one endpoint: %d weight %q", code, weight)
	}
	if _, err := http.Get("http://127.0.0.1:" + strconv.Itoa(int(p1)) + "/"); err == nil {
		t.Fatalf("web port %d still served after its Service left", p1)
	}
	if got := n.Ports(); len(got) != 1 || got[p2] != db {
		t.Fatalf("ports: %v", got)
	}
}

func TestNodePortsReportBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	busy := uint16(l.Addr().(*net.TCPAddr).Port)
	free := freePort(t)
	n := &NodePorts{}
	defer n.Close()
	svc := types.NamespacedName{Namespace: "ns", Name: "busy"}
	err = n.Sync([]core.HealthCheck{{Service: svc, NodePort: busy, LocalEndpoints: 1}, {Service: types.NamespacedName{Namespace: "ns", Name: "ok"}, NodePort: free, LocalEndpoints: 1}}, loopback)
	if err == nil {
		t.Fatal("busy port: no error")
	}
	if code, _, _ := probe(t, free); code != 200 {
		t.Fatalf("other port not served: %d", code)
	}
}
