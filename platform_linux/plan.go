package nft

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// OpKind is one kind of netlink command in a batch.
type OpKind int

const (
	OpAddTable OpKind = iota
	OpDelTable
	OpFlushTable
	OpAddSet
	OpDelSet
	OpFlushSet
	OpAddChain
	OpFlushChain
	OpDelChain
	OpAddRule
	OpAddElements
	OpDelElements
)

// Op is one command of a batch. Set is used by set and element ops, Chain by
// chain ops, Rule (with Chain.Name) by OpAddRule.
type Op struct {
	Kind     OpKind
	Set      Set
	Chain    *Chain
	Rule     Rule
	Elements []Element
}

// Batch is an ordered list of commands the kernel applies atomically. It is
// plain data, so planning is tested without a kernel; Text shows it as nft
// commands.
type Batch struct {
	Table string
	Ops   []Op
}

func (b *Batch) add(op Op) { b.Ops = append(b.Ops, op) }

// Len is the number of commands.
func (b *Batch) Len() int { return len(b.Ops) }

// Text prints the batch as the equivalent nft commands, one per line.
func (b *Batch) Text() string {
	var s strings.Builder
	t := "inet " + b.Table
	for _, op := range b.Ops {
		switch op.Kind {
		case OpAddTable:
			fmt.Fprintf(&s, "add table %s\n", t)
		case OpDelTable:
			fmt.Fprintf(&s, "delete table %s\n", t)
		case OpFlushTable:
			fmt.Fprintf(&s, "flush table %s\n", t)
		case OpAddSet:
			fmt.Fprintf(&s, "add set %s %s { type %s; }\n", t, op.Set.Name, op.Set.nftType())
		case OpDelSet:
			fmt.Fprintf(&s, "delete set %s %s\n", t, op.Set.Name)
		case OpFlushSet:
			fmt.Fprintf(&s, "flush set %s %s\n", t, op.Set.Name)
		case OpAddChain:
			fmt.Fprintf(&s, "add chain %s %s\n", t, op.Chain.Name)
		case OpFlushChain:
			fmt.Fprintf(&s, "flush chain %s %s\n", t, op.Chain.Name)
		case OpDelChain:
			fmt.Fprintf(&s, "delete chain %s %s\n", t, op.Chain.Name)
		case OpAddRule:
			fmt.Fprintf(&s, "add rule %s %s %s\n", t, op.Chain.Name, op.Rule)
		case OpAddElements, OpDelElements:
			verb := "add"
			if op.Kind == OpDelElements {
				verb = "delete"
			}
			es := make([]string, len(op.Elements))
			for i, e := range op.Elements {
				es[i] = e.nft(op.Set.Kind)
				if op.Kind == OpDelElements && op.Set.Kind == SetFrontends {
					es[i] = fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port)
				}
			}
			fmt.Fprintf(&s, "%s element %s %s { %s }\n", verb, t, op.Set.Name, strings.Join(es, ", "))
		}
	}
	return s.String()
}

// Applied is what the backend last programmed successfully: the input of the
// next partial sync's diff. Counts track how many ports use each shared
// cluster-ips and hairpin element.
type Applied struct {
	Globals    *Globals
	Ports      map[core.PortKey]*PortObjects
	clusterIPs map[netip.Addr]int
	hairpin    map[netip.Addr]int
}

// NewApplied records a fully programmed ruleset.
func NewApplied(rs *Ruleset) *Applied {
	a := &Applied{Globals: rs.Globals, Ports: make(map[core.PortKey]*PortObjects, len(rs.Ports)),
		clusterIPs: map[netip.Addr]int{}, hairpin: map[netip.Addr]int{}}
	for _, p := range rs.Ports {
		a.Ports[p.Key] = p
		a.count(p, 1)
	}
	return a
}

func (a *Applied) count(p *PortObjects, d int) {
	if p.ClusterIP.IsValid() {
		a.clusterIPs[p.ClusterIP] += d
	}
	for _, e := range p.Endpoints {
		a.hairpin[e] += d
	}
}

// maxElementsPerOp keeps one element message under the 64 KiB netlink
// attribute limit.
const maxElementsPerOp = 200

func (b *Batch) elements(kind OpKind, s Set, es []Element) {
	for len(es) > 0 {
		n := min(len(es), maxElementsPerOp)
		b.add(Op{Kind: kind, Set: s, Elements: es[:n]})
		es = es[n:]
	}
}

// PlanFull writes the whole ruleset in one batch. existingChains and
// existingSets are what the kernel holds in the table now; objects crossproxy
// no longer wants are deleted, the rest are rewritten in place (affinity sets
// keep their entries). With recreate, the table is deleted and written anew,
// which also repairs objects someone changed behind crossproxy's back.
func PlanFull(rs *Ruleset, existingChains, existingSets []string, recreate bool) *Batch {
	chains := rs.Chains()
	nrules := 0
	for _, c := range chains {
		nrules += len(c.Rules)
	}
	b := &Batch{Table: rs.Table, Ops: make([]Op, 0, 2*len(chains)+nrules+len(rs.Ports)/maxElementsPerOp+64)}
	b.add(Op{Kind: OpAddTable})
	if recreate {
		b.add(Op{Kind: OpDelTable})
		b.add(Op{Kind: OpAddTable})
		existingChains, existingSets = nil, nil
	} else {
		b.add(Op{Kind: OpFlushTable})
	}
	sets := rs.Sets()
	wantSet := make(map[string]bool, len(sets))
	for _, s := range sets {
		wantSet[s.Name] = true
	}
	have := map[string]bool{}
	for _, n := range existingSets {
		have[n] = true
	}
	// Old elements go first so stale chains lose their references.
	for _, s := range rs.Globals.Sets {
		if have[s.Name] {
			b.add(Op{Kind: OpFlushSet, Set: s})
		}
	}
	for _, n := range existingSets {
		if !wantSet[n] {
			b.add(Op{Kind: OpDelSet, Set: Set{Name: n}})
		}
	}
	wantChain := make(map[string]bool, len(chains))
	for _, c := range chains {
		wantChain[c.Name] = true
	}
	for _, n := range existingChains {
		if !wantChain[n] {
			b.add(Op{Kind: OpDelChain, Chain: &Chain{Name: n}})
		}
	}
	for _, s := range sets {
		if !have[s.Name] || s.Kind != SetAffinity {
			b.add(Op{Kind: OpAddSet, Set: s})
		}
	}
	for _, c := range chains {
		b.add(Op{Kind: OpAddChain, Chain: c})
	}
	for _, c := range chains {
		for _, r := range c.Rules {
			b.add(Op{Kind: OpAddRule, Chain: c, Rule: r})
		}
	}
	elems := rs.Elements()
	for _, s := range rs.Globals.Sets {
		b.elements(OpAddElements, s, elems[s.Name])
	}
	return b
}

// PartialPlan is a partial sync's batch and what Commit records once the
// kernel accepted it.
type PartialPlan struct {
	Batch   *Batch
	ports   map[core.PortKey]*PortObjects
	ipDelta map[netip.Addr]int
	hpDelta map[netip.Addr]int
}

// Commit records the plan in a (the Applied state it was planned from), after
// the kernel accepted the batch. It costs O(changes), not O(Services).
func (p *PartialPlan) Commit(a *Applied) {
	for k, v := range p.ports {
		if v == nil {
			delete(a.Ports, k)
		} else {
			a.Ports[k] = v
		}
	}
	commitCounts(a.clusterIPs, p.ipDelta)
	commitCounts(a.hairpin, p.hpDelta)
}

func commitCounts(m, delta map[netip.Addr]int) {
	for addr, d := range delta {
		if n := m[addr] + d; n > 0 {
			m[addr] = n
		} else {
			delete(m, addr)
		}
	}
}

// PlanPartial rewrites only the given ports: chains that changed are flushed
// and refilled, new ones added, gone ones deleted; map elements and shared set
// elements are added and deleted one by one. ports maps each changed key to its
// new objects, or to nil when the port is gone. prev is not modified; the
// caller commits the plan into it once the kernel took the batch.
func PlanPartial(table string, prev *Applied, ports map[core.PortKey]*PortObjects) *PartialPlan {
	b := &Batch{Table: table}
	keys := make([]core.PortKey, 0, len(ports))
	for k := range ports {
		keys = append(keys, k)
	}
	SortKeys(keys)

	oldChains, newChains := map[string]*Chain{}, map[string]*Chain{}
	oldSets, newSets := map[string]Set{}, map[string]Set{}
	type famElems struct{ add, del []Element }
	fe := map[v1.IPFamily]*famElems{}
	ipDelta, hpDelta := map[netip.Addr]int{}, map[netip.Addr]int{}
	var chainOrder []string
	for _, k := range keys {
		old, nu := prev.Ports[k], ports[k]
		if fe[k.Family] == nil {
			fe[k.Family] = &famElems{}
		}
		oldFE := map[string]Element{}
		if old != nil {
			for _, c := range old.Chains {
				oldChains[c.Name] = c
			}
			for _, s := range old.AffinitySets {
				oldSets[s.Name] = s
			}
			for _, e := range old.Frontends {
				oldFE[elemKey(e)] = e
			}
			if old.ClusterIP.IsValid() {
				ipDelta[old.ClusterIP]--
			}
			for _, a := range old.Endpoints {
				hpDelta[a]--
			}
		}
		if nu != nil {
			for _, c := range nu.Chains {
				newChains[c.Name] = c
				chainOrder = append(chainOrder, c.Name)
			}
			for _, s := range nu.AffinitySets {
				newSets[s.Name] = s
			}
			for _, e := range nu.Frontends {
				o, ok := oldFE[elemKey(e)]
				if ok && o == e {
					delete(oldFE, elemKey(e))
					continue
				}
				fe[k.Family].add = append(fe[k.Family].add, e)
			}
			if nu.ClusterIP.IsValid() {
				ipDelta[nu.ClusterIP]++
			}
			for _, a := range nu.Endpoints {
				hpDelta[a]++
			}
		}
		for _, e := range oldFE {
			fe[k.Family].del = append(fe[k.Family].del, e)
		}
	}

	// 1. new sets and chains exist before anything refers to them.
	for _, n := range sortedKeys(newSets) {
		if _, ok := oldSets[n]; !ok {
			b.add(Op{Kind: OpAddSet, Set: newSets[n]})
		}
	}
	for _, n := range chainOrder {
		if _, ok := oldChains[n]; !ok {
			b.add(Op{Kind: OpAddChain, Chain: newChains[n]})
		}
	}
	// 2. changed chains are flushed and refilled, new ones filled.
	for _, n := range chainOrder {
		c := newChains[n]
		if o, ok := oldChains[n]; ok {
			if rulesEqual(o.Rules, c.Rules) {
				continue
			}
			b.add(Op{Kind: OpFlushChain, Chain: c})
		}
		for _, r := range c.Rules {
			b.add(Op{Kind: OpAddRule, Chain: c, Rule: r})
		}
	}
	// 3. frontend map elements.
	fams := make([]v1.IPFamily, 0, len(fe))
	for f := range fe {
		fams = append(fams, f)
	}
	sort.Slice(fams, func(i, j int) bool { return fams[i] < fams[j] })
	for _, f := range fams {
		s := Set{Name: frontendMap(f), Family: f, Kind: SetFrontends}
		sortElems(fe[f].del)
		sortElems(fe[f].add)
		b.elements(OpDelElements, s, fe[f].del)
		b.elements(OpAddElements, s, fe[f].add)
	}
	// 4. shared sets: an element exists while at least one port uses it.
	countElements(b, prev.clusterIPs, ipDelta, clusterIPSet, false)
	countElements(b, prev.hairpin, hpDelta, hairpinSet, true)
	// 5. chains and sets no port uses any more.
	var dying []string
	for n := range oldChains {
		if _, ok := newChains[n]; !ok {
			dying = append(dying, n)
		}
	}
	sort.Strings(dying)
	for _, n := range dying {
		b.add(Op{Kind: OpFlushChain, Chain: oldChains[n]})
	}
	for _, n := range dying {
		b.add(Op{Kind: OpDelChain, Chain: oldChains[n]})
	}
	for _, n := range sortedKeys(oldSets) {
		if _, ok := newSets[n]; !ok {
			b.add(Op{Kind: OpDelSet, Set: oldSets[n]})
		}
	}
	return &PartialPlan{Batch: b, ports: ports, ipDelta: ipDelta, hpDelta: hpDelta}
}

func elemKey(e Element) string { return fmt.Sprintf("%s/%s/%d", e.Addr, e.Proto, e.Port) }

func sortElems(es []Element) {
	sort.Slice(es, func(i, j int) bool { return elemKey(es[i]) < elemKey(es[j]) })
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// countElements adds the elements whose count goes from 0 to positive and
// deletes those that drop to 0.
func countElements(b *Batch, prev, delta map[netip.Addr]int, setName func(v1.IPFamily) string, pair bool) {
	add := map[v1.IPFamily][]Element{}
	del := map[v1.IPFamily][]Element{}
	addrs := make([]netip.Addr, 0, len(delta))
	for a, d := range delta {
		if d != 0 {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	for _, a := range addrs {
		before := prev[a]
		after := before + delta[a]
		f := v1.IPv4Protocol
		if a.Is6() {
			f = v1.IPv6Protocol
		}
		e := Element{Addr: a}
		if pair {
			e.Addr2 = a
		}
		switch {
		case before <= 0 && after > 0:
			add[f] = append(add[f], e)
		case before > 0 && after <= 0:
			del[f] = append(del[f], e)
		}
	}
	kind := SetAddrs
	if pair {
		kind = SetAddrPairs
	}
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		s := Set{Name: setName(f), Family: f, Kind: kind}
		b.elements(OpDelElements, s, del[f])
		b.elements(OpAddElements, s, add[f])
	}
}
