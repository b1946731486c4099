package explain

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/platform"
)

// The fixtures: Service default/web (ClusterIP 10.96.0.10, port "http" 80 →
// targetPort "http", selector app=web), node n1 in zone a with 192.168.0.1,
// slices of port "http" 8080. Layer 3 always comes from the real core.

var webName = types.NamespacedName{Namespace: "default", Name: "web"}

func ptr[T any](v T) *T { return &v }

func testNode(name, zone string) *v1.Node { return testobj.Node(name, zone, "192.168.0.1") }

type svcMod func(*v1.Service)

func testService(mods ...svcMod) *v1.Service {
	s := testobj.Service("default", "web", "10.96.0.10")
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol}
	s.Spec.Selector = map[string]string{"app": "web"}
	for _, m := range mods {
		m(s)
	}
	return s
}

func nodePort(etpLocal bool) svcMod {
	return func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		if etpLocal {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}
	}
}

type epMod func(*discovery.Endpoint)

func notReady(e *discovery.Endpoint) { e.Conditions.Ready = ptr(false) }
func servingTerminating(e *discovery.Endpoint) {
	e.Conditions.Ready, e.Conditions.Serving, e.Conditions.Terminating = ptr(false), ptr(true), ptr(true)
}
func onNode(node, zone string) epMod {
	return func(e *discovery.Endpoint) { e.NodeName, e.Zone = ptr(node), ptr(zone) }
}
func hintZones(zones ...string) epMod {
	return func(e *discovery.Endpoint) {
		e.Hints = &discovery.EndpointHints{}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: z})
		}
	}
}

func ep(addr string, mods ...epMod) discovery.Endpoint {
	e := testobj.Endpoint(addr, "n1")
	e.Zone = ptr("a")
	for _, m := range mods {
		m(&e)
	}
	return e
}

// testSlice is an IPv4 slice of web with one port (name "http" unless given) 8080/TCP.
func testSlice(name, portName string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	s := testobj.Slice("default", name, "web", eps...)
	s.Ports[0].Name = ptr(portName)
	return s
}

func twoReady() []*discovery.EndpointSlice {
	return []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5"), ep("10.244.2.5", onNode("n2", "b")))}
}

// perfect is what a data plane that expresses st exactly would report.
func perfect(st *core.NodeState, svc types.NamespacedName) *platform.ProgrammedService {
	ps := &platform.ProgrammedService{Service: svc}
	for _, sp := range st.SortedPorts() {
		if sp.Key.Service != svc {
			continue
		}
		for _, f := range sp.Frontends {
			_, eps, verdict := frontendSet(sp, f)
			pf := platform.ProgrammedFrontend{Kind: f.Kind, Addr: f.Addr, Port: f.Port, Protocol: sp.Protocol}
			for _, e := range eps {
				pf.Endpoints = append(pf.Endpoints, e.AddrPort())
			}
			if len(eps) == 0 {
				pf.Verdict = verdict
			}
			ps.Frontends = append(ps.Frontends, pf)
		}
	}
	return ps
}

type testCase struct {
	name   string
	svc    *v1.Service // nil: not found
	slices []*discovery.EndpointSlice
	node   *v1.Node // default n1 in zone a
	opts   *core.Options
	// prog rewrites the perfectly programmed state; nil keeps it.
	prog func(*platform.ProgrammedService)
	// noProg leaves layer 4 unavailable; progFailed makes that a failed read.
	noProg     bool
	progFailed bool
	// first is the expected first mismatch ("" when the layers agree) and its layer.
	first      string
	firstLayer int
	// notes must each appear among the findings.
	notes []string
	// others are other proxies found on the node.
	others []platform.OtherProxy
}

func build(t *testing.T, tc testCase) *Report {
	t.Helper()
	node := tc.node
	if node == nil {
		node = testNode("n1", "a")
	}
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}
	if tc.opts != nil {
		opts = *tc.opts
	}
	var svcs []*v1.Service
	if tc.svc != nil {
		svcs = append(svcs, tc.svc)
	}
	st, err := core.Compute(opts, node, svcs, tc.slices)
	if err != nil {
		t.Fatalf("core.Compute: %v", err)
	}
	in := Input{Service: webName, NodeName: node.Name, Object: tc.svc, Slices: tc.slices, State: st, Backend: "fake", OtherProxies: tc.others}
	switch {
	case tc.progFailed:
		in.ProgrammedUnavailable, in.ProgrammedFailed = "read fake: table inet crossproxy has no frontend map: not programmed", true
	case tc.noProg:
		in.ProgrammedUnavailable = "backend for plan9: not supported on this platform"
	default:
		in.Programmed = perfect(st, webName)
		if tc.prog != nil {
			tc.prog(in.Programmed)
		}
	}
	return Build(in)
}

func TestBuildFindsFirstMismatch(t *testing.T) {
	cases := []testCase{
		{name: "healthy ClusterIP", svc: testService(), slices: twoReady()},
		{name: "kube-proxy beside crossproxy", svc: testService(), slices: twoReady(),
			others: []platform.OtherProxy{{Name: "kube-proxy", Evidence: []string{"nftables table ip kube-proxy"}}},
			first:  "another Service proxy programs this node too: kube-proxy (nftables table ip kube-proxy); it translates this Service's addresses its own way", firstLayer: 4},
		{name: "service missing", slices: twoReady(),
			first: "Service default/web does not exist", firstLayer: 1},
		{name: "headless is not proxied and not a mismatch", svc: testService(func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = v1.ClusterIPNone, []string{v1.ClusterIPNone}
		}), slices: twoReady(), notes: []string{"crossproxy does not proxy this Service: headless (clusterIP None)"}},
		{name: "rules left behind for an ignored service", svc: testService(func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }),
			prog: func(ps *platform.ProgrammedService) {
				ps.Frontends = []platform.ProgrammedFrontend{{Kind: core.FrontendClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Port: 80}}
			},
			first: "programmed rules hold 1 frontend for a Service that crossproxy does not proxy: 10.96.0.10:80/TCP", firstLayer: 4},
		{name: "invalid port is a declared problem", svc: testService(func(s *v1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{Name: "bad", Port: 70000, Protocol: v1.ProtocolTCP})
		}), slices: twoReady(),
			first: "Service default/web: spec.ports[1].port: 70000 is out of range 1-65535", firstLayer: 1},
		{name: "no ports", svc: testService(func(s *v1.Service) { s.Spec.Ports = nil }), slices: twoReady(),
			first: "the Service declares no ports", firstLayer: 1},
		{name: "family the node does not run", svc: testService(func(s *v1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "fd00::10", []string{"fd00::10"}, []v1.IPFamily{v1.IPv6Protocol}
		}), slices: twoReady(),
			first: "the Service has only IPv6 cluster IPs but this node runs IPv4", firstLayer: 1},
		{name: "selector matches nothing", svc: testService(),
			first: "no EndpointSlice is labelled kubernetes.io/service-name=web (does selector app=web match any pod?)", firstLayer: 2},
		{name: "no selector, no slices", svc: testService(func(s *v1.Service) { s.Spec.Selector = nil }),
			first: "no EndpointSlice is labelled kubernetes.io/service-name=web", firstLayer: 2,
			notes: []string{"no selector: its EndpointSlices are written by hand or by another controller, not derived from pods"}},
		{name: "empty slice", svc: testService(), slices: []*discovery.EndpointSlice{testSlice("web-abc", "http")},
			first: "EndpointSlice web-abc holds no endpoints", firstLayer: 2},
		{name: "slices of another family only", svc: testService(), slices: []*discovery.EndpointSlice{func() *discovery.EndpointSlice {
			s := testSlice("web-v6", "http", ep("fd00::5"))
			s.AddressType = discovery.AddressTypeIPv6
			return s
		}()},
			first: "none of the Service's EndpointSlices is proxied on this node (found: web-v6 (IPv6))", firstLayer: 2},
		{name: "headless-labelled slices are not served", svc: testService(), slices: func() []*discovery.EndpointSlice {
			s := testSlice("web-abc", "http", ep("10.244.1.5"))
			s.Labels[core.LabelHeadless] = ""
			return []*discovery.EndpointSlice{s}
		}(),
			first: "none of the Service's EndpointSlices is proxied on this node (found: web-abc (IPv4, ignored: labelled service.kubernetes.io/headless: endpoints of a headless Service are not proxied))", firstLayer: 2},
		{name: "targetPort name matches no slice port", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-7x2k", "web", ep("10.244.1.5"))},
			first:  `targetPort http matches no port in slice web-7x2k (Service port "http"/TCP; slice ports: "web" 8080/TCP)`, firstLayer: 2},
		{name: "numeric targetPort differs from the slice", svc: testService(func(s *v1.Service) { s.Spec.Ports[0].TargetPort = intstr.FromInt32(9090) }),
			slices: twoReady(),
			first:  `targetPort 9090 of Service port "http"/TCP, but slice web-abc publishes port 8080 for it`, firstLayer: 2},
		{name: "an invalid endpoint address is a published problem", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5"), ep("not-an-ip"))},
			first:  `EndpointSlice default/web-abc: endpoints[1].addresses[0]: "not-an-ip" is not a usable IP address; endpoint skipped`, firstLayer: 2},
		{name: "none ready", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5", notReady), ep("10.244.2.5", notReady))},
			first:  "none of the 2 endpoints is ready", firstLayer: 2},
		{name: "serving-terminating fallback is a note", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5", servingTerminating), ep("10.244.2.5", notReady))},
			notes:  []string{"no endpoint is ready: 1 endpoint serving but terminating take the traffic"}},
		{name: "publishNotReadyAddresses does not override the slice's conditions", svc: testService(func(s *v1.Service) { s.Spec.PublishNotReadyAddresses = true }),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5", notReady))},
			first:  "none of the 1 endpoint is ready", firstLayer: 2},
		{name: "internalTrafficPolicy Local without a local endpoint drops", svc: testService(func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}), slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.2.5", onNode("n2", "b")))},
			notes: []string{"port http/TCP IPv4: internalTrafficPolicy Local and no endpoint on node n1: connections from this node to 10.96.0.10:80 are dropped"}},
		{name: "externalTrafficPolicy Local without a local endpoint drops", svc: testService(nodePort(true)),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.2.5", onNode("n2", "b")))},
			notes:  []string{"port http/TCP IPv4: externalTrafficPolicy Local and no endpoint on node n1: external connections to NodePort 192.168.0.1:30080 are dropped"}},
		{name: "zone hints miss this zone", svc: testService(func(s *v1.Service) { s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameZone) }),
			node: testNode("n1", "b"),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http",
				ep("10.244.1.5", hintZones("a")), ep("10.244.1.6", hintZones("a")))},
			first: "no ready endpoint in zone b: using all zones", firstLayer: 3},
		{name: "zone hints used", svc: testService(func(s *v1.Service) { s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameZone) }),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http",
				ep("10.244.1.5", hintZones("a")), ep("10.244.2.5", onNode("n2", "b"), hintZones("b")))}},
		{name: "hints on some endpoints only", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.1.5", hintZones("a")), ep("10.244.2.5"))},
			first:  "port http/TCP IPv4: hints ignored: some ready endpoints have no forZones hint; all endpoints are used", firstLayer: 3},
		{name: "trafficDistribution without hints", svc: testService(func(s *v1.Service) { s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameZone) }),
			slices: twoReady(), notes: []string{"trafficDistribution PreferSameZone is set but no endpoint carries hints: all zones are used"}},
		{name: "programmed rules miss endpoints", svc: testService(), slices: twoReady(),
			prog: func(ps *platform.ProgrammedService) {
				ps.Frontends[0].Endpoints = nil
				ps.Frontends[0].Verdict = core.VerdictReject
			},
			first: "programmed rules miss 2 endpoints that the computed state has, for ClusterIP 10.96.0.10:80/TCP: 10.244.1.5:8080, 10.244.2.5:8080", firstLayer: 4},
		{name: "programmed rules hold an extra endpoint", svc: testService(), slices: twoReady(),
			prog: func(ps *platform.ProgrammedService) {
				ps.Frontends[0].Endpoints = append(ps.Frontends[0].Endpoints, netip.MustParseAddrPort("10.244.9.9:8080"))
			},
			first: "programmed rules hold 1 endpoint that the computed state does not have, for ClusterIP 10.96.0.10:80/TCP: 10.244.9.9:8080", firstLayer: 4},
		{name: "programmed rules miss a frontend", svc: testService(nodePort(false)), slices: twoReady(),
			prog:  func(ps *platform.ProgrammedService) { ps.Frontends = ps.Frontends[:1] },
			first: "programmed rules miss 1 frontend that the computed state has: NodePort 192.168.0.1:30080/TCP", firstLayer: 4},
		{name: "programmed rules hold an extra frontend", svc: testService(), slices: twoReady(),
			prog: func(ps *platform.ProgrammedService) {
				ps.Frontends = append(ps.Frontends, platform.ProgrammedFrontend{Kind: core.FrontendNodePort,
					Addr: netip.MustParseAddr("192.168.0.1"), Port: 30080, Protocol: v1.ProtocolTCP})
			},
			first: "programmed rules hold 1 frontend that the computed state does not have: 192.168.0.1:30080/TCP", firstLayer: 4},
		{name: "programmed verdict differs", svc: testService(func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}), slices: []*discovery.EndpointSlice{testSlice("web-abc", "http", ep("10.244.2.5", onNode("n2", "b")))},
			prog:  func(ps *platform.ProgrammedService) { ps.Frontends[0].Verdict = core.VerdictReject },
			first: "ClusterIP 10.96.0.10:80/TCP: the computed state drops new connections, the programmed rules reject new connections", firstLayer: 4},
		{name: "IPv4-mapped programmed addresses compare equal", svc: testService(), slices: twoReady(),
			prog: func(ps *platform.ProgrammedService) {
				for i, e := range ps.Frontends[0].Endpoints {
					ps.Frontends[0].Endpoints[i] = netip.AddrPortFrom(netip.AddrFrom16(e.Addr().As16()), e.Port())
				}
			}},
		{name: "layer 4 unavailable is a note", svc: testService(), slices: twoReady(), noProg: true,
			notes: []string{"layer 4 not read: backend for plan9: not supported on this platform"}},
		{name: "a failed read of layer 4 is a mismatch", svc: testService(), slices: twoReady(), progFailed: true,
			first: "layer 4 not read: read fake: table inet crossproxy has no frontend map: not programmed", firstLayer: 4},
		{name: "a failed read of layer 4 for an ignored service is a note", svc: testService(func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeExternalName
		}), progFailed: true,
			notes: []string{"layer 4 not read: read fake: table inet crossproxy has no frontend map: not programmed"}},
		{name: "stale connection is a note", svc: testService(), slices: twoReady(),
			prog: func(ps *platform.ProgrammedService) {
				ps.Connections = []platform.Connection{
					{Protocol: v1.ProtocolTCP, Client: netip.MustParseAddrPort("10.0.0.1:40000"), Frontend: netip.MustParseAddrPort("10.96.0.10:80"),
						Endpoint: netip.MustParseAddrPort("10.244.1.5:8080"), State: "ESTABLISHED"},
					{Protocol: v1.ProtocolUDP, Client: netip.MustParseAddrPort("10.0.0.1:40001"), Frontend: netip.MustParseAddrPort("10.96.0.10:80"),
						Endpoint: netip.MustParseAddrPort("10.244.7.7:8080")},
				}
				ps.Frontends = append(ps.Frontends, platform.ProgrammedFrontend{Kind: core.FrontendClusterIP,
					Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolUDP, Verdict: core.VerdictReject})
			},
			first: "programmed rules hold 1 frontend that the computed state does not have: 10.96.0.10:80/UDP", firstLayer: 4,
			notes: []string{"1 tracked connection still go to endpoints that are no longer programmed: UDP 10.0.0.1:40001 -> 10.244.7.7:8080 via 10.96.0.10:80"}},
		{name: "the earliest layer wins", svc: testService(),
			slices: []*discovery.EndpointSlice{testSlice("web-7x2k", "web", ep("10.244.1.5"))},
			prog: func(ps *platform.ProgrammedService) {
				ps.Frontends[0].Endpoints = []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080")}
				ps.Frontends[0].Verdict = ""
			},
			first: `targetPort http matches no port in slice web-7x2k (Service port "http"/TCP; slice ports: "web" 8080/TCP)`, firstLayer: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := build(t, tc)
			if tc.first == "" {
				if r.FirstMismatch != nil {
					t.Fatalf("want no mismatch, got layer %d: %s\nfindings: %v", r.FirstMismatch.Layer, r.FirstMismatch.Message, r.Findings)
				}
				if !r.OK() {
					t.Fatal("OK() is false without a mismatch")
				}
			} else {
				if r.FirstMismatch == nil {
					t.Fatalf("want mismatch %q, got none\nfindings: %v", tc.first, r.Findings)
				}
				if r.FirstMismatch.Message != tc.first || r.FirstMismatch.Layer != tc.firstLayer {
					t.Fatalf("first mismatch\n got layer %d: %s\nwant layer %d: %s\nfindings: %v", r.FirstMismatch.Layer,
						r.FirstMismatch.Message, tc.firstLayer, tc.first, r.Findings)
				}
			}
			for _, n := range tc.notes {
				if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Message == n && f.Severity == SeverityNote }) {
					t.Errorf("missing note %q\nfindings: %v", n, r.Findings)
				}
			}
			for i := 1; i < len(r.Findings); i++ {
				if r.Findings[i].Layer < r.Findings[i-1].Layer {
					t.Errorf("findings out of layer order: %v", r.Findings)
				}
			}
		})
	}
}

func TestLayersCarryTheObjects(t *testing.T) {
	svc := testService(nodePort(true), func(s *v1.Service) {
		s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
		s.Spec.TrafficDistribution = ptr(v1.ServiceTrafficDistributionPreferSameZone)
	})
	sl := testSlice("web-abc", "http", ep("10.244.1.5", hintZones("a")), ep("10.244.2.5", onNode("n2", "b"), hintZones("b")),
		ep("10.244.1.7", notReady, hintZones("a")))
	r := build(t, testCase{svc: svc, slices: []*discovery.EndpointSlice{sl}})

	d := r.Declared
	if !d.Found || d.Type != "NodePort" || d.ExternalTrafficPolicy != "Local" || d.InternalTrafficPolicy != "Cluster" ||
		d.TrafficDistribution != "PreferSameZone" || d.SessionAffinity != "ClientIP" || d.AffinityTimeoutSeconds != 10800 ||
		d.Selector["app"] != "web" || len(d.Ports) != 1 || d.Ports[0] != (DeclaredPort{Name: "http", Protocol: "TCP", Port: 80, TargetPort: "http", NodePort: 30080}) {
		t.Errorf("declared layer: %+v", d)
	}
	if len(r.Published.Slices) != 1 || len(r.Published.Slices[0].Endpoints) != 3 {
		t.Fatalf("published layer: %+v", r.Published)
	}
	e := r.Published.Slices[0].Endpoints[2]
	if e.Ready || !e.Serving || e.Terminating || e.Node != "n1" || e.Zone != "a" || !slices.Equal(e.HintZones, []string{"a"}) {
		t.Errorf("published endpoint: %+v", e)
	}
	c := r.Computed
	if !c.Available || c.Node != "n1" || c.Zone != "a" || len(c.Ports) != 1 {
		t.Fatalf("computed layer: %+v", c)
	}
	p := c.Ports[0]
	if p.Affinity != "ClientIP 10800s" || p.TopologyMode != "PreferSameZone" || p.ExternalTrafficPolicy != "Local" {
		t.Errorf("computed port: %+v", p)
	}
	want := []ComputedFrontend{
		{Kind: "ClusterIP", Address: "10.96.0.10:80", Protocol: "TCP", Set: "cluster", Endpoints: []string{"10.244.1.5:8080"}},
		{Kind: "NodePort", Address: "192.168.0.1:30080", Protocol: "TCP", Set: "local", Endpoints: []string{"10.244.1.5:8080"}},
	}
	if len(p.Frontends) != 2 || !equalFrontend(p.Frontends[0], want[0]) || !equalFrontend(p.Frontends[1], want[1]) {
		t.Errorf("computed frontends:\n got %+v\nwant %+v", p.Frontends, want)
	}
	var reasons []string
	for _, x := range p.Excluded {
		reasons = append(reasons, x.Address+" "+x.Set+" "+x.Reason)
	}
	for _, w := range []string{"10.244.1.7 all NotReady", "10.244.2.5 cluster OtherZone", "10.244.2.5 local OtherNode"} {
		if !slices.Contains(reasons, w) {
			t.Errorf("exclusion %q missing from %v", w, reasons)
		}
	}
	if !r.Programmed.Available || len(r.Programmed.Frontends) != 2 || r.Programmed.Backend != "fake" {
		t.Errorf("programmed layer: %+v", r.Programmed)
	}
	if !r.OK() {
		t.Errorf("unexpected mismatch: %v", r.FirstMismatch)
	}
}

func equalFrontend(a, b ComputedFrontend) bool {
	return a.Kind == b.Kind && a.Address == b.Address && a.Protocol == b.Protocol && a.Set == b.Set &&
		slices.Equal(a.Endpoints, b.Endpoints) && a.Verdict == b.Verdict
}

func TestComputedUnavailable(t *testing.T) {
	r := Build(Input{Service: webName, NodeName: "n1", Object: testService(), Slices: twoReady(), StateUnavailable: "node n1 not found"})
	if r.Computed.Available || r.Computed.Unavailable != "node n1 not found" {
		t.Errorf("computed: %+v", r.Computed)
	}
	if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Message == "layer 3 not computed: node n1 not found" }) {
		t.Errorf("findings: %v", r.Findings)
	}
	if !r.OK() {
		t.Errorf("a missing layer is not a mismatch: %v", r.FirstMismatch)
	}
	// Without a state, a headless Service is still recognised.
	h := testService(func(s *v1.Service) { s.Spec.ClusterIP = v1.ClusterIPNone })
	r = Build(Input{Service: webName, Object: h})
	if r.Declared.Ignored != "headless (clusterIP None)" {
		t.Errorf("ignored: %q", r.Declared.Ignored)
	}
}

func TestTextAndJSON(t *testing.T) {
	r := build(t, testCase{svc: testService(nodePort(false)),
		slices: []*discovery.EndpointSlice{testSlice("web-7x2k", "web", ep("10.244.1.5"))},
		prog: func(ps *platform.ProgrammedService) {
			ps.Connections = []platform.Connection{{Protocol: v1.ProtocolTCP, Client: netip.MustParseAddrPort("10.0.0.1:40000"),
				Frontend: netip.MustParseAddrPort("10.96.0.10:80"), Endpoint: netip.MustParseAddrPort("10.244.1.5:8080"), State: "SYN_SENT"}}
		}})
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		"Service default/web on node n1 (zone a)",
		"1. declared",
		`port "http" 80/TCP -> targetPort http, nodePort 30080`,
		"selector app=web",
		"2. published: 1 EndpointSlice",
		`slice web-7x2k (IPv4), ports "web" 8080/TCP`,
		"10.244.1.5  ready,serving  node n1  zone a",
		"3. computed for node n1 (families IPv4)",
		"ClusterIP 10.96.0.10:80/TCP -> cluster set empty: reject",
		`left out of every set: 10.244.1.5 (slice web-7x2k): NoMatchingPort: service port "http"/TCP (targetPort http) matches no port in slice web-7x2k`,
		"4. programmed in fake",
		"ClusterIP 10.96.0.10:80/TCP -> empty: reject",
		"connection TCP 10.0.0.1:40000 -> 10.96.0.10:80 -> 10.244.1.5:8080 SYN_SENT",
		"[2 published] mismatch: targetPort http matches no port in slice web-7x2k",
		"[3 computed] mismatch: port http/TCP IPv4 has no usable endpoint: connections to 10.96.0.10:80 are rejected",
		"FIRST MISMATCH (layer 2, published): targetPort http matches no port in slice web-7x2k",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not decode: %v\n%s", err, buf.String())
	}
	if back.FirstMismatch == nil || back.FirstMismatch.Message != r.FirstMismatch.Message || back.Service != "default/web" ||
		len(back.Computed.Ports) != 1 || back.Computed.Ports[0].Frontends[0].Verdict != "reject" ||
		back.Programmed.Connections[0].State != "SYN_SENT" || back.Published.Slices[0].Name != "web-7x2k" {
		t.Errorf("JSON round trip lost data:\n%s", buf.String())
	}

	ok := build(t, testCase{svc: testService(), slices: twoReady()})
	buf.Reset()
	if err := ok.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "OK: all four layers agree") {
		t.Errorf("healthy report:\n%s", buf.String())
	}
}
