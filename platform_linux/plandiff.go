package nft

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// partialPlan is a partial sync's batch and what Commit records once the
// kernel accepted it.
type partialPlan struct {
	Batch   *batch
	ports   map[core.PortKey]*portObjects
	ipDelta map[netip.Addr]int
	hpDelta map[netip.Addr]int
	// elems is how many elements the batch adds to each main-table set;
	// Overflow names a set it would fill beyond its declared size (the
	// batch must not be sent then: a full sync sizes the sets anew).
	elems    map[string]int
	Overflow string
	// globals, sized and gone are what reclass changes of the layout:
	// the new globals, the endpoint maps it declares (with their sizes)
	// and the sets it deletes.
	globals *globals
	sized   map[string]uint32
	gone    []string
}

// classUse is the class use after the plan (a: the Applied state it was
// planned from).
func (p *partialPlan) classUse(a *applied) classUse { return classUseOf(a.elems, p.elems) }

// reclass adds to the batch the objects of the classes that come into use
// (was -> now) before its elements go in, and deletes those of the classes
// left unused after theirs are gone; each changed pick chain is flushed and
// filled again with a rule per class in use. g is the layout with now's
// classes.
func (p *partialPlan) reclass(a *applied, g *globals, was, now classUse) {
	chains := make(map[string]*Chain, len(g.Chains))
	for _, c := range g.Chains {
		chains[c.Name] = c
	}
	t := a.Table
	fill := func(ops []Op, c *Chain) []Op {
		for _, r := range c.Rules {
			ops = append(ops, addRuleOp{Table: t, Chain: c, Rule: r})
		}
		return ops
	}
	var pre, post []Op
	p.sized = map[string]uint32{}
	for fi, s := range sharedByFamily {
		for _, path := range []pickPath{pathMain, pathCluster} {
			if was[fi][path] == now[fi][path] {
				continue
			}
			for c := 0; c <= pickClassBits; c++ {
				switch {
				case now.has(fi, path, c) && !was.has(fi, path, c):
					m := s.endpoints[path][c]
					m.Size = setSize(a.elems[m.Name] + p.elems[m.Name])
					p.sized[m.Name] = m.Size
					ch := chains[s.pickClass[path][c]]
					pre = append(pre, addSetOp{Table: t, Set: s.classes[path][c]}, addSetOp{Table: t, Set: m}, addChainOp{Table: t, Chain: ch})
					pre = fill(pre, ch)
				case was.has(fi, path, c) && !now.has(fi, path, c):
					ch := &Chain{Name: s.pickClass[path][c]}
					post = append(post, flushChainOp{Table: t, Chain: ch}, delChainOp{Table: t, Chain: ch},
						delSetOp{Table: t, Set: s.endpoints[path][c]}, delSetOp{Table: t, Set: s.classes[path][c]})
					p.gone = append(p.gone, s.endpoints[path][c].Name, s.classes[path][c].Name)
				}
			}
			pick := chains[s.pick[path]]
			pre = fill(append(pre, flushChainOp{Table: t, Chain: pick}), pick)
		}
	}
	p.Batch.Ops = append(append(pre, p.Batch.Ops...), post...)
	p.globals = g
}

// commit records the plan in a (the Applied state it was planned from), after
// the kernel accepted the batch. It costs O(changes), not O(Services).
func (p *partialPlan) commit(a *applied) {
	for k, v := range p.ports {
		if v == nil {
			delete(a.Ports, k)
		} else {
			a.Ports[k] = v.From
		}
	}
	commitCounts(a.clusterIPs, p.ipDelta)
	commitCounts(a.hairpin, p.hpDelta)
	for n, d := range p.elems {
		if a.elems != nil {
			a.elems[n] += d
		}
	}
	if p.globals != nil {
		a.Globals = p.globals
	}
	for n, size := range p.sized {
		a.sizes[n] = size
	}
	for _, n := range p.gone {
		delete(a.sizes, n)
		delete(a.elems, n)
	}
}

func commitCounts(m useCounts, delta map[netip.Addr]int) {
	for addr, d := range delta {
		m.add(addr, d)
	}
}

// planPartial rewrites only the given ports: chains that changed are flushed
// and refilled, new ones added, gone ones deleted; map elements and shared set
// elements are added and deleted one by one. ports maps each changed key to its
// new objects (built with prev.Shards), or to nil when the port is gone. prev
// is not modified; the caller commits the plan into it once the kernel took
// the batch.
func planPartial(prev *applied, ports map[core.PortKey]*portObjects) *partialPlan {
	d := diffPorts(prev, ports)
	b := &batch{}
	d.emit(b, prev)
	elems := elementDeltas(b, prev.Table)
	return &partialPlan{Batch: b, ports: ports, ipDelta: d.ipDelta, hpDelta: d.hpDelta, elems: elems, Overflow: prev.overflow(elems)}
}

// located is a chain or set with the shard table it lives in. Chains and sets
// are named uniquely per port, so a name identifies them.
type located struct {
	table string
	chain *Chain
	set   Set
}

// mapKey names one frontend verdict map: a shard table's map of one family.
type mapKey struct {
	table string
	fam   v1.IPFamily
}

// mapElems are the frontend elements to delete from and add to one map.
type mapElems struct{ add, del []element }

// portsDiff is what changes between the applied ports and their new objects:
// chains and sets before and after, frontend elements per map, and how the
// use counts of the shared sets move.
type portsDiff struct {
	oldChains, newChains map[string]located
	oldSets, newSets     map[string]located
	fe                   map[mapKey]*mapElems
	shared               map[*Set]*mapElems // shared-map elements of the main table
	ipDelta, hpDelta     map[netip.Addr]int
	chainOrder           []string // new chains in port order, for a stable batch
}

// diffPorts compares the changed ports (nil: the port is gone) with what
// prev has applied for them.
func diffPorts(prev *applied, ports map[core.PortKey]*portObjects) *portsDiff {
	keys := make([]core.PortKey, 0, len(ports))
	for k := range ports {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, core.PortKey.Compare)
	d := &portsDiff{
		oldChains: map[string]located{}, newChains: map[string]located{},
		oldSets: map[string]located{}, newSets: map[string]located{},
		fe: map[mapKey]*mapElems{}, shared: map[*Set]*mapElems{},
		ipDelta: map[netip.Addr]int{}, hpDelta: map[netip.Addr]int{},
	}
	for _, k := range keys {
		old, nu := prev.objects(k), ports[k]
		d.diffShared(old, nu)
		oldFE := map[string]element{}
		var oldMap mapKey
		if old != nil {
			t := shardTable(prev.Table, old.Shard)
			oldMap = mapKey{t, k.Family}
			for _, c := range old.Chains {
				d.oldChains[c.Name] = located{table: t, chain: c}
			}
			for _, s := range old.AffinitySets {
				d.oldSets[s.Name] = located{table: t, set: s}
			}
			for _, e := range old.Frontends {
				oldFE[elemKey(e)] = e
			}
			if old.ClusterIP.IsValid() {
				d.ipDelta[old.ClusterIP]--
			}
			for _, a := range old.Endpoints {
				d.hpDelta[a]--
			}
		}
		if nu != nil {
			t := shardTable(prev.Table, nu.Shard)
			m := mapKey{t, k.Family}
			for _, c := range nu.Chains {
				d.newChains[c.Name] = located{table: t, chain: c}
				d.chainOrder = append(d.chainOrder, c.Name)
			}
			for _, s := range nu.AffinitySets {
				d.newSets[s.Name] = located{table: t, set: s}
			}
			for _, e := range nu.Frontends {
				o, ok := oldFE[elemKey(e)]
				if ok && o == e && oldMap == m {
					delete(oldFE, elemKey(e))
					continue
				}
				d.elems(m).add = append(d.elems(m).add, e)
			}
			if nu.ClusterIP.IsValid() {
				d.ipDelta[nu.ClusterIP]++
			}
			for _, a := range nu.Endpoints {
				d.hpDelta[a]++
			}
		}
		if len(oldFE) > 0 {
			elems := d.elems(oldMap)
			for _, e := range oldFE {
				elems.del = append(elems.del, e)
			}
		}
	}
	return d
}

// elems returns map m's element changes, making them on first use.
func (d *portsDiff) elems(m mapKey) *mapElems {
	if d.fe[m] == nil {
		d.fe[m] = &mapElems{}
	}
	return d.fe[m]
}

// emit writes the diff into b in the order the kernel needs: what is
// referred to exists before what refers to it, and goes after it.
func (d *portsDiff) emit(b *batch, prev *applied) {
	// 1. new sets and chains exist before anything refers to them.
	for _, n := range sortedKeys(d.newSets) {
		if _, ok := d.oldSets[n]; !ok {
			b.add(addSetOp{Table: d.newSets[n].table, Set: d.newSets[n].set})
		}
	}
	for _, n := range d.chainOrder {
		if _, ok := d.oldChains[n]; !ok {
			b.add(addChainOp{Table: d.newChains[n].table, Chain: d.newChains[n].chain})
		}
	}
	// 2. changed chains are flushed and refilled, new ones filled.
	for _, n := range d.chainOrder {
		c := d.newChains[n]
		if o, ok := d.oldChains[n]; ok {
			if rulesEqual(o.chain.Rules, c.chain.Rules) {
				continue
			}
			b.add(flushChainOp{Table: c.table, Chain: c.chain})
		}
		for _, r := range c.chain.Rules {
			b.add(addRuleOp{Table: c.table, Chain: c.chain, Rule: r})
		}
	}
	// 3. frontend map elements: deletions first, so a frontend that moved to
	// another chain is deleted and added again.
	maps := make([]mapKey, 0, len(d.fe))
	for m := range d.fe {
		maps = append(maps, m)
	}
	sort.Slice(maps, func(i, j int) bool {
		if maps[i].table != maps[j].table {
			return maps[i].table < maps[j].table
		}
		return maps[i].fam < maps[j].fam
	})
	for _, m := range maps {
		s := Set{Name: frontendMap(m.fam), Family: m.fam, Kind: SetFrontends}
		sortElems(d.fe[m].del)
		addElements(b, true, m.table, s, d.fe[m].del)
	}
	for _, m := range maps {
		s := Set{Name: frontendMap(m.fam), Family: m.fam, Kind: SetFrontends}
		sortElems(d.fe[m].add)
		addElements(b, false, m.table, s, d.fe[m].add)
	}
	// 3b. shared-map elements: deletions first, so an element whose data
	// changed (an endpoint moved into another slot) is deleted and added again.
	sets := make([]*Set, 0, len(d.shared))
	for s := range d.shared {
		sets = append(sets, s)
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, s := range sets {
		sortElems(d.shared[s].del)
		addElements(b, true, prev.Table, *s, d.shared[s].del)
	}
	for _, s := range sets {
		sortElems(d.shared[s].add)
		addElements(b, false, prev.Table, *s, d.shared[s].add)
	}
	// 4. shared sets: an element exists while at least one port uses it.
	countElements(b, prev.Table, prev.clusterIPs, d.ipDelta, clusterIPSet, false)
	countElements(b, prev.Table, prev.hairpin, d.hpDelta, hairpinSet, true)
	// 5. chains and sets no port uses any more.
	var dying []string
	for n := range d.oldChains {
		if _, ok := d.newChains[n]; !ok {
			dying = append(dying, n)
		}
	}
	sort.Strings(dying)
	for _, n := range dying {
		b.add(flushChainOp{Table: d.oldChains[n].table, Chain: d.oldChains[n].chain})
	}
	for _, n := range dying {
		b.add(delChainOp{Table: d.oldChains[n].table, Chain: d.oldChains[n].chain})
	}
	for _, n := range sortedKeys(d.oldSets) {
		if _, ok := d.newSets[n]; !ok {
			b.add(delSetOp{Table: d.oldSets[n].table, Set: d.oldSets[n].set})
		}
	}
}

func elemKey(e element) string { return fmt.Sprintf("%s/%s/%d/%d", e.Addr, e.Proto, e.Port, e.Slot) }

// sharedKey identifies a shared-map element: its set and key.
type sharedKey struct {
	set   *Set
	addr  netip.Addr
	proto v1.Protocol
	port  uint16
	slot  uint32
}

func keyOf(se sharedElem) sharedKey {
	return sharedKey{set: se.set, addr: se.e.Addr, proto: se.e.Proto, port: se.e.Port, slot: se.e.Slot}
}

// diffShared adds the shared-map elements that change between a port's old
// and new objects (either may be nil): an element whose key stays and whose
// data changes is deleted and added again.
func (d *portsDiff) diffShared(old, nu *portObjects) {
	var oldEl map[sharedKey]element
	if old != nil && len(old.Shared) > 0 {
		oldEl = make(map[sharedKey]element, len(old.Shared))
		for _, se := range old.Shared {
			oldEl[keyOf(se)] = se.e
		}
	}
	if nu != nil {
		for _, se := range nu.Shared {
			k := keyOf(se)
			if o, ok := oldEl[k]; ok {
				delete(oldEl, k)
				if o.To == se.e.To && o.Comment == se.e.Comment {
					continue
				}
				d.sharedElems(se.set).del = append(d.sharedElems(se.set).del, o)
			}
			d.sharedElems(se.set).add = append(d.sharedElems(se.set).add, se.e)
		}
	}
	for k, e := range oldEl {
		d.sharedElems(k.set).del = append(d.sharedElems(k.set).del, e)
	}
}

func (d *portsDiff) sharedElems(s *Set) *mapElems {
	if d.shared[s] == nil {
		d.shared[s] = &mapElems{}
	}
	return d.shared[s]
}

func sortElems(es []element) {
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
func countElements(b *batch, table string, prev useCounts, delta map[netip.Addr]int, setName func(v1.IPFamily) string, pair bool) {
	add := map[v1.IPFamily][]element{}
	del := map[v1.IPFamily][]element{}
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
		before := prev.get(a)
		after := before + delta[a]
		f := v1.IPv4Protocol
		if a.Is6() {
			f = v1.IPv6Protocol
		}
		e := element{Addr: a}
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
		addElements(b, true, table, s, del[f])
		addElements(b, false, table, s, add[f])
	}
}
