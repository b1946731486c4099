package kube

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/crossproxy/crossproxy/core"
)

// recorder is a Sink that records calls in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(s string)                           { r.mu.Lock(); r.calls = append(r.calls, s); r.mu.Unlock() }
func (r *recorder) SetNode(n *v1.Node)                     { r.add("node " + n.Name) }
func (r *recorder) UpsertService(s *v1.Service)            { r.add("svc+ " + s.Name) }
func (r *recorder) DeleteService(s *v1.Service)            { r.add("svc- " + s.Name) }
func (r *recorder) UpsertSlice(s *discovery.EndpointSlice) { r.add("slice+ " + s.Name) }
func (r *recorder) DeleteSlice(s *discovery.EndpointSlice) { r.add("slice- " + s.Name) }
func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c == s {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSourceFeedsSinkAndTriggersAfterSync(t *testing.T) {
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}},
		&discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-1",
			Labels: map[string]string{discovery.LabelServiceName: "web"}}},
	)
	rec := &recorder{}
	var mu sync.Mutex
	triggers := 0
	var nodes []*v1.Node
	src := &Source{Client: client, NodeName: "n1", Sink: rec,
		OnChange: func() { mu.Lock(); triggers++; mu.Unlock() },
		OnNode:   func(n *v1.Node) { mu.Lock(); nodes = append(nodes, n); mu.Unlock() }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	waitFor(t, "initial trigger", func() bool { mu.Lock(); defer mu.Unlock(); return triggers == 1 })
	for _, want := range []string{"node n1", "svc+ web", "slice+ web-1"} {
		if !rec.has(want) {
			t.Fatalf("sink lacks %q before the first trigger: %v", want, rec.calls)
		}
	}

	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "service delete", func() bool { return rec.has("svc- web") })
	waitFor(t, "trigger after delete", func() bool { mu.Lock(); defer mu.Unlock(); return triggers >= 2 })
	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node delete seen by OnNode", func() bool { mu.Lock(); defer mu.Unlock(); return len(nodes) == 2 && nodes[1] == nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		proxy string
		lbls  map[string]string
		want  bool
	}{
		{"", nil, true},
		{"", map[string]string{"service.kubernetes.io/service-proxy-name": "other"}, false},
		{"", map[string]string{"service.kubernetes.io/headless": ""}, false},
		{"xp", map[string]string{"service.kubernetes.io/service-proxy-name": "xp"}, true},
		{"xp", nil, false},
		{"xp", map[string]string{"service.kubernetes.io/service-proxy-name": "other"}, false},
	} {
		if got := Selectors(tc.proxy).Matches(labels.Set(tc.lbls)); got != tc.want {
			t.Errorf("proxy %q labels %v: match %v, want %v", tc.proxy, tc.lbls, got, tc.want)
		}
	}
}

func TestUnwrapTombstone(t *testing.T) {
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "x"}}
	if got, ok := unwrap[*v1.Service](cache.DeletedFinalStateUnknown{Key: "ns/x", Obj: svc}); !ok || got != svc {
		t.Fatalf("tombstone not unwrapped")
	}
	if _, ok := unwrap[*v1.Service]("junk"); ok {
		t.Fatalf("junk unwrapped")
	}
}

// slowSink counts Services and is slow on the first one, so informer
// notifications queue up behind it.
type slowSink struct {
	recorder
	once     sync.Once
	services atomic.Int64
}

func (s *slowSink) UpsertService(*v1.Service) {
	s.once.Do(func() { time.Sleep(300 * time.Millisecond) })
	s.services.Add(1)
}

// TestFirstTriggerSeesEveryObject: the first trigger comes only after the
// handlers (not just the informer stores) have received the whole initial
// listing; a first sync from fewer objects would remove working rules.
func TestFirstTriggerSeesEveryObject(t *testing.T) {
	const n = 2000
	var objs []runtime.Object
	objs = append(objs, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	for i := range n {
		objs = append(objs, &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}})
	}
	sink := &slowSink{}
	seen := make(chan int64, 1)
	src := &Source{Client: fake.NewClientset(objs...), NodeName: "n1", Sink: sink,
		OnChange: func() {
			select {
			case seen <- sink.services.Load():
			default:
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = src.Run(ctx) }()
	select {
	case got := <-seen:
		if got != n {
			t.Fatalf("first trigger after %d of %d Services reached the sink", got, n)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no trigger")
	}
}

// TestCompactorKeepsWhatTheCoreReads transforms objects with everything the
// proxy never reads (targetRefs, hostnames, owner references, other
// annotations, kubectl's last-applied copy, managed fields) and checks that
// the core computes the same NodeState from the compacted objects as from
// the originals, that the dropped fields are gone, and that equal node names,
// zones and readiness flags share one value across slices.
func TestCompactorKeepsWhatTheCoreReads(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z1"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.1"}}}}
	mkSvc := func() *v1.Service {
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "u1", ResourceVersion: "7",
				Annotations:   map[string]string{lastApplied: `{"big":"copy"}`, "team": "a"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, Type: v1.ServiceTypeNodePort,
				Ports: []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.ProtocolTCP}}},
		}
	}
	mkSlice := func(name string, addrs ...string) *discovery.EndpointSlice {
		port, proto, pname := int32(8080), v1.ProtocolTCP, "http"
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{discovery.LabelServiceName: "web"},
				Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z", "other": "x"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "web"}}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
		}
		for i, a := range addrs {
			ready, serving, term := i%2 == 0, true, i == 2
			n, z, h := []string{"n1", "n2"}[i%2], "z1", "pod"
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a},
				Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
				NodeName:   &n, Zone: &z, Hostname: &h,
				TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-" + a},
				Hints:     &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}}})
		}
		return s
	}
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}
	slices := func() []*discovery.EndpointSlice {
		return []*discovery.EndpointSlice{mkSlice("web-1", "10.1.0.1", "10.1.0.2", "10.1.0.3"), mkSlice("web-2", "10.1.0.4", "10.1.0.5")}
	}
	want, err := core.Compute(opts, node, []*v1.Service{mkSvc()}, slices())
	if err != nil {
		t.Fatal(err)
	}
	c := &compactor{}
	svcObj, _ := c.transform(mkSvc())
	svc := svcObj.(*v1.Service)
	var compacted []*discovery.EndpointSlice
	for _, s := range slices() {
		o, _ := c.transform(s)
		compacted = append(compacted, o.(*discovery.EndpointSlice))
	}
	got, err := core.Compute(opts, node, []*v1.Service{svc}, compacted)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NodeState differs after compaction:\n got %+v\nwant %+v", got, want)
	}
	if _, ok := svc.Annotations[lastApplied]; ok || svc.Annotations["team"] != "a" || svc.ManagedFields != nil || svc.UID != "u1" || svc.ResourceVersion != "7" {
		t.Errorf("service after compaction: %+v", svc.ObjectMeta)
	}
	a, b := compacted[0], compacted[1]
	if len(a.Annotations) != 1 || a.Annotations["endpoints.kubernetes.io/last-change-trigger-time"] == "" || a.OwnerReferences != nil {
		t.Errorf("slice metadata after compaction: %+v", a.ObjectMeta)
	}
	for _, ep := range append(a.Endpoints, b.Endpoints...) {
		if ep.TargetRef != nil || ep.Hostname != nil {
			t.Errorf("endpoint %v keeps targetRef/hostname", ep.Addresses)
		}
	}
	if a.Endpoints[0].NodeName != b.Endpoints[0].NodeName || a.Endpoints[0].Zone != b.Endpoints[1].Zone ||
		a.Endpoints[0].Conditions.Ready != b.Endpoints[0].Conditions.Ready || a.Endpoints[0].Conditions.Ready == a.Endpoints[1].Conditions.Ready {
		t.Error("equal node names, zones and flags should share one value, different flags not")
	}
}
