package core

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The exported decisions must be the ones Compute makes: explain shows them
// for Services that have no ports to show.
func TestDecisionsAreCompute(t *testing.T) {
	t.Run("not proxied", func(t *testing.T) {
		for _, tc := range []struct {
			svc  *v1.Service
			want string
		}{
			{testService("web"), ""},
			{testService("web", svcType(v1.ServiceTypeExternalName)), "type ExternalName is answered by DNS, not proxied"},
			{testService("web", clusterIPs("None")), "headless (clusterIP None)"},
			{testService("web", clusterIPs()), "no clusterIP allocated"},
		} {
			expectEq(t, tc.svc.Spec.ClusterIP, NotProxied(tc.svc), tc.want)
			st := mustCompute(t, Options{}, defaultNode(), svcs(tc.svc), nil)
			if tc.want == "" {
				expectEq(t, "ignored", len(st.Ignored), 0)
			} else {
				expectIgnored(t, st, "default/web", tc.want)
			}
		}
	})
	t.Run("families", func(t *testing.T) {
		svc := testService("web", clusterIPs("fd00::10", "bad", "10.96.0.1", "10.96.0.2"))
		expectEq(t, "families", fmt.Sprint(ServiceFamilies(svc)), "[IPv6 IPv4]")
		expectEq(t, "mapped", fmt.Sprint(ServiceFamilies(testService("web", clusterIPs("::ffff:10.96.0.1")))), "[IPv4]")
		expectEq(t, "none", len(ServiceFamilies(testService("web", clusterIPs("None")))), 0)
		st := mustCompute(t, Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}, defaultNode(), svcs(svc), nil)
		var got []v1.IPFamily
		for _, p := range st.SortedPorts() {
			got = append(got, p.Key.Family)
		}
		expectEq(t, "computed families", fmt.Sprint(got), "[IPv4 IPv6]")
	})
	t.Run("slices", func(t *testing.T) {
		v4only := testService("web")
		headless := testSlice("web-h", "web", ep("10.0.0.9", "n1"))
		headless.Labels[LabelHeadless] = ""
		fqdn := testSlice("web-f", "web", ep("10.0.0.8", "n1"))
		fqdn.AddressType = discovery.AddressTypeFQDN
		odd := testSlice("web-x", "web", ep("10.0.0.7", "n1"))
		odd.AddressType = "IPv5"
		for _, tc := range []struct {
			slice    *discovery.EndpointSlice
			svc      *v1.Service
			families []v1.IPFamily
			want     string
		}{
			{testSlice("web-1", "web", ep("10.0.0.1", "n1")), v4only, []v1.IPFamily{v1.IPv4Protocol}, ""},
			{testSlice("web-1", "web", ep("10.0.0.1", "n1")), v4only, nil, ""},
			{testSlice("web-1", "web", ep("10.0.0.1", "n1")), v4only, []v1.IPFamily{v1.IPv6Protocol}, "this node does not run IPv4"},
			{v6(testSlice("web-6", "web", ep("fd00::5", "n1"))), v4only, nil, "the Service has no IPv6 cluster IP"},
			{v6(testSlice("web-6", "web", ep("fd00::5", "n1"))), nil, nil, ""},
			{headless, v4only, nil, "labelled service.kubernetes.io/headless: endpoints of a headless Service are not proxied"},
			{fqdn, v4only, nil, "addressType FQDN: names are not proxied"},
			{odd, v4only, nil, `"IPv5" is not IPv4, IPv6 or FQDN`},
		} {
			got := SliceUnused(tc.svc, tc.slice, tc.families)
			expectEq(t, tc.slice.Name, got, tc.want)
			if tc.svc == nil || len(tc.families) == 0 {
				continue
			}
			// Compute reads the slice's endpoints exactly when SliceUnused says so.
			st := mustCompute(t, Options{IPFamilies: tc.families}, defaultNode(), svcs(tc.svc), eslices(tc.slice))
			read := false
			for _, p := range st.Ports {
				read = read || len(p.ClusterEndpoints) > 0
			}
			expectEq(t, tc.slice.Name+" read", read, tc.want == "")
		}
		expectIgnored(t, mustCompute(t, Options{}, defaultNode(), svcs(v4only), eslices(headless)), "default/web-h", IgnoredSlice(headless))
	})
	t.Run("conditions", func(t *testing.T) {
		r, s, term := EndpointConditions(discovery.EndpointConditions{})
		expectEq(t, "unset", fmt.Sprint(r, s, term), "true true false")
		r, s, term = EndpointConditions(discovery.EndpointConditions{Ready: ptr(false), Serving: ptr(true), Terminating: ptr(true)})
		expectEq(t, "serving-terminating", fmt.Sprint(r, s, term), "false true true")
	})
}

// Backends write what the core hands them without a guard of their own, so
// input written in odd forms (IPv4-mapped, zoned, unsorted, repeated,
// unmasked) must come out canonical, family-pure and in the documented order.
func TestOutputIsCanonical(t *testing.T) {
	svc := testService("web", clusterIPs("::ffff:10.96.0.1", "fd00::10"), loadBalancer("::ffff:198.51.100.9", "198.51.100.2", "2001:db8::7"),
		externalIPs("203.0.113.9", "::ffff:203.0.113.1", "fe80::1%eth0", "2001:db8::2", "203.0.113.9"),
		sourceRanges("::ffff:10.0.0.0/104", "::ffff:0:0/64", "10.9.0.7/16", "2001:db8::/32", "10.9.0.0/16", "fd00::1/8"))
	sl4 := testSlice("web-4", "web", ep("::ffff:10.0.0.2", "n1"), ep("10.0.0.1", "n2"), ep("fd00::9", "n1"))
	sl6 := v6(testSlice("web-6", "web", ep("fd00::3", "n1"), ep("::ffff:10.0.0.3", "n1"), ep("fd00::1", "n2")))
	opts := Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}, NodePortAddresses: []string{"0.0.0.0/0", "::/0"},
		HostAddresses: []netip.Addr{mustAddr("fe80::2%eth0"), mustAddr("::ffff:192.168.7.7"), mustAddr("192.168.0.3")}}
	st := mustCompute(t, opts, defaultNode(), svcs(svc), eslices(sl6, sl4))
	checkInvariants(t, st)
	p4 := mustPort(t, st, httpV4("web"))
	expectEq(t, "v4 frontends", frontends(p4.Frontends), "ClusterIP 10.96.0.1:80, NodePort 192.168.0.1:30080, NodePort 192.168.0.3:30080, "+
		"NodePort 192.168.7.7:30080, ExternalIP 203.0.113.1:80, ExternalIP 203.0.113.9:80, LoadBalancer 198.51.100.2:80, LoadBalancer 198.51.100.9:80")
	expectEq(t, "v4 ranges", prefixes(p4.SourceRanges), "10.0.0.0/8 10.9.0.0/16")
	expectEq(t, "v4 endpoints", eps(p4.ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080")
	p6 := mustPort(t, st, key("web", "http", v1.ProtocolTCP, v1.IPv6Protocol))
	expectEq(t, "v6 frontends", frontends(p6.Frontends), "ClusterIP [fd00::10]:80, NodePort [fd00::1]:30080, NodePort [fe80::2]:30080, "+
		"ExternalIP [2001:db8::2]:80, LoadBalancer [2001:db8::7]:80")
	expectEq(t, "v6 ranges", prefixes(p6.SourceRanges), "2001:db8::/32 fd00::/8")
	expectEq(t, "v6 endpoints", eps(p6.ClusterEndpoints), "[fd00::1]:8080 [fd00::3]:8080")
	expectProblem(t, st, "Service", "default/web", "spec.loadBalancerSourceRanges[1]", "not a CIDR")
	expectProblem(t, st, "Service", "default/web", "spec.externalIPs[2]", "not an IP address")
}

// PortKey.Compare orders by fields, not by the string form ("a/x" sorts
// after "a-b/x" as a string).
func TestPortKeyOrder(t *testing.T) {
	k := func(ns, name, port string, proto v1.Protocol, fam v1.IPFamily) PortKey {
		return PortKey{Service: types.NamespacedName{Namespace: ns, Name: name}, PortName: port, Protocol: proto, Family: fam}
	}
	want := []PortKey{
		k("a", "x", "", v1.ProtocolTCP, v1.IPv4Protocol),
		k("a", "x", "", v1.ProtocolTCP, v1.IPv6Protocol),
		k("a", "x", "", v1.ProtocolUDP, v1.IPv4Protocol),
		k("a", "x", "dns", v1.ProtocolSCTP, v1.IPv4Protocol),
		k("a", "x-y", "", v1.ProtocolTCP, v1.IPv4Protocol),
		k("a-b", "x", "", v1.ProtocolTCP, v1.IPv4Protocol),
	}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, PortKey.Compare)
	expectEq(t, "order", fmt.Sprint(got), fmt.Sprint(want))
}
