package core

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fuzzInput is what FuzzCompute decodes from the fuzz bytes (JSON): options,
// a Node and any Services and EndpointSlices.
type fuzzInput struct {
	Options struct {
		IPFamilies        []v1.IPFamily
		NodePortAddresses []string
		HostAddresses     []string
		ClusterCIDRs      []string
		Mode              LocalDetectMode
		MasqueradeAll     bool
		ProxyName         string
	}
	Node     *v1.Node
	Services []*v1.Service
	Slices   []*discovery.EndpointSlice
}

func (in *fuzzInput) options() Options {
	o := Options{
		IPFamilies:        in.Options.IPFamilies,
		NodePortAddresses: in.Options.NodePortAddresses,
		MasqueradeAll:     in.Options.MasqueradeAll,
		ProxyName:         in.Options.ProxyName,
		LocalDetect:       LocalDetect{Mode: in.Options.Mode, BridgeInterface: "cbr0", InterfaceNamePrefix: "veth"},
	}
	for _, s := range in.Options.HostAddresses {
		if a, err := netip.ParseAddr(s); err == nil {
			o.HostAddresses = append(o.HostAddresses, a)
		}
	}
	for _, s := range in.Options.ClusterCIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			o.LocalDetect.CIDRs = append(o.LocalDetect.CIDRs, p)
		}
	}
	return o
}

// FuzzCompute feeds arbitrary objects to Compute and the Tracker. Neither may
// panic; every endpoint chosen must be valid for its port's family; the
// result must be deterministic, survive a JSON round trip, and the Tracker,
// fed the same objects in two batches, must reach the same state.
func FuzzCompute(f *testing.F) {
	f.Add([]byte(`{"Services":[{"metadata":{"namespace":"d","name":"s"},"spec":{"clusterIP":"10.0.0.1","ports":[{"port":80}]}}],` +
		`"Slices":[{"metadata":{"namespace":"d","name":"s-1","labels":{"kubernetes.io/service-name":"s"}},"addressType":"IPv4","ports":[{"port":8080}],"endpoints":[{"addresses":["10.1.0.1"]}]}]}`))
	f.Add([]byte("\x03\x01\x02\x01\x03\x02\x01\x00\x02\x01\x07\x03\x01\x01\x00\x01\x01\x04\x01\x02\x00\x01\x02\x03"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var in fuzzInput
		if err := json.Unmarshal(data, &in); err != nil {
			// Not JSON: build objects from the bytes instead, so every input
			// means something.
			in = objectsFromBytes(data)
		}
		if in.Node == nil {
			in.Node = defaultNode()
		}
		opts := in.options()
		st, err := Compute(opts, in.Node, in.Services, in.Slices)
		if err != nil {
			if opts.Validate() == nil {
				t.Fatalf("Compute failed with valid options: %v", err)
			}
			return
		}
		checkInvariants(t, st)

		again, _ := Compute(opts, in.Node, in.Services, in.Slices)
		assertSameState(t, st, again)

		data2, err := json.Marshal(st)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var back NodeState
		if err := json.Unmarshal(data2, &back); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}

		// The Tracker sees the objects without Compute's duplicates, in two
		// batches with a Snapshot between, and must match Compute's answer.
		services, slices := firstOfEach(in.Services, in.Slices)
		want, _ := Compute(opts, in.Node, services, slices)
		tr, err := NewTracker(opts)
		if err != nil {
			t.Fatal(err)
		}
		half := len(services) / 2
		for _, s := range services[:half] {
			tr.UpsertService(s)
		}
		for _, s := range slices {
			tr.UpsertSlice(s)
		}
		tr.Snapshot()
		tr.SetNode(in.Node)
		for _, s := range services[half:] {
			tr.UpsertService(s)
		}
		got, _ := tr.Snapshot()
		assertSameState(t, want, got)
		// An incremental step: the first Service goes away, which may hand
		// its frontends to others (claims).
		if len(services) > 0 {
			tr.DeleteService(services[0])
			want, _ = Compute(opts, in.Node, services[1:], slices)
			got, _ = tr.Snapshot()
			assertSameState(t, want, got)
		}
	})
}

func firstOfEach(services []*v1.Service, sl []*discovery.EndpointSlice) ([]*v1.Service, []*discovery.EndpointSlice) {
	seen := map[types.NamespacedName]bool{}
	var outS []*v1.Service
	for _, s := range services {
		if s == nil || seen[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] {
			continue
		}
		seen[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
		outS = append(outS, s)
	}
	seen = map[types.NamespacedName]bool{}
	var outE []*discovery.EndpointSlice
	for _, s := range sl {
		if s == nil || seen[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] {
			continue
		}
		seen[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}] = true
		outE = append(outE, s)
	}
	return outS, outE
}

// checkInvariants asserts what every NodeState must satisfy whatever the input.
func checkInvariants(t *testing.T, st *NodeState) {
	t.Helper()
	for k, p := range st.Ports {
		if p.Key != k {
			t.Fatalf("port filed under %s has key %s", k, p.Key)
		}
		if len(p.Frontends) == 0 || p.Frontends[0].Kind != FrontendClusterIP || p.Frontends[0].Addr != p.ClusterIP {
			t.Fatalf("%s: frontends %v do not start with the ClusterIP %s", k, p.Frontends, p.ClusterIP)
		}
		if p.Port == 0 || p.Protocol != k.Protocol {
			t.Fatalf("%s: port %d protocol %s", k, p.Port, p.Protocol)
		}
		if !canonical(p.ClusterIP, k.Family) {
			t.Fatalf("%s: bad ClusterIP %v", k, p.ClusterIP)
		}
		claimed := map[netip.AddrPort]bool{}
		for i, fe := range p.Frontends {
			if !canonical(fe.Addr, k.Family) || fe.Port == 0 {
				t.Fatalf("%s: bad frontend %v", k, fe)
			}
			if ap := netip.AddrPortFrom(fe.Addr, fe.Port); claimed[ap] {
				t.Fatalf("%s: %s is the address:port of two frontends: %v", k, ap, p.Frontends)
			} else {
				claimed[ap] = true
			}
			if i > 0 {
				prev := p.Frontends[i-1]
				if c := cmp.Compare(frontendOrder[prev.Kind], frontendOrder[fe.Kind]); c > 0 || c == 0 && prev.Addr.Compare(fe.Addr) >= 0 {
					t.Fatalf("%s: frontends not in documented order: %v", k, p.Frontends)
				}
			}
		}
		for i, r := range p.SourceRanges {
			if !canonical(r.Addr(), k.Family) || r.Bits() <= 0 || r != r.Masked() {
				t.Fatalf("%s: bad source range %v", k, r)
			}
			if i > 0 && comparePrefix(p.SourceRanges[i-1], r) >= 0 {
				t.Fatalf("%s: source ranges not sorted or repeated: %v", k, p.SourceRanges)
			}
		}
		if (p.TopologyMode != "" && len(p.HintsUnused) > 0) || (p.TopologyNote == "") != (len(p.HintsUnused) == 0) {
			t.Fatalf("%s: topology mode %q, unused hints %v, note %q disagree", k, p.TopologyMode, p.HintsUnused, p.TopologyNote)
		}
		for _, set := range [][]Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
			for i, e := range set {
				if !canonical(e.Addr, k.Family) || e.Port == 0 {
					t.Fatalf("%s: bad endpoint %+v", k, e)
				}
				if i > 0 && set[i-1].AddrPort().Compare(e.AddrPort()) >= 0 {
					t.Fatalf("%s: endpoints not sorted or duplicated: %v", k, set)
				}
			}
		}
		for _, e := range p.LocalEndpoints {
			if !e.Local {
				t.Fatalf("%s: non-local endpoint in local set", k)
			}
		}
		if len(p.InternalEndpoints()) > 0 && p.InternalEmpty != VerdictNone {
			t.Fatalf("%s: verdict %q with endpoints", k, p.InternalEmpty)
		}
		if len(p.InternalEndpoints()) == 0 && p.InternalEmpty == VerdictNone {
			t.Fatalf("%s: empty internal set without verdict", k)
		}
	}
	sorted := st.SortedPorts()
	for i := 1; i < len(sorted); i++ {
		if sorted[i-1].Key.Compare(sorted[i].Key) >= 0 {
			t.Fatalf("SortedPorts out of order: %s before %s", sorted[i-1].Key, sorted[i].Key)
		}
	}
}

// frontendOrder is the documented order of frontend kinds in ServicePort.Frontends.
var frontendOrder = map[FrontendKind]int{FrontendClusterIP: 0, FrontendNodePort: 1, FrontendExternalIP: 2, FrontendLoadBalancer: 3}

// canonical reports whether a is an address the core may hand a backend for
// a port of family fam: valid, without zone, not IPv4-mapped, of that family.
func canonical(a netip.Addr, fam v1.IPFamily) bool {
	return a.IsValid() && a.Zone() == "" && !a.Is4In6() && familyOf(a) == fam
}

// byteReader hands out fuzz bytes as small choices; zero once exhausted.
type byteReader struct{ data []byte }

func (r *byteReader) next() int {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return int(b)
}

func (r *byteReader) pick(n int) int { return r.next() % n }

func (r *byteReader) str(pool ...string) string { return pool[r.pick(len(pool))] }

func (r *byteReader) boolPtr() *bool {
	switch r.pick(3) {
	case 0:
		return nil
	case 1:
		return ptr(true)
	}
	return ptr(false)
}

// objectsFromBytes builds Services and slices whose every field is chosen by
// the fuzz bytes from small pools that include bad values.
func objectsFromBytes(data []byte) fuzzInput {
	r := &byteReader{data: data}
	var in fuzzInput
	in.Options.IPFamilies = [][]v1.IPFamily{nil, {v1.IPv4Protocol}, {v1.IPv6Protocol}, {v1.IPv4Protocol, v1.IPv6Protocol}}[r.pick(4)]
	in.Options.NodePortAddresses = [][]string{nil, {"primary"}, {"192.168.0.0/16"}, {"fd00::/8", "primary"}}[r.pick(4)]
	in.Options.ClusterCIDRs = [][]string{nil, {"10.0.0.0/8"}, {"10.0.0.0/8", "fd00::/8"}}[r.pick(3)]
	in.Options.MasqueradeAll = r.pick(2) == 1
	in.Options.HostAddresses = [][]string{nil, {"192.168.0.9", "fe80::1%eth0", "::ffff:192.168.1.1", "fd00::9"}}[r.pick(2)]
	names := []string{"a", "b", "c"}
	ips := []string{"10.0.0.1", "10.0.0.2", "fd00::1", "fd00::2", "None", "", "bad", "10.0.0.1", "::ffff:10.0.0.3", "fe80::1%eth0"}
	for range r.pick(4) {
		s := testService(r.str(names...))
		s.Spec.Type = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName}[r.pick(4)]
		s.Spec.ClusterIPs = nil
		for range r.pick(3) {
			s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, r.str(ips...))
		}
		s.Spec.ClusterIP = ""
		if len(s.Spec.ClusterIPs) > 0 {
			s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
		}
		s.Spec.Ports = nil
		for range r.pick(4) {
			s.Spec.Ports = append(s.Spec.Ports, v1.ServicePort{
				Name:     r.str("", "http", "dns"),
				Protocol: v1.Protocol(r.str("TCP", "UDP", "SCTP", "", "ICMP")),
				Port:     int32([]int{80, 53, 0, 70000, 65535}[r.pick(5)]),
				NodePort: int32([]int{0, 30000, -1, 70000}[r.pick(4)]),
			})
		}
		if r.pick(2) == 1 {
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = int32(r.pick(3) * 20000)
		}
		if r.pick(2) == 1 {
			s.Spec.InternalTrafficPolicy = ptr(v1.ServiceInternalTrafficPolicyLocal)
		}
		for range r.pick(3) {
			s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, r.str("203.0.113.1", "2001:db8::1", "nope", "::ffff:203.0.113.5", "fe80::5%eth0"))
			s.Spec.LoadBalancerSourceRanges = append(s.Spec.LoadBalancerSourceRanges, r.str("203.0.113.0/24", "0.0.0.0/0", "::/0", "x", "::ffff:203.0.113.0/120", "::ffff:0:0/64", "203.0.113.7/24"))
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, v1.LoadBalancerIngress{IP: r.str("198.51.100.1", "", "2001:db8::2", "?", "::ffff:198.51.100.9"),
				IPMode: []*v1.LoadBalancerIPMode{nil, ptr(v1.LoadBalancerIPModeProxy), ptr(v1.LoadBalancerIPModeVIP)}[r.pick(3)]})
		}
		if r.pick(2) == 1 {
			s.Spec.SessionAffinity = v1.ServiceAffinityClientIP
			if r.pick(2) == 1 {
				s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr(int32(r.next() - 10))}}
			}
		}
		s.Spec.PublishNotReadyAddresses = r.pick(4) == 0
		if r.pick(4) == 0 {
			s.Labels = map[string]string{LabelServiceProxyName: ""}
		}
		in.Services = append(in.Services, s)
	}
	for range r.pick(5) {
		sl := testSlice(r.str("a-1", "a-2", "b-1", "c-1"), r.str(names...))
		sl.AddressType = discovery.AddressType(r.str("IPv4", "IPv6", "FQDN", "x"))
		switch r.pick(5) {
		case 0:
			sl.Labels = nil
		case 1:
			sl.Labels[LabelHeadless] = ""
		}
		sl.Ports = nil
		for range r.pick(3) {
			p := discovery.EndpointPort{Name: []*string{nil, ptr("http"), ptr("dns")}[r.pick(3)],
				Protocol: []*v1.Protocol{nil, ptr(v1.ProtocolUDP), ptr(v1.Protocol("GRE"))}[r.pick(3)]}
			if r.pick(4) != 0 {
				p.Port = ptr(int32([]int{8080, 0, 70000, 53}[r.pick(4)]))
			}
			sl.Ports = append(sl.Ports, p)
		}
		for range r.pick(5) {
			e := discovery.Endpoint{
				NodeName:   []*string{nil, ptr("n1"), ptr("n2")}[r.pick(3)],
				Zone:       []*string{nil, ptr("a"), ptr("b")}[r.pick(3)],
				Conditions: discovery.EndpointConditions{Ready: r.boolPtr(), Serving: r.boolPtr(), Terminating: r.boolPtr()},
			}
			if r.pick(5) != 0 {
				e.Addresses = []string{r.str("10.1.0.1", "10.1.0.2", "fd00:1::1", "0.0.0.0", "x", "::ffff:10.1.0.3")}
			}
			if r.pick(3) == 0 {
				e.Hints = &discovery.EndpointHints{}
				for range r.pick(3) {
					e.Hints.ForZones = append(e.Hints.ForZones, discovery.ForZone{Name: r.str("a", "b", "")})
				}
				for range r.pick(3) {
					e.Hints.ForNodes = append(e.Hints.ForNodes, discovery.ForNode{Name: r.str("n1", "n2")})
				}
			}
			sl.Endpoints = append(sl.Endpoints, e)
		}
		in.Slices = append(in.Slices, sl)
	}
	return in
}
