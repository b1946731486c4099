package core

import (
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
	f.Fuzz(func(t *testing.T, data []byte) {
		var in fuzzInput
		if err := json.Unmarshal(data, &in); err != nil {
			return
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
		if len(p.Frontends) == 0 || p.Frontends[0].Kind != FrontendClusterIP {
			t.Fatalf("%s: frontends %v do not start with the ClusterIP", k, p.Frontends)
		}
		if p.Port == 0 {
			t.Fatalf("%s: port 0", k)
		}
		for _, fe := range p.Frontends {
			if !fe.Addr.IsValid() || familyOf(fe.Addr) != k.Family || fe.Port == 0 {
				t.Fatalf("%s: bad frontend %v", k, fe)
			}
		}
		for _, r := range p.SourceRanges {
			if familyOf(r.Addr()) != k.Family || r.Bits() == 0 {
				t.Fatalf("%s: bad source range %v", k, r)
			}
		}
		for _, set := range [][]Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
			for i, e := range set {
				if !e.Addr.IsValid() || familyOf(e.Addr) != k.Family || e.Port == 0 {
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
}
