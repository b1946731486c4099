package kube

import (
	"context"
	"fmt"
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
