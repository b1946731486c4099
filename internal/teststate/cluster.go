package teststate

import (
	"fmt"
	"math/rand"
	"net/netip"
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testobj"
)

// Layout is where a random cluster puts things: the node the proxy runs on
// and the other node, each node's pod prefix per family, the families its
// Services use, and the core's options.
type Layout struct {
	Node, Other *v1.Node
	// Pods maps a node name to its pod prefix per family. Endpoint
	// addresses are host 3 to 252 of these (host 2 is left to a Windows
	// node's source VIP).
	Pods     map[string]map[v1.IPFamily]netip.Prefix
	Families []v1.IPFamily
	Options  core.Options
}

// FlannelDualStack lays a cluster out as kubeadm with flannel does, dual
// stack: Services in 10.96.0.0/12 and fd00:96::/112, node-a's pods in
// 10.244.1.0/24 and fd00:244:0:1::/64, node-b's in 10.244.2.0/24 and
// fd00:244:0:2::/64, node addresses in 192.168.1.0/24 and fd00:192::/64,
// the proxy on node-a with ClusterCIDR local detection.
func FlannelDualStack() Layout {
	return Layout{
		Node:  testobj.Node("node-a", "zone-a", "192.168.1.10", "fd00:192::10"),
		Other: testobj.Node("node-b", "zone-b", "192.168.1.11", "fd00:192::11"),
		Pods: map[string]map[v1.IPFamily]netip.Prefix{
			"node-a": {v1.IPv4Protocol: netip.MustParsePrefix("10.244.1.0/24"), v1.IPv6Protocol: netip.MustParsePrefix("fd00:244:0:1::/64")},
			"node-b": {v1.IPv4Protocol: netip.MustParsePrefix("10.244.2.0/24"), v1.IPv6Protocol: netip.MustParsePrefix("fd00:244:0:2::/64")},
		},
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		Options: core.Options{
			IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
			LocalDetect: core.LocalDetect{Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{
				netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}},
		},
	}
}

// Cluster is a random cluster that property tests change step by step:
// Services of every type, with and without policies, affinity, source
// ranges and external IPs, and EndpointSlices with 0 to 40 endpoints on both
// nodes, some not ready and some terminating, all fed to a core.Tracker as
// the informers would feed it.
type Cluster struct {
	layout   Layout
	rng      *rand.Rand
	tracker  *core.Tracker
	services map[string]*v1.Service
	slices   map[string][]*discovery.EndpointSlice
	next     int
}

// NewCluster is a cluster of six random Services, the same for the same seed.
func NewCluster(t testing.TB, seed int64, layout Layout) *Cluster {
	t.Helper()
	tr, err := core.NewTracker(layout.Options)
	if err != nil {
		t.Fatalf("teststate: tracker: %v", err)
	}
	tr.SetNode(layout.Node)
	c := &Cluster{layout: layout, rng: rand.New(rand.NewSource(seed)), tracker: tr,
		services: map[string]*v1.Service{}, slices: map[string][]*discovery.EndpointSlice{}}
	for range 6 {
		c.upsert(c.newService())
	}
	return c
}

// Snapshot is the Tracker's snapshot: the node's state and what changed
// since the last one.
func (c *Cluster) Snapshot() (*core.NodeState, core.Changes) { return c.tracker.Snapshot() }

// ForceFull makes the next snapshot ask for a full sync, as the runner's
// periodic sync does.
func (c *Cluster) ForceFull() { c.tracker.ForceFull() }

// Step makes one to three random changes: a Service added or removed, its
// endpoints or its spec changed.
func (c *Cluster) Step() {
	for n := 1 + c.rng.Intn(3); n > 0; n-- {
		c.change()
	}
}

func (c *Cluster) newService() (*v1.Service, []*discovery.EndpointSlice) {
	c.next++
	name := fmt.Sprintf("svc-%d", c.next)
	svc := testobj.Service("default", name, fmt.Sprintf("10.96.%d.%d", c.next/200, c.next%200+1))
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
	if len(c.layout.Families) > 1 && c.rng.Intn(3) == 0 {
		svc.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, fmt.Sprintf("fd00:96::%x", c.next))
	}
	c.mutateService(svc)
	return svc, c.slicesFor(svc)
}

// mutateService picks a type, policies, affinity and source ranges at
// random (on Linux, affinity and source ranges move a port between the
// shared-map layout and chains of its own).
func (c *Cluster) mutateService(svc *v1.Service) {
	r := c.rng
	svc.Spec.Type = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer}[r.Intn(3)]
	svc.Spec.Ports = svc.Spec.Ports[:1]
	if r.Intn(3) == 0 {
		svc.Spec.Ports = append(svc.Spec.Ports, v1.ServicePort{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(5353)})
	}
	svc.Status = v1.ServiceStatus{}
	svc.Spec.ExternalTrafficPolicy, svc.Spec.LoadBalancerSourceRanges, svc.Spec.HealthCheckNodePort = "", nil, 0
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].NodePort = 0
	}
	if svc.Spec.Type != v1.ServiceTypeClusterIP {
		for i := range svc.Spec.Ports {
			svc.Spec.Ports[i].NodePort = int32(30000 + c.next*2 + i)
		}
		svc.Spec.ExternalTrafficPolicy = []v1.ServiceExternalTrafficPolicy{v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal}[r.Intn(2)]
	}
	if svc.Spec.Type == v1.ServiceTypeLoadBalancer {
		svc.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: fmt.Sprintf("198.51.100.%d", c.next%250+1)}}
		if svc.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal {
			svc.Spec.HealthCheckNodePort = int32(32000 + c.next)
		}
		if r.Intn(3) == 0 {
			svc.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24"}
		}
	}
	svc.Spec.ExternalIPs = nil
	if r.Intn(5) == 0 {
		svc.Spec.ExternalIPs = []string{fmt.Sprintf("192.0.2.%d", c.next%250+1)}
	}
	svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig = v1.ServiceAffinityNone, nil
	if r.Intn(4) == 0 {
		svc.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		svc.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: testobj.Ptr(int32(60 + r.Intn(100)))}}
	}
	svc.Spec.InternalTrafficPolicy = nil
	if r.Intn(5) == 0 {
		svc.Spec.InternalTrafficPolicy = testobj.Ptr(v1.ServiceInternalTrafficPolicyLocal)
	}
}

// slicesFor makes the Service's EndpointSlices, one per family.
func (c *Cluster) slicesFor(svc *v1.Service) []*discovery.EndpointSlice {
	var out []*discovery.EndpointSlice
	nodes := []string{c.layout.Node.Name, c.layout.Other.Name}
	for _, fam := range svc.Spec.IPFamilies {
		n := c.rng.Intn(41)
		if c.rng.Intn(4) == 0 {
			n = c.rng.Intn(3)
		}
		sl := testobj.Slice(svc.Namespace, fmt.Sprintf("%s-%s", svc.Name, strings.ToLower(string(fam))), svc.Name)
		sl.Ports = []discovery.EndpointPort{testobj.SlicePort("http", v1.ProtocolTCP, 8080), testobj.SlicePort("dns", v1.ProtocolUDP, 5353)}
		if fam == v1.IPv6Protocol {
			sl.AddressType = discovery.AddressTypeIPv6
		}
		seen := map[netip.Addr]bool{}
		for range n {
			node := nodes[c.rng.Intn(2)]
			addr := hostIn(c.layout.Pods[node][fam], 3+c.rng.Intn(250))
			if seen[addr] {
				continue
			}
			seen[addr] = true
			e := testobj.Endpoint(addr.String(), node)
			switch c.rng.Intn(8) {
			case 0:
				e.Conditions = discovery.EndpointConditions{Ready: testobj.Ptr(false), Serving: testobj.Ptr(true), Terminating: testobj.Ptr(true)}
			case 1:
				e.Conditions = discovery.EndpointConditions{Ready: testobj.Ptr(false)}
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		out = append(out, sl)
	}
	return out
}

// hostIn is host number i of prefix p.
func hostIn(p netip.Prefix, i int) netip.Addr {
	a := p.Addr().As16()
	if p.Addr().Is4() {
		b := p.Addr().As4()
		b[3] += byte(i)
		return netip.AddrFrom4(b)
	}
	a[15] += byte(i)
	return netip.AddrFrom16(a)
}

// LocalAddresses are the addresses Step may give endpoints on this node in
// family fam: what a Windows test creates as the CNI's local endpoints.
func (c *Cluster) LocalAddresses(fam v1.IPFamily) []netip.Addr {
	p, ok := c.layout.Pods[c.layout.Node.Name][fam]
	if !ok {
		return nil
	}
	out := make([]netip.Addr, 0, 250)
	for i := 3; i < 253; i++ {
		out = append(out, hostIn(p, i))
	}
	return out
}

func (c *Cluster) upsert(svc *v1.Service, slices []*discovery.EndpointSlice) {
	for _, old := range c.slices[svc.Name] {
		c.tracker.DeleteSlice(old)
	}
	c.services[svc.Name], c.slices[svc.Name] = svc, slices
	c.tracker.UpsertService(svc)
	for _, s := range slices {
		c.tracker.UpsertSlice(s)
	}
}

func (c *Cluster) change() {
	names := make([]string, 0, len(c.services))
	for n := range c.services {
		names = append(names, n)
	}
	sort.Strings(names)
	switch op := c.rng.Intn(10); {
	case op < 2 || len(names) == 0:
		c.upsert(c.newService())
	case op < 3:
		n := names[c.rng.Intn(len(names))]
		for _, s := range c.slices[n] {
			c.tracker.DeleteSlice(s)
		}
		c.tracker.DeleteService(c.services[n])
		delete(c.services, n)
		delete(c.slices, n)
	case op < 7:
		n := names[c.rng.Intn(len(names))]
		c.upsert(c.services[n], c.slicesFor(c.services[n]))
	default:
		n := names[c.rng.Intn(len(names))]
		svc := c.services[n].DeepCopy()
		c.mutateService(svc)
		c.upsert(svc, c.slices[n])
	}
}
