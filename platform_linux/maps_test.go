package nft

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/internal/teststate"
)

func TestPickClass(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 31: 32, 32: 32, 33: 64, 64: 64, 4096: 4096} {
		if got := pickClass(n); got != want {
			t.Errorf("pickClass(%d) = %d, want %d", n, got, want)
		}
	}
}

// endpointsN are n endpoints 10.244.x.y:8080 numbered from first.
func endpointsN(first, n int) []core.Endpoint {
	out := make([]core.Endpoint, n)
	for i := range out {
		j := first + i
		out[i] = ep(netip.AddrFrom4([4]byte{10, 244, byte(j >> 8), byte(j)}).String(), 8080, false)
	}
	return out
}

// TestAssignSlotsRandomChanges: over random sequences of additions and
// removals, the slots stay 0..N-1 with each endpoint once, an endpoint that
// stays keeps its slot unless it was the last one moved into a hole, and
// the number of slots that change is the number of endpoints added and
// removed, never more.
func TestAssignSlotsRandomChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for run := range 200 {
		pool := endpointsN(0, 80)
		var cur []core.Endpoint
		var slots slotOrder
		for step := range 30 {
			next := make([]core.Endpoint, 0, len(cur)+8)
			removed := 0
			for _, e := range cur {
				if r.IntN(4) == 0 {
					removed++
					continue
				}
				next = append(next, e)
			}
			in := map[netip.AddrPort]bool{}
			for _, e := range next {
				in[e.AddrPort()] = true
			}
			added := 0
			for range r.IntN(6) {
				e := pool[r.IntN(len(pool))]
				if !in[e.AddrPort()] {
					in[e.AddrPort()] = true
					next = append(next, e)
					added++
				}
			}
			r.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
			got := assignSlots(slots, next)
			if len(got) != len(next) {
				t.Fatalf("run %d step %d: %d slots for %d endpoints", run, step, len(got), len(next))
			}
			seen := map[netip.AddrPort]bool{}
			for _, ap := range got {
				if !in[ap] || seen[ap] {
					t.Fatalf("run %d step %d: slot holds %v (wanted once, and only endpoints of %v)", run, step, ap, next)
				}
				seen[ap] = true
			}
			changed := 0
			for i, ap := range got {
				if i >= len(slots) || slots[i] != ap {
					changed++
				}
			}
			// Each removal frees a slot that a new endpoint or the last
			// slot's endpoint fills: at most one changed slot per change.
			if changed > added+removed {
				t.Fatalf("run %d step %d: %d slots changed for %d added and %d removed\nbefore %v\nafter  %v", run, step, changed, added, removed, slots, got)
			}
			if again := assignSlots(got, next); fmt.Sprint(again) != fmt.Sprint(got) {
				t.Fatalf("run %d step %d: assigning the same endpoints again moved slots", run, step)
			}
			cur, slots = next, got
		}
	}
}

// mappedState is node-a of a kubeadm cluster with flannel (pods in
// 10.244.0.0/16), computed by the core, with one shared-map port per
// external policy: default/web (ClusterIP, NodePort, ExternalIP; Cluster
// policy) with the endpoints webEps and default/local (NodePort; Local
// policy, so the cluster path too) with localEps; an endpoint marked Local
// is on node-a, the others on node-b.
func mappedState(t testing.TB, webEps, localEps []core.Endpoint) *core.NodeState {
	t.Helper()
	web := testobj.Service("default", "web", "10.96.0.10")
	web.Spec.Type = v1.ServiceTypeNodePort
	web.Spec.Ports[0].NodePort = 30080
	web.Spec.ExternalIPs = []string{"203.0.113.7"}
	local := testobj.Service("default", "local", "10.96.0.11")
	local.Spec.Type = v1.ServiceTypeNodePort
	local.Spec.Ports = []v1.ServicePort{{Port: 53, NodePort: 30053, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(8080)}}
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	opts := core.Options{
		IPFamilies:  []v1.IPFamily{v1.IPv4Protocol},
		LocalDetect: core.LocalDetect{Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
	}
	return teststate.Compute(t, opts, testobj.Node("node-a", "", "192.168.1.10"), web, sliceOf("web", "http", v1.ProtocolTCP, webEps),
		local, sliceOf("local", "", v1.ProtocolUDP, localEps))
}

// sliceOf is Service svc's EndpointSlice with the endpoints eps (port 8080).
func sliceOf(svc, port string, proto v1.Protocol, eps []core.Endpoint) *discovery.EndpointSlice {
	sl := testobj.Slice("default", svc+"-1", svc)
	sl.Ports = []discovery.EndpointPort{testobj.SlicePort(port, proto, 8080)}
	for _, e := range eps {
		node := "node-b"
		if e.Local {
			node = "node-a"
		}
		sl.Endpoints = append(sl.Endpoints, testobj.Endpoint(e.Addr.String(), node))
	}
	return sl
}

// TestEndpointChangeSendsOnlyElements: whatever happens to the endpoints of
// shared-map ports (one added, one removed, one replaced, a count crossing a
// power of two, the last one gone and back, a local endpoint appearing under
// a Local policy), a partial sync sends element commands on plain sets and
// data maps only: no rule, no chain, no set and no verdict map element, so
// the kernel validates nothing. One endpoint added or removed costs a
// handful of commands whatever the number of Services.
func TestEndpointChangeSendsOnlyElements(t *testing.T) {
	steps := []struct {
		name     string
		web, loc []core.Endpoint
		maxOps   int
	}{
		{"start", endpointsN(0, 3), endpointsN(100, 2), -1},
		{"one added (3 -> 4, same class)", endpointsN(0, 4), endpointsN(100, 2), 4},
		{"one added (4 -> 5, class 4 -> 8)", endpointsN(0, 5), endpointsN(100, 2), 6},
		{"first removed (last slot moves into its hole)", endpointsN(1, 4), endpointsN(100, 2), 6},
		{"one replaced", append(endpointsN(1, 3), endpointsN(50, 1)...), endpointsN(100, 2), 6},
		{"all gone: reject", nil, endpointsN(100, 2), -1},
		{"back", endpointsN(7, 2), endpointsN(100, 2), -1},
		{"a local endpoint under the Local policy", endpointsN(7, 2), append(endpointsN(100, 2), func() core.Endpoint {
			e := endpointsN(102, 1)[0]
			e.Local = true
			return e
		}()), -1},
		{"Local policy loses every endpoint", endpointsN(7, 2), nil, -1},
	}
	cfg := Config{LocalhostNodePorts: true}
	var prev *applied
	for i, s := range steps {
		st := mappedState(t, s.web, s.loc)
		if i == 0 {
			rs := build(st, cfg)
			c := cfg
			c.Shards = rs.Shards
			prev = newApplied(rs, c)
			continue
		}
		ports := map[core.PortKey]*portObjects{}
		dets := detects{}
		for k, p := range st.Ports {
			ports[k] = buildPort(p, dets.of(st, k.Family), prev.cfg, prev.Ports[k].slots)
		}
		plan := planPartial(prev, ports)
		if plan.Batch.Len() == 0 {
			t.Fatalf("%s: nothing sent", s.name)
		}
		for _, op := range plan.Batch.Ops {
			var set Set
			switch op := op.(type) {
			case addElementsOp:
				set = op.Set
			case delElementsOp:
				set = op.Set
			}
			if set.Name == "" || set.Kind == SetFrontends || set.Kind == SetAffinity {
				t.Errorf("%s: the batch has %q; an endpoint change must send elements of plain sets and data maps only",
					s.name, (&batch{Ops: []Op{op}}).Text())
			}
		}
		if s.maxOps >= 0 && plan.Batch.Len() > s.maxOps {
			t.Errorf("%s: %d commands, want at most %d:\n%s", s.name, plan.Batch.Len(), s.maxOps, plan.Batch.Text())
		}
		plan.commit(prev)
		// What the partial syncs left is what a full sync of the same
		// state writes, slot order aside.
		want := build(st, cfg)
		for _, p := range want.Ports {
			got := prev.objects(p.Key)
			if a, b := sharedSummary(got), sharedSummary(p); a != b {
				t.Errorf("%s: %s after partial syncs:\n%s\nfull sync:\n%s", s.name, p.Key, a, b)
			}
		}
	}
}

// sharedSummary lists a port's shared elements with the slot left out of
// the endpoint elements, sorted.
func sharedSummary(p *portObjects) string {
	lines := map[string]int{}
	for _, se := range p.Shared {
		e := se.e
		e.Slot = 0
		lines[se.set.Name+" "+e.nft(se.set.Kind)]++
	}
	return fmt.Sprint(lines)
}

// TestMappedPortsFollowTheirFeatures: ports with ClientIP affinity or
// LoadBalancer source ranges keep chains of their own; every other port is
// only shared elements.
func TestMappedPortsFollowTheirFeatures(t *testing.T) {
	rs := build(testState(t), Config{})
	for _, p := range rs.Ports {
		sp := p.From.port
		own := sp.Affinity.ClientIP || (len(sp.SourceRanges) > 0 && p.Key.Service.Name == "lb")
		switch {
		case own && (len(p.Chains) == 0 || len(p.Shared) > 0 || p.Shard < 0):
			t.Errorf("%s: want chains of its own in a shard, got %d chains, %d shared elements", p.Key, len(p.Chains), len(p.Shared))
		case !own && (len(p.Chains) > 0 || len(p.Frontends) > 0 || len(p.Shared) == 0 || p.Shard >= 0):
			t.Errorf("%s: want shared elements only, got %d chains, %d frontends", p.Key, len(p.Chains), len(p.Frontends))
		}
	}
}

// TestHairpinSetHoldsOnlyEndpointsThatCanReachThemselves: in node-a of a
// kubeadm cluster with flannel, an endpoint gets a hairpin element when its
// own connection can come through this node's rules untranslated: it runs
// on node-a, or its slice does not say where it runs, or its Service has
// the Local external policy (a remote pod's connection to node-a's NodePort
// takes the cluster path unmasqueraded and may draw that pod). A remote
// endpoint of a Cluster-policy Service never needs one: its own node
// translates its connections to the ClusterIP, and external ones are
// masqueraded anyway.
func TestHairpinSetHoldsOnlyEndpointsThatCanReachThemselves(t *testing.T) {
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
		LocalDetect: core.LocalDetect{Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}}}
	node := testobj.Node("node-a", "", "192.168.1.10")
	web := testobj.Service("default", "web", "10.96.0.10")
	web.Spec.Type = v1.ServiceTypeNodePort
	web.Spec.Ports[0].NodePort = 30080
	webEps := testobj.Slice("default", "web-1", "web",
		testobj.Endpoint("10.244.2.6", "node-a"), testobj.Endpoint("10.244.1.5", "node-b"), testobj.Endpoint("10.244.3.4", ""))
	local := testobj.Service("default", "local", "10.96.0.11")
	local.Spec.Type = v1.ServiceTypeNodePort
	local.Spec.Ports[0].NodePort = 30081
	local.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	localEps := testobj.Slice("default", "local-1", "local", testobj.Endpoint("10.244.1.8", "node-b"), testobj.Endpoint("10.244.2.9", "node-a"))
	st := teststate.Compute(t, opts, node, web, webEps, local, localEps)

	want := map[string][]string{
		"web":   {"10.244.2.6", "10.244.3.4"},
		"local": {"10.244.1.8", "10.244.2.9"},
	}
	for _, p := range build(st, Config{}).Ports {
		got := fmt.Sprint(p.Endpoints)
		if w := fmt.Sprint(want[p.Key.Service.Name]); got != w {
			t.Errorf("%s: hairpin addresses %s, want %s", p.Key, got, w)
		}
	}
	text := build(st, Config{}).Text()
	for _, absent := range []string{"10.244.1.5 . 10.244.1.5"} {
		if strings.Contains(text, absent) {
			t.Errorf("the ruleset has the hairpin element %q of a remote endpoint of a Cluster-policy Service:\n%s", absent, text)
		}
	}
	for _, present := range []string{"10.244.2.6 . 10.244.2.6", "10.244.3.4 . 10.244.3.4", "10.244.1.8 . 10.244.1.8", "10.244.2.9 . 10.244.2.9"} {
		if !strings.Contains(text, present) {
			t.Errorf("the ruleset lacks the hairpin element %q:\n%s", present, text)
		}
	}
}
