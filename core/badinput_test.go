package core

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestBadInput checks that each kind of bad object becomes a Problem naming the
// object and field, that the bad part is skipped, and that a good Service next
// to it still works.
func TestBadInput(t *testing.T) {
	good := testService("good")
	goodSlice := testSlice("good-1", "good", ep("10.1.0.1", "n1"))
	type want struct{ kind, object, field, reason string }
	cases := []struct {
		name     string
		services []*v1.Service
		slices   []*discovery.EndpointSlice
		want     want
		check    func(t *testing.T, st *NodeState)
	}{
		{name: "invalid clusterIP", services: svcs(testService("web", clusterIPs("10.96.0.300"))),
			want:  want{"Service", "default/web", "spec.clusterIPs[0]", `"10.96.0.300" is not an IP address`},
			check: func(t *testing.T, st *NodeState) { expectEq(t, "ports", len(st.Ports), 1) }},
		{name: "invalid legacy clusterIP", services: svcs(testService("web", func(s *v1.Service) { s.Spec.ClusterIPs = nil; s.Spec.ClusterIP = "x" })),
			want: want{"Service", "default/web", "spec.clusterIP", "not an IP address"}},
		{name: "two clusterIPs of one family", services: svcs(testService("web", clusterIPs("10.96.0.1", "10.96.0.2"))),
			want: want{"Service", "default/web", "spec.clusterIPs[1]", "only the first is used"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cip", mustPort(t, st, httpV4("web")).ClusterIP.String(), "10.96.0.1")
			}},
		{name: "clusterIP contradicts clusterIPs", services: svcs(testService("web", func(s *v1.Service) { s.Spec.ClusterIP = "10.96.0.9" })),
			want: want{"Service", "default/web", "spec.clusterIP", "differs from spec.clusterIPs[0]"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "cip", mustPort(t, st, httpV4("web")).ClusterIP.String(), "10.96.0.1")
			}},
		{name: "port out of range", services: svcs(testService("web", svcPorts(sport("http", v1.ProtocolTCP, 80), sport("big", v1.ProtocolTCP, 70000)))),
			want:  want{"Service", "default/web", "spec.ports[1].port", "70000 is out of range"},
			check: func(t *testing.T, st *NodeState) { mustPort(t, st, httpV4("web")) }},
		{name: "port zero", services: svcs(testService("web", svcPorts(sport("zero", v1.ProtocolTCP, 0)))),
			want: want{"Service", "default/web", "spec.ports[0].port", "0 is out of range"}},
		{name: "nodePort out of range", services: svcs(testService("web", nodePort(-1))),
			want: want{"Service", "default/web", "spec.ports[0].nodePort", "out of range"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "frontends", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80")
			}},
		{name: "duplicate port name", services: svcs(testService("web", svcPorts(sport("http", v1.ProtocolTCP, 80), sport("http", v1.ProtocolTCP, 81)))),
			want: want{"Service", "default/web", "spec.ports[1].name", "used twice"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "port", mustPort(t, st, httpV4("web")).Port, uint16(80))
			}},
		{name: "invalid external IP", services: svcs(testService("web", externalIPs("1.2.3"), etpLocal())),
			want: want{"Service", "default/web", "spec.externalIPs[0]", "not an IP address"},
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "no external frontend, so no external policy", p.ExternalPolicyLocal || p.Masquerade.External, false)
			}},
		{name: "invalid ingress IP", services: svcs(testService("web", loadBalancer("lb.example.com"))),
			want: want{"Service", "default/web", "status.loadBalancer.ingress[0].ip", "not an IP address"}},
		{name: "slice without service-name label", services: svcs(testService("web")),
			slices: eslices(func() *discovery.EndpointSlice {
				s := testSlice("web-x", "web", ep("10.0.0.1", "n1"))
				s.Labels = nil
				return s
			}()),
			want: want{"EndpointSlice", "default/web-x", `metadata.labels["kubernetes.io/service-name"]`, "belongs to no Service"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "eps", len(mustPort(t, st, httpV4("web")).ClusterEndpoints), 0)
			}},
		{name: "invalid endpoint IP", services: svcs(testService("web")),
			slices: eslices(testSlice("web-1", "web", ep("10.0.0.999", "n1"), ep("10.0.0.1", "n1"))),
			want:   want{"EndpointSlice", "default/web-1", "endpoints[0].addresses[0]", `"10.0.0.999" is not a usable IP address`},
			check: func(t *testing.T, st *NodeState) {
				p := mustPort(t, st, httpV4("web"))
				expectEq(t, "eps", eps(p.ClusterEndpoints), "10.0.0.1:8080")
				expectEq(t, "excl", exclusions(p.Excluded), "10.0.0.999:8080/all/Invalid")
				expectEq(t, "service", st.Problems[0].Service.Name, "web")
			}},
		{name: "unspecified endpoint IP", services: svcs(testService("web")),
			slices: eslices(testSlice("web-1", "web", ep("0.0.0.0", "n1"))),
			want:   want{"EndpointSlice", "default/web-1", "endpoints[0].addresses[0]", "not a usable IP address"}},
		{name: "endpoint of the wrong family", services: svcs(testService("web")),
			slices: eslices(testSlice("web-1", "web", ep("fd00::5", "n1"))),
			want:   want{"EndpointSlice", "default/web-1", "endpoints[0].addresses[0]", "not an IPv4 address"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "excl", exclusions(mustPort(t, st, httpV4("web")).Excluded), "fd00::5:8080/all/WrongFamily")
			}},
		{name: "endpoint without address", services: svcs(testService("web")),
			slices: eslices(testSlice("web-1", "web", discovery.Endpoint{})),
			want:   want{"EndpointSlice", "default/web-1", "endpoints[0].addresses", "empty"}},
		{name: "slice port out of range", services: svcs(testService("web")),
			slices: eslices(withSlicePorts(testSlice("web-1", "web", ep("10.0.0.1", "n1")), eport("http", v1.ProtocolTCP, 0))),
			want:   want{"EndpointSlice", "default/web-1", "ports[0].port", "out of range"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "excl", exclusions(mustPort(t, st, httpV4("web")).Excluded), "10.0.0.1:0/all/NoMatchingPort")
			}},
		{name: "slice port missing number", services: svcs(testService("web")),
			slices: eslices(withSlicePorts(testSlice("web-1", "web", ep("10.0.0.1", "n1")), discovery.EndpointPort{Name: ptr("http")})),
			want:   want{"EndpointSlice", "default/web-1", "ports[0].port", "missing"}},
		{name: "slice port bad protocol", services: svcs(testService("web")),
			slices: eslices(withSlicePorts(testSlice("web-1", "web", ep("10.0.0.1", "n1")), eport("http", "GRE", 1))),
			want:   want{"EndpointSlice", "default/web-1", "ports[0].protocol", "not TCP"}},
		{name: "slice port twice", services: svcs(testService("web")),
			slices: eslices(withSlicePorts(testSlice("web-1", "web", ep("10.0.0.1", "n1")), eport("http", v1.ProtocolTCP, 1), eport("http", v1.ProtocolTCP, 2))),
			want:   want{"EndpointSlice", "default/web-1", "ports[1].name", "appears twice"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "eps", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:1")
			}},
		{name: "unknown addressType", services: svcs(testService("web")),
			slices: eslices(func() *discovery.EndpointSlice { s := testSlice("web-1", "web"); s.AddressType = "IPX"; return s }()),
			want:   want{"EndpointSlice", "default/web-1", "addressType", "not IPv4, IPv6 or FQDN"}},
		{name: "duplicate Service objects", services: svcs(testService("web"), testService("web", clusterIPs("10.96.0.2"))),
			want: want{"Service", "default/web", "metadata.name", "duplicate object"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "first wins", mustPort(t, st, httpV4("web")).ClusterIP.String(), "10.96.0.1")
			}},
		{name: "duplicate slice objects", services: svcs(testService("web")),
			slices: eslices(testSlice("web-1", "web", ep("10.0.0.1", "n1")), testSlice("web-1", "web", ep("10.0.0.2", "n1"))),
			want:   want{"EndpointSlice", "default/web-1", "metadata.name", "duplicate object"},
			check: func(t *testing.T, st *NodeState) {
				expectEq(t, "eps", eps(mustPort(t, st, httpV4("web")).ClusterEndpoints), "10.0.0.1:8080")
			}},
		{name: "nil objects", services: svcs(nil), slices: eslices(nil),
			want: want{"Service", "", "services[0]", "nil object"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := mustCompute(t, Options{}, defaultNode(), append(tc.services, good), append(tc.slices, goodSlice))
			expectProblem(t, st, tc.want.kind, tc.want.object, tc.want.field, tc.want.reason)
			expectEq(t, "good service", eps(mustPort(t, st, httpV4("good")).ClusterEndpoints), "10.1.0.1:8080")
			if tc.check != nil {
				tc.check(t, st)
			}
		})
	}
}

func TestBadNode(t *testing.T) {
	n := testNode("n1", "", "192.168.0.1", "nonsense")
	n.Spec.PodCIDR = "10.244.0.0/33"
	st := mustCompute(t, Options{}, n, svcs(testService("web", nodePort(30080))), nil)
	expectProblem(t, st, "Node", "n1", "status.addresses[1].address", "not an IP address")
	expectProblem(t, st, "Node", "n1", "spec.podCIDR", "not a CIDR")
	expectEq(t, "frontends", frontends(mustPort(t, st, httpV4("web")).Frontends), "ClusterIP 10.96.0.1:80, NodePort 192.168.0.1:30080")
	if _, err := Compute(Options{}, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "node is nil") {
		t.Errorf("nil node: %v", err)
	}
	if _, err := Compute(Options{IPFamilies: []v1.IPFamily{"IPv5"}}, n, nil, nil); err == nil || !strings.Contains(err.Error(), "ipFamilies[0]") {
		t.Errorf("bad options: %v", err)
	}
	del := testNode("n1", "", "192.168.0.1")
	del.DeletionTimestamp = &metav1.Time{}
	expectEq(t, "deleting", mustCompute(t, Options{}, del, nil, nil).Node.Deleting, true)
}

func TestOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string // "" means valid
	}{
		{name: "zero value", opts: Options{}},
		{name: "full", opts: Options{ProxyName: "crossproxy", IPFamilies: []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol},
			LocalDetect:       LocalDetect{Mode: LocalDetectClusterCIDR, CIDRs: []netip.Prefix{mustPrefix("10.0.0.0/8")}},
			NodePortAddresses: []string{"primary", "10.0.0.0/8", "fd00::/64"}, HostAddresses: []netip.Addr{mustAddr("10.0.0.1")}}},
		{name: "bad CIDR", opts: Options{NodePortAddresses: []string{"10.0.0.0/8", "10.0.0.0/33"}}, want: `nodePortAddresses[1]: "10.0.0.0/33" is not a CIDR or "primary"`},
		{name: "bad family", opts: Options{IPFamilies: []v1.IPFamily{"IPv4", "ipv6"}}, want: `ipFamilies[1]: "ipv6" is not IPv4 or IPv6`},
		{name: "family twice", opts: Options{IPFamilies: []v1.IPFamily{"IPv4", "IPv4"}}, want: "ipFamilies[1]: IPv4 is listed twice"},
		{name: "three families", opts: Options{IPFamilies: []v1.IPFamily{"IPv4", "IPv6", "IPv4"}}, want: "ipFamilies: at most 2"},
		{name: "bad mode", opts: Options{LocalDetect: LocalDetect{Mode: "Magic"}}, want: `localDetect.mode: "Magic" is not one of`},
		{name: "ClusterCIDR without CIDRs", opts: Options{LocalDetect: LocalDetect{Mode: LocalDetectClusterCIDR}}, want: "localDetect.cidrs: mode ClusterCIDR needs"},
		{name: "invalid CIDR value", opts: Options{LocalDetect: LocalDetect{CIDRs: []netip.Prefix{{}}}}, want: "localDetect.cidrs[0]: not a valid CIDR"},
		{name: "bridge without name", opts: Options{LocalDetect: LocalDetect{Mode: LocalDetectBridgeInterface}}, want: "localDetect.bridgeInterface: required"},
		{name: "prefix without name", opts: Options{LocalDetect: LocalDetect{Mode: LocalDetectInterfaceNamePrefix}}, want: "localDetect.interfaceNamePrefix: required"},
		{name: "bad proxy name", opts: Options{ProxyName: "not a label!"}, want: `proxyName: "not a label!" is not a valid label value`},
		{name: "bad host address", opts: Options{HostAddresses: []netip.Addr{{}}}, want: "hostAddresses[0]: not a valid IP address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			_, terr := NewTracker(tc.opts)
			if (terr == nil) != (tc.want == "") {
				t.Fatalf("NewTracker error %v", terr)
			}
		})
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	st := mustCompute(t, Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}, defaultNode(),
		svcs(testService("web", clusterIPs("10.96.0.1", "fd00:96::1"), loadBalancer("198.51.100.7"), etpLocal(), hcPort(32000), sourceRanges("203.0.113.0/24")), testService("b")),
		eslices(testSlice("web-1", "web", ep("10.0.0.1", "n1"), ep("bad", "n1")), v6(testSlice("web-2", "web", ep("fd00:10::1", "n2")))))
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"Ports":[{"Key":{"Service":{"Namespace":"default","Name":"b"}`, `"ClusterIP":"10.96.0.1"`, `"SourceRanges":["203.0.113.0/24"]`, `"NodePortAddresses":{"IPv4":["192.168.0.1"]`} {
		if !strings.Contains(string(data), s) {
			t.Errorf("JSON lacks %s:\n%s", s, data)
		}
	}
	var back NodeState
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	assertSameState(t, st, &back)
	if err := json.Unmarshal([]byte(`{"Ports":[null]}`), &back); err == nil {
		t.Error("null port accepted")
	}
	if err := json.Unmarshal([]byte(`{"Ports":3}`), &back); err == nil {
		t.Error("bad JSON accepted")
	}
}
