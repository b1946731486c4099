//go:build integration && linux

package integration

import (
	"net"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFollowsServicesAndEndpointSlices: creates, updates and deletes of
// Services and EndpointSlices reach the kernel, checked with connections from
// the client namespace through the node's rules.
func TestFollowsServicesAndEndpointSlices(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	be := backendAddrs

	svc := e.service("web")
	slice := e.createSlice(e.endpointSlice("web", "web-1", be[0]))
	e.lab.waitBackends(t, addr(svc), be[0])

	// Scale out, then replace.
	slice.Endpoints = e.endpointSlice("web", "web-1", be[0], be[1]).Endpoints
	slice = e.updateSlice(slice)
	e.lab.waitBackends(t, addr(svc), be[0], be[1])
	slice.Endpoints = e.endpointSlice("web", "web-1", be[2]).Endpoints
	e.updateSlice(slice)
	e.lab.waitBackends(t, addr(svc), be[2])

	// A second slice of the same Service adds to the first.
	e.createSlice(e.endpointSlice("web", "web-2", be[0]))
	e.lab.waitBackends(t, addr(svc), be[0], be[2])

	// A Service update (its port) moves the frontend.
	cur, err := e.admin.CoreV1().Services("default").Get(e.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ports[0].Port = 81
	if _, err := e.admin.CoreV1().Services("default").Update(e.ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	port81 := net.JoinHostPort(svc.Spec.ClusterIP, "81")
	e.lab.waitBackends(t, port81, be[0], be[2])
	e.lab.waitBackends(t, addr(svc))

	// Deleting the slices leaves the Service without endpoints: rejected.
	for _, n := range []string{"web-1", "web-2"} {
		if err := e.admin.DiscoveryV1().EndpointSlices("default").Delete(e.ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.lab.waitBackends(t, port81)

	// Back with endpoints, then the Service goes away.
	e.createSlice(e.endpointSlice("web", "web-3", be[1]))
	e.lab.waitBackends(t, port81, be[1])
	if err := e.admin.CoreV1().Services("default").Delete(e.ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.lab.waitBackends(t, port81)
	if strings.Contains(e.lab.nft(t), svc.Spec.ClusterIP) {
		t.Fatalf("ClusterIP %s still in the ruleset after the Service was deleted", svc.Spec.ClusterIP)
	}
}

// TestFollowsNode: NodePorts answer on the Node's primary address, and move
// when the Node's status addresses change.
func TestFollowsNode(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	run(t, "ip", "-n", e.lab.Node, "addr", "add", nodeAddr2+"/24", "dev", e.lab.ClientLink())

	svc := e.service("np", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeNodePort })
	e.createSlice(e.endpointSlice("np", "np-1", backendAddrs[0]))
	np := strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
	e.lab.waitBackends(t, net.JoinHostPort(nodeAddr, np), backendAddrs[0])

	n, err := e.admin.CoreV1().Nodes().Get(e.ctx, e.node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeAddr2}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.lab.waitBackends(t, net.JoinHostPort(nodeAddr2, np), backendAddrs[0])
	e.lab.waitBackends(t, net.JoinHostPort(nodeAddr, np))
}

// TestIgnoresHeadlessAndOtherProxies: Services that belong to another proxy
// (service.kubernetes.io/service-proxy-name) and headless Services get no rule.
func TestIgnoresHeadlessAndOtherProxies(t *testing.T) {
	e := newEnv(t)
	e.startProxy()

	other := e.service("other", func(s *v1.Service) {
		s.Labels = map[string]string{"service.kubernetes.io/service-proxy-name": "someone-else"}
	})
	oslice := e.endpointSlice("other", "other-1", backendAddrs[1])
	oslice.Labels["service.kubernetes.io/service-proxy-name"] = "someone-else"
	e.createSlice(oslice)

	e.service("hl", func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone })
	hs := e.endpointSlice("hl", "hl-1", backendAddrs[2])
	hs.Labels[v1.IsHeadlessService] = ""
	e.createSlice(hs)

	// A proxied Service created last: once it works, the others were seen.
	web := e.service("web")
	e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(web), backendAddrs[0])

	if _, err := e.lab.backendOf(addr(other)); err == nil {
		t.Fatalf("Service of another proxy answered at %s", addr(other))
	}
	rules := e.lab.nft(t)
	if strings.Contains(rules, other.Spec.ClusterIP) {
		t.Fatalf("ruleset has the ClusterIP %s of a Service labelled for another proxy", other.Spec.ClusterIP)
	}
	if strings.Contains(rules, backendAddrs[1]) || strings.Contains(rules, backendAddrs[2]) {
		t.Fatalf("ruleset has endpoints of the ignored Services:\n%s", rules)
	}
	// Programmed: default/kubernetes and web, one port each.
	if v, ok := metric(t, e.mport, `crossproxy_programmed_objects{kind="service_ports"}`); !ok || v != 2 {
		t.Fatalf("programmed service ports %v (found %v), want 2", v, ok)
	}

	// With --proxy-name, the same proxy serves exactly the labelled one.
	e.proxy.stop()
	e.startProxy("--proxy-name", "someone-else")
	e.lab.waitBackends(t, addr(other), backendAddrs[1])
	// The restarted proxy's first sync replaces the old view: web (no label)
	// is no longer this proxy's.
	e.lab.waitBackends(t, addr(web))
}
