package core

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/internal/testobj"
)

// Builders for compact test tables. Defaults: namespace "default", a
// ClusterIP Service with IPv4 ClusterIP 10.96.0.1 and one TCP port "http"
// 80 → targetPort "http"; slices carry port "http" 8080 TCP.

func ptr[T any](v T) *T { return &v }

// testNode is node name in zone (empty: none) with InternalIPs addrs
// ("ext:ADDR": an ExternalIP).
func testNode(name, zone string, addrs ...string) *v1.Node { return testobj.Node(name, zone, addrs...) }

// defaultNode is node "n1" in zone "a" with InternalIPs 192.168.0.1 and fd00::1.
func defaultNode() *v1.Node { return testNode("n1", "a", "192.168.0.1", "fd00::1") }

type svcMod func(*v1.Service)

// testService builds a ClusterIP Service. "web" gets 10.96.0.1; any other
// name its own address derived from the name, since two Services never share
// a clusterIP (the core leaves the newer one's port out if they do).
func testService(name string, mods ...svcMod) *v1.Service {
	cip := "10.96.0.1"
	if name != "web" {
		h := fnv.New32a()
		h.Write([]byte(name))
		n := h.Sum32()
		cip = fmt.Sprintf("10.96.%d.%d", 1+(n>>8)%250, 2+n%250)
	}
	s := testobj.Service("default", name, cip)
	for _, m := range mods {
		m(s)
	}
	return s
}

func clusterIPs(ips ...string) svcMod {
	return func(s *v1.Service) {
		s.Spec.ClusterIPs = ips
		s.Spec.ClusterIP = ""
		if len(ips) > 0 {
			s.Spec.ClusterIP = ips[0]
		}
	}
}

// created sets the creation time to minute m of 2026, to order Services by age.
func created(m int) svcMod {
	return func(s *v1.Service) {
		s.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, m, 0, 0, time.UTC))
	}
}

func svcType(t v1.ServiceType) svcMod { return func(s *v1.Service) { s.Spec.Type = t } }

func nodePort(n int32) svcMod {
	return func(s *v1.Service) {
		if s.Spec.Type == v1.ServiceTypeClusterIP {
			s.Spec.Type = v1.ServiceTypeNodePort
		}
		s.Spec.Ports[0].NodePort = n
	}
}

func svcPorts(ports ...v1.ServicePort) svcMod { return func(s *v1.Service) { s.Spec.Ports = ports } }

func sport(name string, proto v1.Protocol, port int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: port, TargetPort: intstr.FromString(name)}
}

func itpLocal() svcMod {
	return func(s *v1.Service) { s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal) }
}

func etpLocal() svcMod {
	return func(s *v1.Service) { s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal }
}

func externalIPs(ips ...string) svcMod { return func(s *v1.Service) { s.Spec.ExternalIPs = ips } }

// loadBalancer makes the Service a LoadBalancer with NodePort 30080 and ingress
// entries written "ip", "ip/Proxy" or "host:name".
func loadBalancer(ingress ...string) svcMod {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.Ports[0].NodePort = 30080
		for _, in := range ingress {
			var ing v1.LoadBalancerIngress
			switch {
			case strings.HasPrefix(in, "host:"):
				ing.Hostname = strings.TrimPrefix(in, "host:")
			case strings.HasSuffix(in, "/Proxy"):
				ing.IP, ing.IPMode = strings.TrimSuffix(in, "/Proxy"), ptr(v1.LoadBalancerIPModeProxy)
			case strings.HasSuffix(in, "/VIP"):
				ing.IP, ing.IPMode = strings.TrimSuffix(in, "/VIP"), ptr(v1.LoadBalancerIPModeVIP)
			default:
				ing.IP = in
			}
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, ing)
		}
	}
}

func sourceRanges(r ...string) svcMod {
	return func(s *v1.Service) { s.Spec.LoadBalancerSourceRanges = r }
}

func annotate(k, v string) svcMod {
	return func(s *v1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

func hcPort(p int32) svcMod { return func(s *v1.Service) { s.Spec.HealthCheckNodePort = p } }

func affinity(timeout *int32) svcMod {
	return func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		if timeout != nil {
			s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: timeout}}
		}
	}
}

func svcLabel(k, v string) svcMod {
	return func(s *v1.Service) {
		if s.Labels == nil {
			s.Labels = map[string]string{}
		}
		s.Labels[k] = v
	}
}

func publishNotReady() svcMod { return func(s *v1.Service) { s.Spec.PublishNotReadyAddresses = true } }

type epMod func(*discovery.Endpoint)

// ep is an endpoint on node (empty: none) with nil conditions.
func ep(addr, node string, mods ...epMod) discovery.Endpoint {
	e := testobj.Endpoint(addr, node)
	for _, m := range mods {
		m(&e)
	}
	return e
}

func notReady(e *discovery.Endpoint) { e.Conditions.Ready = ptr(false) }

// termServing is a terminating endpoint that still serves.
func termServing(e *discovery.Endpoint) {
	e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)}
}

// termGone is a terminating endpoint that no longer serves.
func termGone(e *discovery.Endpoint) {
	e.Conditions = discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(false), Terminating: ptr(true)}
}

func inZone(z string) epMod { return func(e *discovery.Endpoint) { e.Zone = ptr(z) } }

func forZones(z ...string) epMod {
	return func(e *discovery.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discovery.EndpointHints{}
		}
		for _, n := range z {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: n})
		}
	}
}

func forNodes(n ...string) epMod {
	return func(e *discovery.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discovery.EndpointHints{}
		}
		for _, x := range n {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: x})
		}
	}
}

func eport(name string, proto v1.Protocol, port int32) discovery.EndpointPort {
	return testobj.SlicePort(name, proto, port)
}

// testSlice is an IPv4 slice of Service svc with port "http" 8080/TCP unless
// ports are given with withSlicePorts.
func testSlice(name, svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return testobj.Slice("default", name, svc, eps...)
}

func v6(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	s.AddressType = discovery.AddressTypeIPv6
	return s
}

func withSlicePorts(s *discovery.EndpointSlice, ports ...discovery.EndpointPort) *discovery.EndpointSlice {
	s.Ports = ports
	return s
}

func svcs(s ...*v1.Service) []*v1.Service                              { return s }
func eslices(s ...*discovery.EndpointSlice) []*discovery.EndpointSlice { return s }

func mustCompute(t testing.TB, opts Options, node *v1.Node, services []*v1.Service, sl []*discovery.EndpointSlice) *NodeState {
	t.Helper()
	st, err := Compute(opts, node, services, sl)
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	return st
}

func key(svc, port string, proto v1.Protocol, fam v1.IPFamily) PortKey {
	return PortKey{Service: types.NamespacedName{Namespace: "default", Name: svc}, PortName: port, Protocol: proto, Family: fam}
}

// httpV4 is the key of the default port of Service svc.
func httpV4(svc string) PortKey { return key(svc, "http", v1.ProtocolTCP, v1.IPv4Protocol) }

func mustPort(t testing.TB, st *NodeState, k PortKey) *ServicePort {
	t.Helper()
	p := st.Ports[k]
	if p == nil {
		var have []string
		for _, q := range st.SortedPorts() {
			have = append(have, q.Key.String())
		}
		t.Fatalf("port %s missing; have %v; problems %v; ignored %v", k, have, st.Problems, st.Ignored)
	}
	return p
}

// eps renders endpoints as "addr:port" strings for comparisons.
func eps(list []Endpoint) string {
	var out []string
	for _, e := range list {
		out = append(out, e.AddrPort().String())
	}
	return strings.Join(out, " ")
}

func frontends(list []Frontend) string {
	var out []string
	for _, f := range list {
		out = append(out, f.String())
	}
	return strings.Join(out, ", ")
}

func exclusions(list []Exclusion) string {
	var out []string
	for _, x := range list {
		out = append(out, fmt.Sprintf("%s:%d/%s/%s", x.Addr, x.Port, x.Set, x.Reason))
	}
	return strings.Join(out, " ")
}

func problemFields(list []Problem) string {
	var out []string
	for _, p := range list {
		out = append(out, p.Kind+" "+p.Object+" "+p.Field)
	}
	return strings.Join(out, "; ")
}

func prefixes(list []netip.Prefix) string {
	var out []string
	for _, p := range list {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}

func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
