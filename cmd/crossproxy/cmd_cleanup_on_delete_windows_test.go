//go:build windows && fakehns

package main

import (
	"context"
	"net/netip"
	"os"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/teststate"
	"github.com/crossproxy/crossproxy/platform"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// TestCleanupNodeRemovesHNSState: what the cleanup-on-delete container does
// on a Windows node once its DaemonSet is deleted, in the Windows binary
// (under Wine, against the fake HNS): a proxy process programmed a Service
// (its load balancer and the remote endpoint of a pod on another node) and
// exited; the cleanup, a new process with only the ledger in ProgramData,
// removes both, and leaves the load balancer crossproxy did not make and
// the CNI's local endpoint.
func TestCleanupNodeRemovesHNSState(t *testing.T) {
	dir, err := os.MkdirTemp("", "xp-cleanup-") // t.TempDir's cleanup fails under Wine
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Setenv("ProgramData", dir)
	const network = "crossproxy-test"
	fake := hns.NewFake(hns.Network{Name: network, Type: hns.NetworkL2Bridge}, hns.AllFeatures(),
		hns.Endpoint{Name: "pod-on-this-node", IP: netip.MustParseAddr("10.244.1.5")})
	fakeHNS = fake
	t.Cleanup(func() { fakeHNS = nil })
	ctx := context.Background()
	log := logrus.New()

	// Another proxy's load balancer, on another VIP: not crossproxy's.
	foreign, err := fake.CreateLoadBalancer(ctx, hns.LoadBalancer{Protocol: hns.ProtocolTCP,
		FrontendVIPs: []netip.Addr{netip.MustParseAddr("10.96.0.99")}, ExternalPort: 80, InternalPort: 80})
	if err != nil {
		t.Fatal(err)
	}

	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-a"}, Spec: v1.NodeSpec{PodCIDR: "10.244.1.0/24", PodCIDRs: []string{"10.244.1.0/24"}},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.11"}}}}
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: 80}}}}
	slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("win-a"), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.244.2.7"}, NodeName: ptr.To("win-b"), Conditions: discovery.EndpointConditions{Ready: ptr.To(true)}},
		}}
	st := teststate.Compute(t, core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}, node, svc, slice)

	proxy, err := newBackend(platform.BackendConfig{NetworkName: network}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if err := proxy.Close(); err != nil {
		t.Fatal(err)
	}
	eps, lbs := fake.State()
	if len(lbs) != 2 || len(eps) != 2 {
		t.Fatalf("after the proxy's sync: %d load balancers, %d endpoints, want 2 and 2 (ours and the foreign one; the local and a remote endpoint)\n%v\n%v", len(lbs), len(eps), lbs, eps)
	}

	if err := cleanupNode(ctx, platform.BackendConfig{NetworkName: network}, log); err != nil {
		t.Fatal(err)
	}
	eps, lbs = fake.State()
	if len(lbs) != 1 || lbs[0].ID != foreign.ID {
		t.Errorf("load balancers after the cleanup: %v, want only the foreign %s", lbs, foreign.ID)
	}
	if len(eps) != 1 || eps[0].Remote || eps[0].IP != netip.MustParseAddr("10.244.1.5") {
		t.Errorf("endpoints after the cleanup: %v, want only the CNI's local one", eps)
	}
}
