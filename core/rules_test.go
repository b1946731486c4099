package core

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// ruleCase is one row of a rule table: inputs and a check of the NodeState.
type ruleCase struct {
	name     string
	opts     Options
	node     *v1.Node // nil: defaultNode()
	services []*v1.Service
	slices   []*discovery.EndpointSlice
	check    func(t *testing.T, st *NodeState)
}

func runCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.node
			if node == nil {
				node = defaultNode()
			}
			st := mustCompute(t, tc.opts, node, tc.services, tc.slices)
			tc.check(t, st)
			// The Tracker must agree with Compute on every case.
			tr, err := NewTracker(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			tr.SetNode(node)
			for _, s := range tc.services {
				tr.UpsertService(s)
			}
			for _, s := range tc.slices {
				tr.UpsertSlice(s)
			}
			got, _ := tr.Snapshot()
			assertSameState(t, st, got)
		})
	}
}

func assertSameState(t *testing.T, want, got *NodeState) {
	t.Helper()
	wj, err1 := want.MarshalJSON()
	gj, err2 := got.MarshalJSON()
	if err1 != nil || err2 != nil {
		t.Fatalf("marshal: %v %v", err1, err2)
	}
	if string(wj) != string(gj) {
		t.Fatalf("states differ:\nwant %s\n got %s", wj, gj)
	}
}

func expectEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func expectIgnored(t *testing.T, st *NodeState, object, reasonPart string) {
	t.Helper()
	for _, ig := range st.Ignored {
		if ig.Object == object && strings.Contains(ig.Reason, reasonPart) {
			return
		}
	}
	t.Errorf("no ignored %s with %q in %v", object, reasonPart, st.Ignored)
}

func expectProblem(t *testing.T, st *NodeState, kind, object, field, reasonPart string) {
	t.Helper()
	for _, p := range st.Problems {
		if p.Kind == kind && p.Object == object && p.Field == field && strings.Contains(p.Reason, reasonPart) {
			return
		}
	}
	t.Errorf("no problem %s %s %s %q in:\n%v", kind, object, field, reasonPart, st.Problems)
}

// Rule 1: which Services are proxied.
func TestRule1WhichServices(t *testing.T) {
	web := testSlice("web-1", "web", ep("10.0.0.1", "n1"))
	runCases(t, []ruleCase{
		{name: "plain ClusterIP is proxied", services: svcs(testService("web")), slices: eslices(web),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
			}},
		{name: "headless is ignored", services: svcs(testService("web", clusterIPs("None"))), slices: eslices(web),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 0)
				expectIgnored(t, st, "default/web", "headless")
			}},
		{name: "ExternalName is ignored", services: svcs(testService("web", svcType(v1.ServiceTypeExternalName), clusterIPs())),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 0)
				expectIgnored(t, st, "default/web", "ExternalName")
			}},
		{name: "no clusterIP is ignored", services: svcs(testService("web", clusterIPs())),
			check: func(t *testing.T, st *NodeState) { expectIgnored(t, st, "default/web", "no clusterIP") }},
		{name: "another proxy's Service is ignored", services: svcs(testService("web", svcLabel(LabelServiceProxyName, "other"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 0)
				expectIgnored(t, st, "default/web", "another proxy")
			}},
		{name: "an empty proxy-name label is still a label", services: svcs(testService("web", svcLabel(LabelServiceProxyName, ""))),
			check: func(t *testing.T, st *NodeState) { expectEq(t, "ports", len(st.Ports), 0) }},
		{name: "our proxy name is proxied", opts: Options{ProxyName: "crossproxy"},
			services: svcs(testService("web", svcLabel(LabelServiceProxyName, "crossproxy")), testService("other", svcLabel(LabelServiceProxyName, "kube-proxy")), testService("plain")),
			check: func(t *testing.T, st *NodeState) {
				mustPort(t, st, httpV4("web"))
				mustPort(t, st, httpV4("plain"))
				expectEq(t, "ports", len(st.Ports), 2)
				expectIgnored(t, st, "default/other", "another proxy")
			}},
		{name: "headless-labelled slices are ignored", services: svcs(testService("web")),
			slices: eslices(func() *discovery.EndpointSlice {
				s := testSlice("web-h", "web", ep("10.0.0.9", "n1"))
				s.Labels[LabelHeadless] = ""
				return s
			}(), web),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
				expectIgnored(t, st, "default/web-h", "headless")
			}},
	})
}

// Rule 2: slices merge per Service; addressType decides family; ports match
// by name and protocol; duplicates keep the non-terminating copy.
func TestRule2SliceMerge(t *testing.T) {
	dual := testService("web", clusterIPs("10.96.0.1", "fd00:96::1"))
	runCases(t, []ruleCase{
		{name: "slices merge and sort", services: svcs(testService("web")),
			slices: eslices(testSlice("web-b", "web", ep("10.0.0.3", "n2"), ep("10.0.0.1", "n1")), testSlice("web-a", "web", ep("10.0.0.2", "n1")), testSlice("other-a", "other", ep("10.9.9.9", "n1"))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080 10.0.0.3:8080")
				expectEq(t, "slice", p.ClusterEndpoints[1].Slice, "web-a")
			}},
		{name: "addressType decides the family", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}, services: svcs(dual),
			slices: eslices(testSlice("web-4", "web", ep("10.0.0.1", "n1")), v6(testSlice("web-6", "web", ep("fd00:10::1", "n1")))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "v6", eps(mustPort(t, st, key("web", "http", v1.ProtocolTCP, v1.IPv6Protocol)).ClusterEndpoints), "[fd00:10::1]:8080")
			}},
		{name: "named targetPort reaches different numbers per slice", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1")), withSlicePorts(testSlice("web-b", "web", ep("10.0.0.2", "n1")), eport("http", v1.ProtocolTCP, 9090))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:9090")
			}},
		{name: "ports match by name and protocol", services: svcs(testService("dns", svcPorts(sport("dns", v1.ProtocolUDP, 53), sport("dns", v1.ProtocolTCP, 53)))),
			slices: eslices(withSlicePorts(testSlice("dns-a", "dns", ep("10.0.0.1", "n1")), eport("dns", v1.ProtocolUDP, 5353), eport("dns", v1.ProtocolTCP, 5354)),
				withSlicePorts(testSlice("dns-b", "dns", ep("10.0.0.2", "n1")), eport("dns", v1.ProtocolUDP, 5353))),
			check: func(t *testing.T, st *NodeState) {
				udp := mustPort(t, st, key("dns", "dns", v1.ProtocolUDP, v1.IPv4Protocol))
				tcp := mustPort(t, st, key("dns", "dns", v1.ProtocolTCP, v1.IPv4Protocol))
				expectEq(t, "udp", eps(udp.ClusterEndpoints), "10.0.0.1:5353 10.0.0.2:5353")
				expectEq(t, "tcp", eps(tcp.ClusterEndpoints), "10.0.0.1:5354")
				expectEq(t, "tcp excluded", exclusions(tcp.Excluded), "10.0.0.2:0/all/NoMatchingPort")
				if !strings.Contains(tcp.Excluded[0].Detail, `service port "dns"/TCP (targetPort dns) matches no port in slice dns-b`) {
					t.Errorf("detail %q", tcp.Excluded[0].Detail)
				}
			}},
		{name: "unnamed port matches unnamed slice port", services: svcs(testService("web", svcPorts(v1.ServicePort{Port: 80}))),
			slices: eslices(withSlicePorts(testSlice("web-a", "web", ep("10.0.0.1", "n1")), discovery.EndpointPort{Port: ptr(int32(8080))})),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, key("web", "", v1.ProtocolTCP, v1.IPv4Protocol)).ClusterEndpoints), "10.0.0.1:8080")
			}},
		{name: "duplicate keeps the non-terminating copy", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1", termServing)), testSlice("web-b", "web", ep("10.0.0.1", "n1"))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "kept", p.ClusterEndpoints[0].Slice, "web-b")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.1:8080/all/Duplicate")
				expectEq(t, "excluded slice", p.Excluded[0].Slice, "web-a")
			}},
		{name: "duplicate with different port numbers is two endpoints", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1")), withSlicePorts(testSlice("web-b", "web", ep("10.0.0.1", "n1")), eport("http", v1.ProtocolTCP, 9090))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080 10.0.0.1:9090")
			}},
	})
}

// Rule 3: conditions; serving-terminating fallback, per set.
func TestRule3Conditions(t *testing.T) {
	runCases(t, []ruleCase{
		{name: "nil conditions mean ready", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2"))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				e := p.ClusterEndpoints[0]
				if !e.Ready || !e.Serving || e.Terminating {
					t.Errorf("conditions %+v", e)
				}
			}},
		{name: "ready ones win over terminating and not-ready", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2"), ep("10.0.0.2", "n2", notReady), ep("10.0.0.3", "n2", termServing), ep("10.0.0.4", "n2", termGone))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.2:8080/cluster/NotReady 10.0.0.3:8080/cluster/Terminating 10.0.0.4:8080/cluster/Terminating")
				expectEq(t, "verdict", p.InternalEmpty, VerdictNone)
			}},
		{name: "no ready: serving-terminating fallback", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.2", "n2", notReady), ep("10.0.0.3", "n2", termServing), ep("10.0.0.4", "n2", termGone))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.3:8080")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.2:8080/cluster/NotReady 10.0.0.4:8080/cluster/Terminating")
			}},
		{name: "nothing usable rejects", services: svcs(testService("web", nodePort(30080))),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.2", "n1", notReady), ep("10.0.0.4", "n1", termGone))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", len(p.ClusterEndpoints), 0)
				expectEq(t, "internal", p.InternalEmpty, VerdictReject)
				expectEq(t, "external", p.ExternalEmpty, VerdictReject)
			}},
		{name: "no slices at all rejects", services: svcs(testService("web")),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "internal", mustPort(t, st, httpV4("web")).InternalEmpty, VerdictReject)
			}},
		{name: "cluster and local sets fall back separately", services: svcs(testService("web", itpLocal(), nodePort(30080))),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2"), ep("10.0.0.2", "n1", termServing))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "local", eps(p.LocalEndpoints), "10.0.0.2:8080")
				expectEq(t, "internal", eps(p.InternalEndpoints()), "10.0.0.2:8080")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.1:8080/local/OtherNode 10.0.0.2:8080/cluster/Terminating")
			}},
		{name: "publishNotReadyAddresses is the slice controller's business: conditions decide", services: svcs(testService("web", publishNotReady())),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2"), ep("10.0.0.2", "n2", notReady))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cluster", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
			}},
		{name: "same reason in both sets is one exclusion", services: svcs(testService("web", itpLocal(), nodePort(30080))),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1"), ep("10.0.0.2", "n1", notReady))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "excluded", exclusions(mustPort(t, st, httpV4("web")).Excluded), "10.0.0.2:8080/all/NotReady")
			}},
	})
}

// Rule 4: traffic policies; drop versus reject; health checks.
func TestRule4TrafficPolicy(t *testing.T) {
	remoteOnly := testSlice("web-a", "web", ep("10.0.0.1", "n2"), ep("10.0.0.2", "n3"))
	mixed := testSlice("web-a", "web", ep("10.0.0.1", "n2"), ep("10.0.0.2", "n1"), ep("10.0.0.3", "n1", notReady), ep("10.0.0.4", "n1"))
	runCases(t, []ruleCase{
		{name: "ITP Local uses this node's endpoints", services: svcs(testService("web", itpLocal())), slices: eslices(mixed),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "internal", eps(p.InternalEndpoints()), "10.0.0.2:8080 10.0.0.4:8080")
				expectEq(t, "local flag", p.LocalEndpoints[0].Local, true)
				expectEq(t, "cluster not built", len(p.ClusterEndpoints), 0)
				expectEq(t, "verdict", p.InternalEmpty, VerdictNone)
			}},
		{name: "ITP Local without local endpoints drops", services: svcs(testService("web", itpLocal())), slices: eslices(remoteOnly),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "internal", p.InternalEmpty, VerdictDrop)
				expectEq(t, "external", p.ExternalEmpty, VerdictNone)
			}},
		{name: "ITP Local with nothing anywhere rejects", services: svcs(testService("web", itpLocal())),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "internal", mustPort(t, st, httpV4("web")).InternalEmpty, VerdictReject)
			}},
		{name: "ETP Local on NodePort restricts external only", services: svcs(testService("web", nodePort(30080), etpLocal())), slices: eslices(mixed),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "external", eps(p.ExternalEndpoints()), "10.0.0.2:8080 10.0.0.4:8080")
				expectEq(t, "internal", eps(p.InternalEndpoints()), "10.0.0.1:8080 10.0.0.2:8080 10.0.0.4:8080")
				expectEq(t, "masq external", p.Masquerade.External, false)
				expectEq(t, "no health check on NodePort", len(st.HealthChecks), 0)
			}},
		{name: "ETP Local without local endpoints drops external, internal still works", services: svcs(testService("web", nodePort(30080), etpLocal())), slices: eslices(remoteOnly),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "external", p.ExternalEmpty, VerdictDrop)
				expectEq(t, "internal", p.InternalEmpty, VerdictNone)
			}},
		{name: "ETP Local on a ClusterIP Service has no effect", services: svcs(testService("web", etpLocal())), slices: eslices(remoteOnly),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "policy", p.ExternalPolicyLocal, false)
				expectEq(t, "external verdict", p.ExternalEmpty, VerdictNone)
				expectEq(t, "masq external", p.Masquerade.External, false)
			}},
		{name: "ETP Local on ExternalIPs applies", services: svcs(testService("web", externalIPs("203.0.113.5"), etpLocal())), slices: eslices(remoteOnly),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "policy", p.ExternalPolicyLocal, true)
				expectEq(t, "external", p.ExternalEmpty, VerdictDrop)
			}},
		{name: "ETP Local on LoadBalancer exposes a health check with local ready count",
			services: svcs(testService("web", loadBalancer("198.51.100.7"), etpLocal(), hcPort(32000), svcPorts(sport("http", v1.ProtocolTCP, 80), sport("https", v1.ProtocolTCP, 443)))),
			slices:   eslices(withSlicePorts(mixed, eport("http", v1.ProtocolTCP, 8080), eport("https", v1.ProtocolTCP, 8443))),
			check: func(t *testing.T, st *NodeState) {
				if len(st.HealthChecks) != 1 {
					t.Fatalf("health checks %v", st.HealthChecks)
				}
				hc := st.HealthChecks[0]
				expectEq(t, "port", hc.NodePort, uint16(32000))
				expectEq(t, "count", hc.LocalEndpoints, 2)
				expectEq(t, "port hc", mustPort(t, st, httpV4("web")).HealthCheckNodePort, uint16(32000))
			}},
		{name: "kube-proxy's Windows preserve-destination annotation is carried, only when \"true\"",
			services: svcs(testService("web", loadBalancer("198.51.100.7"), annotate(AnnotationPreserveDestination, "true")), testService("other", loadBalancer("198.51.100.8"), annotate(AnnotationPreserveDestination, "yes"))),
			slices:   eslices(mixed),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "web", mustPort(t, st, httpV4("web")).PreserveDestination, true)
				expectEq(t, "other", mustPort(t, st, httpV4("other")).PreserveDestination, false)
			}},
		{name: "health check counts zero when nothing local", services: svcs(testService("web", loadBalancer("198.51.100.7"), etpLocal(), hcPort(32000))), slices: eslices(remoteOnly),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "count", st.HealthChecks[0].LocalEndpoints, 0)
			}},
		{name: "missing health check port is a problem", services: svcs(testService("web", loadBalancer("198.51.100.7"), etpLocal())),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "health checks", len(st.HealthChecks), 0)
				expectProblem(t, st, "Service", "default/web", "spec.healthCheckNodePort", "not a valid port")
			}},
	})
}

// Rule 5: hints.
func TestRule5Topology(t *testing.T) {
	runCases(t, []ruleCase{
		{name: "zone hints used when all have them and one matches", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", inZone("a"), forZones("a")), ep("10.0.0.2", "n3", inZone("b"), forZones("b")))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "mode", p.TopologyMode, "PreferSameZone")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.2:8080/cluster/OtherZone")
				expectEq(t, "zone", p.ClusterEndpoints[0].Zone(), "a")
			}},
		{name: "zone hints ignored when one is missing", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forZones("a")), ep("10.0.0.2", "n3"))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080")
				expectEq(t, "mode", p.TopologyMode, "")
				expectEq(t, "note", p.TopologyNote, "hints ignored: some ready endpoints have no forZones hint; all endpoints are used")
				expectEq(t, "unused", fmt.Sprint(p.HintsUnused), "[SomeReadyWithoutZoneHint]")
			}},
		{name: "zone hints ignored when none names our zone", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forZones("b")), ep("10.0.0.2", "n3", forZones("c")))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080")
				expectEq(t, "note", p.TopologyNote, `hints ignored: no forZones hint names this node's zone "a"; all endpoints are used`)
				expectEq(t, "unused", fmt.Sprint(p.HintsUnused), "[NoZoneHintForThisZone]")
			}},
		{name: "zone hints ignored on a node without zone label", node: testNode("n1", "", "192.168.0.1"), services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forZones("b")))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "note", mustPort(t, st, httpV4("web")).TopologyNote, "hints ignored: this node has no topology.kubernetes.io/zone label; all endpoints are used")
				expectEq(t, "unused", fmt.Sprint(mustPort(t, st, httpV4("web")).HintsUnused), "[NodeWithoutZone]")
			}},
		{name: "hints of not-ready endpoints do not count", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forZones("a")), ep("10.0.0.2", "n3", notReady))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "mode", mustPort(t, st, httpV4("web")).TopologyMode, "PreferSameZone")
			}},
		{name: "node hints win", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1", forNodes("n1"), forZones("a")), ep("10.0.0.2", "n2", forNodes("n2"), forZones("a")))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "mode", p.TopologyMode, "PreferSameNode")
				expectEq(t, "excluded", exclusions(p.Excluded), "10.0.0.2:8080/cluster/OtherNode")
			}},
		{name: "node hints not for us fall back to zone hints", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forNodes("n2"), forZones("a")), ep("10.0.0.2", "n3", forNodes("n3"), forZones("b")))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "mode", p.TopologyMode, "PreferSameZone")
			}},
		{name: "incomplete node hints and no zone hints", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1", forNodes("n1")), ep("10.0.0.2", "n2"))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "cluster", eps(p.ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080")
				expectEq(t, "note", p.TopologyNote, "hints ignored: some ready endpoints have no forNodes hint; all endpoints are used")
			}},
		{name: "node hints for other nodes only", services: svcs(testService("web")),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n2", forNodes("n2")))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "note", mustPort(t, st, httpV4("web")).TopologyNote, `hints ignored: no forNodes hint names this node "n1"; all endpoints are used`)
			}},
		{name: "hints do not apply to the local set", services: svcs(testService("web", itpLocal())),
			slices: eslices(testSlice("web-a", "web", ep("10.0.0.1", "n1", forZones("b")), ep("10.0.0.2", "n2", forZones("a")))),
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "local", eps(p.LocalEndpoints), "10.0.0.1:8080")
			}},
	})
}

// Rule 6: session affinity.
func TestRule6Affinity(t *testing.T) {
	runCases(t, []ruleCase{
		{name: "none", services: svcs(testService("web")),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "affinity", mustPort(t, st, httpV4("web")).Affinity, Affinity{})
			}},
		{name: "ClientIP default timeout", services: svcs(testService("web", affinity(nil))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "affinity", mustPort(t, st, httpV4("web")).Affinity, Affinity{ClientIP: true, TimeoutSeconds: 10800})
			}},
		{name: "ClientIP with timeout", services: svcs(testService("web", affinity(ptr(int32(60))))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "affinity", mustPort(t, st, httpV4("web")).Affinity, Affinity{ClientIP: true, TimeoutSeconds: 60})
			}},
		{name: "ClientIP with a bad timeout uses the default", services: svcs(testService("web", affinity(ptr(int32(0))))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "affinity", mustPort(t, st, httpV4("web")).Affinity, Affinity{ClientIP: true, TimeoutSeconds: 10800})
				expectProblem(t, st, "Service", "default/web", "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "out of range")
			}},
	})
}

// Rule 7: dual-stack.
func TestRule7DualStack(t *testing.T) {
	dual := testService("web", clusterIPs("fd00:96::1", "10.96.0.1"), nodePort(30080))
	sl := eslices(testSlice("web-4", "web", ep("10.0.0.1", "n1")), v6(testSlice("web-6", "web", ep("fd00:10::1", "n2"))))
	k6 := key("web", "http", v1.ProtocolTCP, v1.IPv6Protocol)
	runCases(t, []ruleCase{
		{name: "both families", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}, services: svcs(dual), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				p4, p6 := mustPort(t, st, httpV4("web")), mustPort(t, st, k6)
				expectEq(t, "v4 frontends", frontends(p4.Frontends), "ClusterIP 10.96.0.1:80, NodePort 192.168.0.1:30080")
				expectEq(t, "v6 frontends", frontends(p6.Frontends), "ClusterIP [fd00:96::1]:80, NodePort [fd00::1]:30080")
				expectEq(t, "v6 eps", eps(p6.ClusterEndpoints), "[fd00:10::1]:8080")
			}},
		{name: "node runs IPv4 only", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}, services: svcs(dual), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 1)
				mustPort(t, st, httpV4("web"))
			}},
		{name: "node runs IPv6 only", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv6Protocol}}, services: svcs(dual), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 1)
				mustPort(t, st, k6)
			}},
		{name: "IPv4-only Service on an IPv6 node has no ports", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv6Protocol}}, services: svcs(testService("web")), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 0)
				expectEq(t, "problems", len(st.Problems), 0)
			}},
		{name: "families default to the node's addresses", node: testNode("n1", "", "fd00::1", "192.168.0.1"), services: svcs(dual), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "families", len(st.Families), 2)
				expectEq(t, "first", st.Families[0], v1.IPv6Protocol)
			}},
		{name: "single-stack Service on dual-stack node", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}, services: svcs(testService("web")), slices: sl,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 1)
				expectEq(t, "eps", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
			}},
	})
}

// Rule 8: load balancers and source ranges.
func TestRule8LoadBalancer(t *testing.T) {
	both := Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}
	k6 := key("web", "http", v1.ProtocolTCP, v1.IPv6Protocol)
	runCases(t, []ruleCase{
		{name: "VIP ingress gets frontends; Proxy and hostname-only do not", opts: both,
			services: svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), loadBalancer("198.51.100.9", "198.51.100.7/VIP", "198.51.100.8/Proxy", "host:lb.example.com", "2001:db8::7"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80, NodePort 192.168.0.1:30080, LoadBalancer 198.51.100.7:80, LoadBalancer 198.51.100.9:80")
				expectEq(t, "v6", frontends(mustPort(t, st, k6).Frontends), "ClusterIP [fd00:96::1]:80, NodePort [fd00::1]:30080, LoadBalancer [2001:db8::7]:80")
			}},
		{name: "source ranges split per family", opts: both,
			services: svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), loadBalancer("198.51.100.7"), sourceRanges("203.0.113.0/24", " 2001:db8::/32", "198.51.100.1/16"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", prefixes(mustPort(t, st, httpV4("web")).SourceRanges), "198.51.0.0/16 203.0.113.0/24")
				expectEq(t, "v6", prefixes(mustPort(t, st, k6).SourceRanges), "2001:db8::/32")
			}},
		{name: "a /0 disables filtering in its family only", opts: both,
			services: svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), loadBalancer("198.51.100.7"), sourceRanges("203.0.113.0/24", "0.0.0.0/0", "2001:db8::/32"))),
			check: func(t *testing.T, st *NodeState) {
				if r := mustPort(t, st, httpV4("web")).SourceRanges; r != nil {
					t.Errorf("v4 ranges %v, want nil", r)
				}
				expectEq(t, "v6", prefixes(mustPort(t, st, k6).SourceRanges), "2001:db8::/32")
			}},
		{name: "invalid range is a problem and skipped",
			services: svcs(testService("web", loadBalancer("198.51.100.7"), sourceRanges("203.0.113.0/24", "nonsense"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", prefixes(mustPort(t, st, httpV4("web")).SourceRanges), "203.0.113.0/24")
				expectProblem(t, st, "Service", "default/web", "spec.loadBalancerSourceRanges[1]", "not a CIDR")
			}},
		{name: "ExternalIPs per family", opts: both,
			services: svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), externalIPs("203.0.113.9", "2001:db8::9", "203.0.113.8", "203.0.113.9"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80, ExternalIP 203.0.113.8:80, ExternalIP 203.0.113.9:80")
				expectEq(t, "v6", frontends(mustPort(t, st, k6).Frontends), "ClusterIP [fd00:96::1]:80, ExternalIP [2001:db8::9]:80")
			}},
		{name: "ingress on a non-LoadBalancer Service is not used",
			services: svcs(testService("web", loadBalancer("198.51.100.7"), svcType(v1.ServiceTypeClusterIP))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "frontends", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80")
			}},
		{name: "one address:port claimed twice keeps one frontend",
			services: svcs(testService("web", loadBalancer("198.51.100.7"), sourceRanges("203.0.113.0/24"), externalIPs("10.96.0.1", "198.51.100.7", "203.0.113.9"))),
			check: func(t *testing.T, st *NodeState) {
				// The clusterIP and the load balancer (whose source ranges apply) win over ExternalIPs.
				expectEq(t, "frontends", frontends(mustPort(t, st, httpV4("web")).Frontends),
					"ClusterIP 10.96.0.1:80, NodePort 192.168.0.1:30080, ExternalIP 203.0.113.9:80, LoadBalancer 198.51.100.7:80")
				expectProblem(t, st, "Service", "default/web", "spec.externalIPs", "ExternalIP 10.96.0.1:80/TCP is also this Service's ClusterIP frontend")
				expectProblem(t, st, "Service", "default/web", "spec.externalIPs", "ExternalIP 198.51.100.7:80/TCP is also this Service's LoadBalancer frontend")
			}},
		{name: "two Services on one address:port: the node's own and older claims win",
			services: svcs(
				testService("new", clusterIPs("10.96.0.2"), externalIPs("203.0.113.9", "10.96.0.3"), created(2)),
				testService("old", clusterIPs("10.96.0.1"), externalIPs("203.0.113.9"), created(1)),
				testService("own", clusterIPs("10.96.0.3"), created(3))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "old", frontends(mustPort(t, st, httpV4("old")).Frontends), "ClusterIP 10.96.0.1:80, ExternalIP 203.0.113.9:80")
				expectEq(t, "new", frontends(mustPort(t, st, httpV4("new")).Frontends), "ClusterIP 10.96.0.2:80")
				expectEq(t, "own", frontends(mustPort(t, st, httpV4("own")).Frontends), "ClusterIP 10.96.0.3:80")
				expectProblem(t, st, "Service", "default/new", "spec.externalIPs", "ExternalIP 203.0.113.9:80/TCP is also the ExternalIP frontend of Service default/old, which keeps it")
				expectProblem(t, st, "Service", "default/new", "spec.externalIPs", "ExternalIP 10.96.0.3:80/TCP is also the ClusterIP frontend of Service default/own")
			}},
		{name: "two Services with one clusterIP: the older keeps the port, the newer's is left out in that family",
			services: svcs(
				testService("new", clusterIPs("10.96.0.1", "fd00:96::2"), externalIPs("203.0.113.7"), created(2)),
				testService("old", clusterIPs("10.96.0.1"), created(1))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "old", frontends(mustPort(t, st, httpV4("old")).Frontends), "ClusterIP 10.96.0.1:80")
				if p := st.Ports[httpV4("new")]; p != nil {
					t.Fatalf("the newer Service's IPv4 port must be left out, got %s", frontends(p.Frontends))
				}
				expectEq(t, "new v6", frontends(mustPort(t, st, key("new", "http", v1.ProtocolTCP, v1.IPv6Protocol)).Frontends), "ClusterIP [fd00:96::2]:80")
				expectProblem(t, st, "Service", "default/new", "spec.clusterIPs", "ClusterIP 10.96.0.1:80/TCP is also the ClusterIP frontend of Service default/old, which keeps it; port http not proxied in this family")
			}},
		{name: "LoadBalancer without node ports", services: svcs(testService("web", loadBalancer("198.51.100.7"), func(s *v1.Service) { s.Spec.Ports[0].NodePort = 0 })),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "frontends", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80, LoadBalancer 198.51.100.7:80")
			}},
	})
}

// Rule 9: NodePort addresses.
func TestRule9NodePortAddresses(t *testing.T) {
	both := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	node := testNode("n1", "a", "ext:203.0.113.1", "192.168.0.1", "192.168.0.2", "10.1.0.1", "ext:2001:db8::1")
	svc := svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), nodePort(30080)))
	np := func(st *NodeState, fam v1.IPFamily) string {
		var out []string
		for _, f := range st.Ports[key("web", "http", v1.ProtocolTCP, fam)].Frontends {
			if f.Kind == FrontendNodePort {
				out = append(out, f.Addr.String())
			}
		}
		return strings.Join(out, " ")
	}
	runCases(t, []ruleCase{
		{name: "default is primary: first InternalIP, else first ExternalIP", opts: Options{IPFamilies: both}, node: node, services: svc,
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", np(st, v1.IPv4Protocol), "192.168.0.1")
				expectEq(t, "v6", np(st, v1.IPv6Protocol), "2001:db8::1")
			}},
		{name: "CIDRs select node and host addresses", node: node, services: svc,
			opts: Options{IPFamilies: both, NodePortAddresses: []string{"192.168.0.0/16", "172.16.0.0/12"}, HostAddresses: []netip.Addr{mustAddr("172.17.0.1"), mustAddr("8.8.8.8")}},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", np(st, v1.IPv4Protocol), "172.17.0.1 192.168.0.1 192.168.0.2")
				expectEq(t, "v6 (no v6 CIDR: primary)", np(st, v1.IPv6Protocol), "2001:db8::1")
			}},
		{name: "primary plus CIDR", node: node, services: svc, opts: Options{IPFamilies: both, NodePortAddresses: []string{"primary", "10.0.0.0/8", "2001:db8:ffff::/48"}},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", np(st, v1.IPv4Protocol), "10.1.0.1 192.168.0.1")
				expectEq(t, "v6", np(st, v1.IPv6Protocol), "2001:db8::1")
			}},
		{name: "CIDR matching nothing gives no NodePort frontend", node: node, services: svc, opts: Options{IPFamilies: both, NodePortAddresses: []string{"100.64.0.0/10"}},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", np(st, v1.IPv4Protocol), "")
				expectEq(t, "state", len(st.NodePortAddresses[v1.IPv4Protocol]), 0)
			}},
		{name: "ClusterIP Service has no NodePort frontend even with a nodePort", node: node, opts: Options{IPFamilies: both},
			services: svcs(testService("web", func(s *v1.Service) { s.Spec.Ports[0].NodePort = 30080 })),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", np(st, v1.IPv4Protocol), "")
			}},
	})
}

// Rule 10: protocols.
func TestRule10Protocols(t *testing.T) {
	runCases(t, []ruleCase{
		{name: "TCP UDP SCTP", services: svcs(testService("multi", svcPorts(sport("a", v1.ProtocolTCP, 80), sport("b", v1.ProtocolUDP, 53), sport("c", v1.ProtocolSCTP, 9), sport("d", "", 81)))),
			slices: eslices(withSlicePorts(testSlice("multi-1", "multi", ep("10.0.0.1", "n1")), eport("a", v1.ProtocolTCP, 8080), eport("b", v1.ProtocolUDP, 5353), eport("c", v1.ProtocolSCTP, 9999), discovery.EndpointPort{Name: ptr("d"), Port: ptr(int32(8081))})),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "tcp", eps(mustPort(t, st, key("multi", "a", v1.ProtocolTCP, v1.IPv4Protocol)).ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "udp", eps(mustPort(t, st, key("multi", "b", v1.ProtocolUDP, v1.IPv4Protocol)).ClusterEndpoints), "10.0.0.1:5353")
				expectEq(t, "sctp", eps(mustPort(t, st, key("multi", "c", v1.ProtocolSCTP, v1.IPv4Protocol)).ClusterEndpoints), "10.0.0.1:9999")
				expectEq(t, "default TCP", eps(mustPort(t, st, key("multi", "d", v1.ProtocolTCP, v1.IPv4Protocol)).ClusterEndpoints), "10.0.0.1:8081")
			}},
		{name: "unknown protocol is a problem", services: svcs(testService("web", svcPorts(sport("a", "ICMP", 80), sport("http", v1.ProtocolTCP, 80)))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "ports", len(st.Ports), 1)
				expectProblem(t, st, "Service", "default/web", "spec.ports[0].protocol", "not TCP, UDP or SCTP")
			}},
	})
}

func TestMasquerade(t *testing.T) {
	withCIDR := Options{LocalDetect: LocalDetect{CIDRs: []netip.Prefix{mustPrefix("10.0.0.0/8")}}}
	runCases(t, []ruleCase{
		{name: "no local detection: only external", services: svcs(testService("web", nodePort(30080))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "masq", mustPort(t, st, httpV4("web")).Masquerade, Masquerade{External: true})
				expectEq(t, "mode", st.LocalDetect[v1.IPv4Protocol].Mode, LocalDetectNone)
			}},
		{name: "cluster CIDR: off-cluster internal", opts: withCIDR, services: svcs(testService("web")),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "masq", mustPort(t, st, httpV4("web")).Masquerade, Masquerade{OffClusterInternal: true})
				expectEq(t, "mode", st.LocalDetect[v1.IPv4Protocol].Mode, LocalDetectClusterCIDR)
			}},
		{name: "masqueradeAll", opts: Options{MasqueradeAll: true, LocalDetect: withCIDR.LocalDetect}, services: svcs(testService("web", nodePort(30080), etpLocal())),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "masq", mustPort(t, st, httpV4("web")).Masquerade, Masquerade{All: true})
			}},
		{name: "NodeCIDR uses the node's pod CIDRs per family", opts: Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, LocalDetect: LocalDetect{Mode: LocalDetectNodeCIDR}},
			node: func() *v1.Node {
				n := defaultNode()
				n.Spec.PodCIDRs = []string{"10.244.1.0/24"}
				return n
			}(),
			services: svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"))),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "v4", mustPort(t, st, httpV4("web")).Masquerade.OffClusterInternal, true)
				expectEq(t, "v6 (no v6 pod CIDR)", mustPort(t, st, key("web", "http", v1.ProtocolTCP, v1.IPv6Protocol)).Masquerade.OffClusterInternal, false)
				expectEq(t, "cidr", prefixes(st.LocalDetect[v1.IPv4Protocol].CIDRs), "10.244.1.0/24")
			}},
		{name: "interface modes", opts: Options{LocalDetect: LocalDetect{Mode: LocalDetectInterfaceNamePrefix, InterfaceNamePrefix: "veth"}}, services: svcs(testService("web")),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "iface", st.LocalDetect[v1.IPv4Protocol].Interface, "veth")
				expectEq(t, "masq", mustPort(t, st, httpV4("web")).Masquerade.OffClusterInternal, true)
			}},
		{name: "bridge", opts: Options{LocalDetect: LocalDetect{Mode: LocalDetectBridgeInterface, BridgeInterface: "cbr0"}}, services: svcs(testService("web")),
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "iface", st.LocalDetect[v1.IPv4Protocol].Interface, "cbr0")
			}},
	})
}

// TestEndpointPlacesShared checks that endpoints on one node and zone share
// one place across slices and ports, that others get their own, and that an
// endpoint's JSON keeps the place's fields inline (the form saved states
// and `crossproxy state -o json` have).
func TestEndpointPlacesShared(t *testing.T) {
	svc := testService("web", svcPorts(sport("http", v1.ProtocolTCP, 80), sport("alt", v1.ProtocolTCP, 81)))
	ports := []discovery.EndpointPort{eport("http", v1.ProtocolTCP, 8080), eport("alt", v1.ProtocolTCP, 8081)}
	sa := withSlicePorts(testSlice("web-a", "web", ep("10.0.0.1", "n1"), ep("10.0.0.2", "n2"), ep("10.0.0.3", "n1", inZone("b"))), ports...)
	sb := withSlicePorts(testSlice("web-b", "web", ep("10.0.0.4", "n1")), ports...)
	st, err := Compute(Options{}, defaultNode(), []*v1.Service{svc}, []*discovery.EndpointSlice{sa, sb})
	if err != nil {
		t.Fatal(err)
	}
	http, alt := st.Ports[key("web", "http", v1.ProtocolTCP, v1.IPv4Protocol)], st.Ports[key("web", "alt", v1.ProtocolTCP, v1.IPv4Protocol)]
	if http == nil || alt == nil || len(http.ClusterEndpoints) != 4 || len(alt.ClusterEndpoints) != 4 {
		t.Fatalf("ports: %+v %+v", http, alt)
	}
	a, b, c, d := http.ClusterEndpoints[0], http.ClusterEndpoints[1], http.ClusterEndpoints[2], http.ClusterEndpoints[3]
	if a.Place != d.Place || a.Place != alt.ClusterEndpoints[0].Place || a.Place == b.Place || a.Place == c.Place {
		t.Errorf("places: %p %p %p %p (alt %p)", a.Place, b.Place, c.Place, d.Place, alt.ClusterEndpoints[0].Place)
	}
	expectEq(t, "node", b.NodeName(), "n2")
	expectEq(t, "zone", c.Zone(), "b")
	expectEq(t, "slice", d.Slice, "web-b")
	j, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"Addr":"10.0.0.1","Port":8080,"NodeName":"n1","Zone":"","Ready":true,"Serving":true,"Terminating":false,"Local":true,"Slice":"web-a"}`
	expectEq(t, "json", string(j), want)
	var back Endpoint
	if err := json.Unmarshal(j, &back); err != nil || !reflect.DeepEqual(back, a) {
		t.Errorf("read back %+v (%v), want %+v", back, err, a)
	}
	if (Endpoint{}).NodeName() != "" || (Endpoint{}).Zone() != "" {
		t.Error("an endpoint without a place has no node or zone")
	}
}
