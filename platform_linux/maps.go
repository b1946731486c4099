package nft

import (
	"math/bits"
	"net/netip"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// The shared-map layout. A Service port without ClientIP affinity and
// without loadBalancerSourceRanges has no chain, rule or named set of its
// own: it is only elements of a few sets and two data maps of the main table,
// shared by every such port of a family. Elements of plain sets and data maps
// are never validated by the kernel and do not depend on the number of rules,
// so an endpoint change costs the kernel O(1) whatever the number of
// Services (platform_linux/README.md, "Shared-map layout"). Ports with
// affinity or source ranges keep chains of their own in the shard tables.
//
// A packet to a frontend goes through fixed chains per family:
//
//	dispatch-*      base chains: frontends in service-frontends-vN go on
//	services-vN     external Local policy? masquerade decision, then pick
//	ext-local-vN    pods and the node itself take the cluster path; others
//	                keep their source and pick among local endpoints
//	ext-cluster-vN  that cluster path: its own masquerade decision and pick
//	pick-vN         no endpoint: drop or reject; else the frontend's class
//	pick-vN-M       draws a slot in [0, M) and looks the frontend and slot up
//	                in endpoints-vN-M (cluster-endpoints-vN-M for the cluster
//	                path), the endpoint map of class M
//
// Endpoint choice. A frontend with N endpoints has them in slots 0..N-1 of
// the map and is in the class M, the power of two with N <= M < 2N. Class M's
// chain repeats "dnat to frontend . numgen random mod M map @endpoints"
// pickAttempts times: a slot >= N is a miss, which ends the rule without a
// verdict, and the next rule draws again. numgen random mod M is the top bits
// of a uniform 32-bit number, exactly uniform for a power of two, so a hit is
// uniform over the N slots; each draw misses with probability (M-N)/M < 1/2,
// so all pickAttempts miss with probability below 2^-32, and the last rule
// (mod 1) takes slot 0 then. Powers of two rather than one chain per N keep
// the number of classes (and of lookups before a frontend finds its class)
// at log2 of the largest endpoint count, and a frontend changes class only
// when its count crosses a power of two; the price, a 2^-32 bias towards slot
// 0, is far below what any test of a load balancer can see.
//
// Each class has its own endpoint map, bound only by its own chain's draws:
// the kernel checks every element added to a map against every rule bound to
// it, so one map for all classes made each element cost 429 checks (13
// classes x 33 draws) instead of 33 (test/results/scale.md). A frontend whose
// count crosses a power of two moves its slots to the next class's map.
//
// Removing an endpoint moves the last slot into the hole (assignSlots), so
// the slots stay 0..N-1 and one endpoint change is a handful of element
// commands, never a rule, chain or verdict element.

// pickClassBits bounds the classes: 1, 2, 4, ... 2^pickClassBits endpoints.
// A port with more endpoints in one of its lists keeps chains of its own.
const pickClassBits = 12

// maxMappedEndpoints is the most endpoints a shared-map port may have in one list.
const maxMappedEndpoints = 1 << pickClassBits

// pickAttempts is the number of draws before the fallback to slot 0.
const pickAttempts = 32

// pickClass is the class of a frontend with n > 0 endpoints: the smallest
// power of two >= n.
func pickClass(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// Names of the shared-map layout's chains and sets in the main table.
const (
	chainDispatchPrerouting = "dispatch-prerouting"
	chainDispatchOutput     = "dispatch-output"
)

// pickPath is one of the two endpoint choices of a frontend: the main one,
// and the cluster path of an external Local-policy frontend (pods and the
// node itself use every endpoint).
type pickPath int

const (
	pathMain pickPath = iota
	pathCluster
)

func (p pickPath) prefix() string {
	if p == pathCluster {
		return "cluster-"
	}
	return ""
}

// sharedSets names every set and chain of one family's shared-map layout.
type sharedSets struct {
	fam                  v1.IPFamily
	frontends, extLocal  Set
	masq, masqOff        [2]Set // per path
	drop, reject         [2]Set
	endpoints            [2][pickClassBits + 1]Set // per path and class
	classes              [2][pickClassBits + 1]Set
	services, extLocalCh string
	extCluster           string
	pick                 [2]string
	pickClass            [2][pickClassBits + 1]string
	sets                 []Set
}

var sharedByFamily = [2]*sharedSets{newSharedSets(v1.IPv4Protocol), newSharedSets(v1.IPv6Protocol)}

func shared(f v1.IPFamily) *sharedSets { return sharedByFamily[familyIndex(f)] }

func newSharedSets(f v1.IPFamily) *sharedSets {
	v := familySuffix(f)
	keys := func(name string) Set {
		return Set{Name: name + "-" + v, Family: f, Kind: SetKeys}
	}
	s := &sharedSets{fam: f,
		frontends:  keys("service-frontends"),
		extLocal:   keys("ext-local-frontends"),
		services:   "services-" + v,
		extLocalCh: "ext-local-" + v,
		extCluster: "ext-cluster-" + v,
	}
	s.sets = append(s.sets, s.frontends, s.extLocal)
	for _, p := range []pickPath{pathMain, pathCluster} {
		pre := p.prefix()
		s.masq[p] = keys(pre + "masq-frontends")
		s.masqOff[p] = keys(pre + "masq-off-cluster-frontends")
		s.drop[p] = keys(pre + "drop-frontends")
		s.reject[p] = keys(pre + "reject-frontends")
		s.pick[p] = pre + "pick-" + v
		s.sets = append(s.sets, s.masq[p], s.masqOff[p], s.drop[p], s.reject[p])
		for c := 0; c <= pickClassBits; c++ {
			m := strconv.Itoa(1 << c)
			s.classes[p][c] = keys(pre + "pick-" + m + "-frontends")
			s.endpoints[p][c] = Set{Name: pre + "endpoints-" + v + "-" + m, Family: f, Kind: SetEndpoints}
			s.pickClass[p][c] = pre + "pick-" + v + "-" + m
		}
	}
	return s
}

// classUse says which pick classes the shared-map frontends use, per family
// and path: bit c of use[family][path] is class 1<<c. A class exists in the
// ruleset (its frontend set, endpoint map and draw chain, and its rule in
// the pick chain) only while a frontend is in it: a node with a few
// Services has a few classes' 33 draws instead of all 13 classes' 429 per
// path and family, which is most of what a full sync of a small ruleset
// writes (the repair after a firewall reload, test/results/faults.md).
type classUse [2][2]uint16

// classUseOf is the use that element counts per set name show, summed over
// counts (a record's counts and a plan's changes to them).
func classUseOf(counts ...map[string]int) classUse {
	var u classUse
	for fi, s := range sharedByFamily {
		for _, p := range []pickPath{pathMain, pathCluster} {
			for c := 0; c <= pickClassBits; c++ {
				n := 0
				for _, m := range counts {
					n += m[s.classes[p][c].Name]
				}
				if n > 0 {
					u[fi][p] |= 1 << c
				}
			}
		}
	}
	return u
}

// has reports whether class c of family index fi is used on path p.
func (u classUse) has(fi int, p pickPath, c int) bool { return u[fi][p]&(1<<c) != 0 }

// classSets are the family's sets and maps of the classes in use.
func (s *sharedSets) classSets(use classUse) []Set {
	fi := familyIndex(s.fam)
	var out []Set
	for _, p := range []pickPath{pathMain, pathCluster} {
		for c := 0; c <= pickClassBits; c++ {
			if use.has(fi, p, c) {
				out = append(out, s.classes[p][c], s.endpoints[p][c])
			}
		}
	}
	return out
}

// chains builds the family's chains; det is its local detection, use the
// classes in use.
func (s *sharedSets) chains(det core.FamilyLocalDetect, use classUse) []*Chain {
	f := s.fam
	fi := familyIndex(f)
	fe := func(set Set) matchFrontend { return matchFrontend{Family: f, Set: set.Name} }
	jump := func(c string) Verdict { return Verdict{Kind: verdictJump, Chain: c} }
	gotoC := func(c string) Verdict { return Verdict{Kind: verdictGoto, Chain: c} }
	masqDecision := func(p pickPath) []Rule {
		rules := []Rule{{fe(s.masq[p]), jump(chainMarkMasq)}}
		if det.Implemented() {
			rules = append(rules, Rule{fe(s.masqOff[p]), jump(offClusterChain(f))})
		}
		return rules
	}
	services := []Rule{{fe(s.extLocal), gotoC(s.extLocalCh)}}
	services = append(services, masqDecision(pathMain)...)
	services = append(services, Rule{gotoC(s.pick[pathMain])})
	var extLocal []Rule
	if det.Implemented() {
		extLocal = append(extLocal, localSourceRules(f, det, gotoC(s.extCluster))...)
	}
	extLocal = append(extLocal,
		Rule{matchLocalSource{}, jump(chainMarkMasq)},
		Rule{matchLocalSource{}, gotoC(s.extCluster)},
		Rule{gotoC(s.pick[pathMain])})
	extCluster := append(masqDecision(pathCluster), Rule{gotoC(s.pick[pathCluster])})
	out := []*Chain{
		{Name: s.services, Rules: services},
		{Name: s.extLocalCh, Rules: extLocal},
		{Name: s.extCluster, Rules: extCluster},
	}
	for _, p := range []pickPath{pathMain, pathCluster} {
		pick := []Rule{
			{fe(s.drop[p]), Verdict{Kind: verdictDrop}},
			{fe(s.reject[p]), gotoC(chainReject)},
		}
		for c := 0; c <= pickClassBits; c++ {
			if !use.has(fi, p, c) {
				continue
			}
			pick = append(pick, Rule{fe(s.classes[p][c]), gotoC(s.pickClass[p][c])})
			m := uint32(1) << c
			em := s.endpoints[p][c].Name
			draws := make([]Rule, 0, pickAttempts+1)
			if m == 1 {
				draws = append(draws, Rule{dnatPick{Family: f, Map: em, Mod: 1}})
			} else {
				for range pickAttempts {
					draws = append(draws, Rule{dnatPick{Family: f, Map: em, Mod: m}})
				}
				draws = append(draws, Rule{dnatPick{Family: f, Map: em, Mod: 1}})
			}
			out = append(out, &Chain{Name: s.pickClass[p][c], Rules: draws})
		}
		out = append(out, &Chain{Name: s.pick[p], Rules: pick})
	}
	return out
}

// dispatchRule sends the family's shared-map frontends to its services chain.
func (s *sharedSets) dispatchRule() Rule {
	return Rule{matchFrontend{Family: s.fam, Set: s.frontends.Name}, Verdict{Kind: verdictGoto, Chain: s.services}}
}

// sharedElem is one element a shared-map port puts in a set of the main table.
type sharedElem struct {
	set *Set
	e   element
}

// slotOrder is the endpoint in each slot of one endpoint list, slot i at i.
type slotOrder []netip.AddrPort

// portSlots are the slot orders of a shared-map port's endpoint lists: what
// the backend keeps so that a change moves as few slots as it can.
type portSlots struct {
	internal, external, local, cluster slotOrder
}

// mapped reports whether port p goes in the shared-map layout.
func (c Config) mapped(p *core.ServicePort) bool {
	if c.ownChains || p.Affinity.ClientIP {
		return false
	}
	if len(p.SourceRanges) > 0 {
		for _, fe := range p.Frontends {
			if fe.Kind == core.FrontendLoadBalancer {
				return false
			}
		}
	}
	for _, eps := range [][]core.Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
		if len(eps) > maxMappedEndpoints {
			return false
		}
	}
	return true
}

// assignSlots gives the endpoints eps their slots, keeping every endpoint
// that prev already has in its slot: new endpoints fill the holes removed ones
// left, remaining holes take the last slots, and what is left of the new
// ones is appended. With prev nil the slots follow eps.
func assignSlots(prev slotOrder, eps []core.Endpoint) slotOrder {
	if len(prev) == 0 {
		return slotsInOrder(eps)
	}
	want := make(map[netip.AddrPort]bool, len(eps))
	for _, ep := range eps {
		want[ep.AddrPort()] = true
	}
	out := make(slotOrder, 0, len(want))
	for _, ap := range prev {
		if want[ap] {
			out = append(out, ap)
			delete(want, ap)
		} else {
			out = append(out, netip.AddrPort{})
		}
	}
	var fresh []netip.AddrPort
	for _, ep := range eps {
		if ap := ep.AddrPort(); want[ap] {
			fresh = append(fresh, ap)
			delete(want, ap)
		}
	}
	for i := 0; i < len(out); {
		if out[i].IsValid() {
			i++
			continue
		}
		if len(fresh) > 0 {
			out[i], fresh = fresh[0], fresh[1:]
			i++
			continue
		}
		last := len(out) - 1
		out[i] = out[last]
		out = out[:last]
	}
	return append(out, fresh...)
}

// slotsInOrder gives eps the slots in their order, each endpoint once: what
// a full sync does, without assignSlots' map for the common short lists.
func slotsInOrder(eps []core.Endpoint) slotOrder {
	out := make(slotOrder, 0, len(eps))
	if len(eps) > 32 {
		seen := make(map[netip.AddrPort]bool, len(eps))
		for _, ep := range eps {
			if ap := ep.AddrPort(); !seen[ap] {
				seen[ap] = true
				out = append(out, ap)
			}
		}
		return out
	}
	for _, ep := range eps {
		if ap := ep.AddrPort(); !slices.Contains(out, ap) {
			out = append(out, ap)
		}
	}
	return out
}

// mapPort fills o with the shared elements of a shared-map port: every
// frontend in the family's frontends set, in the sets of its masquerade
// decision and endpoint class, and its endpoints in the endpoint maps. prev
// are the slots the port had (nil: none); the new ones are recorded in
// o.From.slots.
func (b *portBuilder) mapPort(frontends []frontendTarget, prev *portSlots) {
	p, det := b.p, b.det
	s := shared(p.Key.Family)
	if prev == nil {
		prev = &portSlots{}
	}
	slots := &portSlots{}
	b.o.From.slots = slots
	order := func(dst *slotOrder, old slotOrder, eps []core.Endpoint) slotOrder {
		if *dst == nil {
			*dst = assignSlots(old, eps)
		}
		return *dst
	}
	add := func(set *Set, e element) { b.o.Shared = append(b.o.Shared, sharedElem{set: set, e: e}) }
	if b.tally != nil {
		add = func(set *Set, _ element) { b.tally[set.Name]++ }
	} else {
		// Sized for the usual case: per frontend the gate, a masquerade
		// set, a class and the endpoints.
		b.o.Shared = make([]sharedElem, 0, len(frontends)*(3+len(p.ClusterEndpoints)))
	}
	pick := func(path pickPath, key element, so slotOrder, empty core.Verdict) {
		if len(so) == 0 {
			if empty == core.VerdictDrop {
				add(&s.drop[path], key)
			} else {
				add(&s.reject[path], key)
			}
			return
		}
		c := bits.Len(uint(pickClass(len(so)))) - 1
		add(&s.classes[path][c], key)
		for i, ap := range so {
			e := key
			e.Slot, e.To = uint32(i), ap
			add(&s.endpoints[path][c], e)
		}
	}
	offCluster := p.Masquerade.OffClusterInternal && det.Implemented()
	// internalMasq is the masquerade decision of internal traffic.
	internalMasq := func(path pickPath, key element) {
		switch {
		case p.Masquerade.All:
			add(&s.masq[path], key)
		case offCluster:
			add(&s.masqOff[path], key)
		}
	}
	service := p.Key.Service.String()
	for _, fe := range frontends {
		key := element{Addr: fe.Addr, Proto: fe.Proto, Port: fe.Port}
		// The gate element names its Service: the read-back behind
		// explain finds a Service's frontends by it.
		gate := key
		gate.Comment = fe.Comment + " " + service
		add(&s.frontends, gate)
		switch {
		case fe.path == pathInternal:
			internalMasq(pathMain, key)
			pick(pathMain, key, order(&slots.internal, prev.internal, p.InternalEndpoints()), p.InternalEmpty)
		case !p.ExternalPolicyLocal:
			if p.Masquerade.External {
				add(&s.masq[pathMain], key)
			}
			if p.Masquerade.External && !p.InternalPolicyLocal {
				pick(pathMain, key, order(&slots.internal, prev.internal, p.InternalEndpoints()), p.InternalEmpty)
			} else {
				pick(pathMain, key, order(&slots.external, prev.external, p.ExternalEndpoints()), p.ExternalEmpty)
			}
		default:
			add(&s.extLocal, key)
			pick(pathMain, key, order(&slots.local, prev.local, p.LocalEndpoints), p.ExternalEmpty)
			if !p.InternalPolicyLocal {
				internalMasq(pathCluster, key)
				pick(pathCluster, key, order(&slots.internal, prev.internal, p.InternalEndpoints()), p.InternalEmpty)
			} else {
				pick(pathCluster, key, order(&slots.cluster, prev.cluster, p.ClusterEndpoints), core.VerdictReject)
			}
		}
	}
}

// tallyShared counts the elements shared-map port p puts in each set of the
// main table into tally, without building them: a full sync declares the
// sets, sized by these counts (sizes.go), before it builds any port.
func tallyShared(p *core.ServicePort, det *core.FamilyLocalDetect, cfg Config, tally map[string]int) {
	b := &portBuilder{p: p, det: *det, o: &portObjects{}, tally: tally}
	b.mapPort(frontendTargets(p, cfg), nil)
}
