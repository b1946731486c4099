package kube

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
// proxy never reads (targetRefs, hostnames, owner references, other labels
// and annotations, slice UIDs, kubectl's last-applied copy, managed fields)
// and checks that the core computes the same NodeState from the compacted
// objects as from the originals (including a headless Service's slice it
// ignores), that the objects differ from the originals only by the dropped
// fields, that endpoint arrays are exactly sized, and that equal node names,
// zones, namespaces, readiness flags and enumerated values share one value
// across objects.
func TestCompactorKeepsWhatTheCoreReads(t *testing.T) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{v1.LabelTopologyZone: "z1"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.1"}}}}
	mkSvc := func(name string) *v1.Service {
		itp, fp := v1.ServiceInternalTrafficPolicyCluster, v1.IPFamilyPolicySingleStack
		return &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: strings.Clone("ns"), Name: name, UID: "u-" + types.UID(name), ResourceVersion: "7",
				Annotations:   map[string]string{lastApplied: `{"big":"copy"}`, "team": "a"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, Type: v1.ServiceType(strings.Clone("NodePort")),
				InternalTrafficPolicy: &itp, IPFamilyPolicy: &fp, IPFamilies: []v1.IPFamily{v1.IPFamily(strings.Clone("IPv4"))},
				Ports: []v1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: v1.Protocol(strings.Clone("TCP"))}}},
		}
	}
	mkSlice := func(svc, name string, addrs ...string) *discovery.EndpointSlice {
		port, proto, pname := int32(8080), v1.Protocol(strings.Clone("TCP")), "http"
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: strings.Clone("ns"), Name: name, GenerateName: svc + "-", UID: "u-" + types.UID(name),
				Labels:          map[string]string{discovery.LabelServiceName: svc, discovery.LabelManagedBy: "endpointslice-controller.k8s.io"},
				Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z", "other": "x"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: svc}}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
		}
		for i, a := range addrs {
			ready, serving, term := i%2 == 0, true, i == 2
			n, z, h := []string{"n1", "n2"}[i%2], "z1", "pod"
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: strings.Split(a, ","),
				Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term},
				NodeName:   &n, Zone: &z, Hostname: &h,
				TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "pod-" + a},
				Hints:     &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z1"}}}})
		}
		return s
	}
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}
	services := func() []*v1.Service { return []*v1.Service{mkSvc("web"), mkSvc("db")} }
	slices := func() []*discovery.EndpointSlice {
		headless := mkSlice("db", "db-1", "10.1.1.1")
		headless.Labels[core.LabelHeadless] = ""
		return []*discovery.EndpointSlice{mkSlice("web", "web-1", "10.1.0.1", "10.1.0.2,10.1.0.9", "10.1.0.3"),
			mkSlice("web", "web-2", "10.1.0.4", "10.1.0.5"), headless}
	}
	want, err := core.Compute(opts, node, services(), slices())
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Ignored) != 1 {
		t.Fatalf("the headless slice should be ignored: %+v", want.Ignored)
	}
	c := &compactor{}
	var svcs []*v1.Service
	for _, s := range services() {
		o, _ := c.transform(s)
		svcs = append(svcs, o.(*v1.Service))
	}
	var compacted []*discovery.EndpointSlice
	for _, s := range slices() {
		o, _ := c.transform(s)
		compacted = append(compacted, o.(*discovery.EndpointSlice))
	}
	got, err := core.Compute(opts, node, svcs, compacted)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("NodeState differs after compaction:\n got %+v\nwant %+v", got, want)
	}

	// Everything but the dropped fields is as it was.
	for i, orig := range services() {
		orig.ManagedFields = nil
		delete(orig.Annotations, lastApplied)
		if !reflect.DeepEqual(svcs[i], orig) {
			t.Errorf("service after compaction:\n got %+v\nwant %+v", svcs[i], orig)
		}
	}
	for i, orig := range slices() {
		orig.ManagedFields, orig.OwnerReferences, orig.UID, orig.GenerateName = nil, nil, "", ""
		delete(orig.Labels, discovery.LabelManagedBy)
		delete(orig.Annotations, "other")
		for j := range orig.Endpoints {
			orig.Endpoints[j].TargetRef, orig.Endpoints[j].Hostname = nil, nil
		}
		if !reflect.DeepEqual(compacted[i], orig) {
			t.Errorf("slice after compaction:\n got %+v\nwant %+v", compacted[i], orig)
		}
		if ep := compacted[i].Endpoints; cap(ep) != len(ep) {
			t.Errorf("slice %s: endpoint array of %d for %d endpoints", orig.Name, cap(ep), len(ep))
		}
	}

	// Equal values share one copy; different flags do not.
	a, b := compacted[0], compacted[1]
	if a.Endpoints[0].NodeName != b.Endpoints[0].NodeName || a.Endpoints[0].Zone != b.Endpoints[1].Zone ||
		a.Endpoints[0].Conditions.Ready != b.Endpoints[0].Conditions.Ready || a.Endpoints[0].Conditions.Ready == a.Endpoints[1].Conditions.Ready ||
		a.Ports[0].Protocol != b.Ports[0].Protocol || a.Ports[0].Name != b.Ports[0].Name {
		t.Error("equal node names, zones, flags, protocols and port names should share one value, different flags not")
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	if !same(a.Namespace, b.Namespace) || !same(a.Namespace, svcs[0].Namespace) || !same(string(svcs[0].Spec.Type), string(svcs[1].Spec.Type)) ||
		svcs[0].Spec.IPFamilyPolicy != svcs[1].Spec.IPFamilyPolicy || &svcs[0].Spec.IPFamilies[0] != &svcs[1].Spec.IPFamilies[0] ||
		!same(string(svcs[0].Spec.Ports[0].Protocol), string(svcs[1].Spec.Ports[0].Protocol)) {
		t.Error("equal namespaces and enumerated values should share one copy")
	}
}
