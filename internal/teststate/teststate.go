// Package teststate builds the NodeStates that backend tests start from
// through the core itself (core.Compute), from the Kubernetes objects a
// cluster would hold, so no backend is tested on a state the core would
// never produce. It is for tests only.
package teststate

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/crossproxy/crossproxy/core"
)

// Compute is the NodeState of node for the Services and EndpointSlices in
// objects (each a *v1.Service or a *discovery.EndpointSlice); it fails the
// test on any other object or when the core refuses the options.
func Compute(t testing.TB, opts core.Options, node *v1.Node, objects ...any) *core.NodeState {
	t.Helper()
	var svcs []*v1.Service
	var slices []*discovery.EndpointSlice
	for _, o := range objects {
		switch o := o.(type) {
		case *v1.Service:
			svcs = append(svcs, o)
		case *discovery.EndpointSlice:
			slices = append(slices, o)
		default:
			t.Fatalf("teststate: %T is neither a Service nor an EndpointSlice", o)
		}
	}
	st, err := core.Compute(opts, node, svcs, slices)
	if err != nil {
		t.Fatalf("teststate: compute the node state: %v", err)
	}
	return st
}
