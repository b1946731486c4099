// Package debug serves the running proxy's view of one Service — the four
// layers of `crossproxy explain` — over HTTP on a loopback address, so a
// person on the node can ask the proxy itself what it saw, computed and
// programmed instead of recomputing it with possibly different flags. It is
// off unless `crossproxy run --debug-address` enables it.
package debug

import (
	"cmp"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/platform"
)

// Store (a platform.ObjectSink itself) sits between an object source (informers, the manifest watcher) and
// the tracker: it forwards every change and keeps the latest Service and
// EndpointSlice objects, so the debug endpoint shows layers 1 and 2 exactly as
// the proxy received them. Objects are shared, never modified.
type Store struct {
	next platform.ObjectSink

	mu       sync.RWMutex
	node     *v1.Node
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]*discovery.EndpointSlice
}

// NewStore returns a Store that forwards to next.
func NewStore(next platform.ObjectSink) *Store {
	return &Store{
		next:     next,
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]*discovery.EndpointSlice{},
	}
}

func nameOf(o metav1.Object) types.NamespacedName {
	return types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
}

// SetNode records and forwards the Node.
func (s *Store) SetNode(node *v1.Node) {
	s.mu.Lock()
	s.node = node
	s.mu.Unlock()
	s.next.SetNode(node)
}

// UpsertService records and forwards a Service.
func (s *Store) UpsertService(svc *v1.Service) {
	s.mu.Lock()
	s.services[nameOf(svc)] = svc
	s.mu.Unlock()
	s.next.UpsertService(svc)
}

// DeleteService forgets and forwards a Service.
func (s *Store) DeleteService(svc *v1.Service) {
	s.mu.Lock()
	delete(s.services, nameOf(svc))
	s.mu.Unlock()
	s.next.DeleteService(svc)
}

// UpsertSlice records and forwards an EndpointSlice.
func (s *Store) UpsertSlice(es *discovery.EndpointSlice) {
	s.mu.Lock()
	s.slices[nameOf(es)] = es
	s.mu.Unlock()
	s.next.UpsertSlice(es)
}

// DeleteSlice forgets and forwards an EndpointSlice.
func (s *Store) DeleteSlice(es *discovery.EndpointSlice) {
	s.mu.Lock()
	delete(s.slices, nameOf(es))
	s.mu.Unlock()
	s.next.DeleteSlice(es)
}

// Objects returns the Service (nil when unknown) and its EndpointSlices,
// sorted by name.
func (s *Store) Objects(svc types.NamespacedName) (*v1.Service, []*discovery.EndpointSlice) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var list []*discovery.EndpointSlice
	for k, es := range s.slices {
		if k.Namespace == svc.Namespace && es.Labels[discovery.LabelServiceName] == svc.Name {
			list = append(list, es)
		}
	}
	slices.SortFunc(list, func(a, b *discovery.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return s.services[svc], list
}

// Node returns the last Node recorded, or nil.
func (s *Store) Node() *v1.Node {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.node
}

// Services returns the names of every Service recorded, sorted.
func (s *Store) Services() []types.NamespacedName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]types.NamespacedName, 0, len(s.services))
	for k := range s.services {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}
