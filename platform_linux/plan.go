package nft

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// opKind is one kind of netlink command in a batch.
type opKind int

const (
	OpAddTable opKind = iota
	OpDelTable
	OpFlushTable
	OpAddSet
	OpDelSet
	OpAddChain
	OpFlushChain
	OpDelChain
	OpAddRule
	OpAddElements
	OpDelElements
)

// Op is one command of a batch, on Table. Set is used by set and element
// ops, Chain by chain ops, Rule (with Chain.Name) by OpAddRule.
type Op struct {
	Kind     opKind
	Table    string
	Set      Set
	Chain    *Chain
	Rule     Rule
	Elements []element
}

// batch is an ordered list of commands the kernel applies atomically. It is
// plain data, so planning is tested without a kernel; Text shows it as nft
// commands.
type batch struct {
	Ops []Op
}

func (b *batch) add(op Op) { b.Ops = append(b.Ops, op) }

// Len is the number of commands.
func (b *batch) Len() int { return len(b.Ops) }

// Text prints the batch as the equivalent nft commands, one per line.
func (b *batch) Text() string {
	var s strings.Builder
	for _, op := range b.Ops {
		t := "inet " + op.Table
		switch op.Kind {
		case OpAddTable:
			fmt.Fprintf(&s, "add table %s\n", t)
		case OpDelTable:
			fmt.Fprintf(&s, "delete table %s\n", t)
		case OpFlushTable:
			fmt.Fprintf(&s, "flush table %s\n", t)
		case OpAddSet:
			word := "set"
			if op.Set.Kind == SetFrontends || op.Set.Kind == SetEndpoints {
				word = "map"
			}
			fmt.Fprintf(&s, "add %s %s %s { %s; }\n", word, t, op.Set.Name, op.Set.nftDecl())
		case OpDelSet:
			fmt.Fprintf(&s, "delete set %s %s\n", t, op.Set.Name)
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
				if op.Kind == OpDelElements && op.Set.Kind == SetEndpoints {
					es[i] = fmt.Sprintf("%s . %s . %d . 0x%08x", e.Addr, protoName(e.Proto), e.Port, e.Slot)
				}
			}
			fmt.Fprintf(&s, "%s element %s %s { %s }\n", verb, t, op.Set.Name, strings.Join(es, ", "))
		}
	}
	return s.String()
}

// applied is what the backend last programmed successfully: the input of the
// next partial sync's diff. Counts track how many ports use each shared
// cluster-ips and hairpin element.
//
// Of each port it keeps only what the objects were built from: the core's
// ServicePort (shared with the NodeState, which the core never modifies once
// handed out, so unchanged ports cost nothing here) and the local detection.
// A partial sync builds the old objects of the ports it changes again
// (objects), which buildPort does identically; keeping the objects instead
// cost about 17 MiB at 10,000 Services x 10 endpoints, mostly one DNAT rule
// per endpoint.
type applied struct {
	Table   string
	Shards  int
	Globals *globals
	Ports   map[core.PortKey]appliedPort
	// cfg is the configuration the ports were built with (Shards set).
	cfg        Config
	clusterIPs useCounts
	hairpin    useCounts
}

// useCounts counts, per address, the ports whose objects use it. IPv4
// addresses are keyed by their 4 bytes, IPv6 ones by their 16, each with a
// 4-byte count: an IPv4 entry takes 8 bytes instead of netip.Addr's 24 and
// an int's 8, and at 10,000 Services x 10 endpoints the hairpin counts alone
// are 100,000 entries. The core's addresses have no zone and are never
// IPv4-mapped IPv6, so each address has one key.
type useCounts struct {
	v4 map[[4]byte]int32
	v6 map[[16]byte]int32
}

// newUseCounts sizes the IPv4 counts for n addresses.
func newUseCounts(n int) useCounts {
	return useCounts{v4: make(map[[4]byte]int32, n), v6: map[[16]byte]int32{}}
}

// get is the number of ports using a.
func (u useCounts) get(a netip.Addr) int {
	if a.Is4() {
		return int(u.v4[a.As4()])
	}
	return int(u.v6[a.As16()])
}

// add changes a's count by d, forgetting a when no port uses it.
func (u useCounts) add(a netip.Addr, d int) {
	if a.Is4() {
		addCount(u.v4, a.As4(), d)
	} else {
		addCount(u.v6, a.As16(), d)
	}
}

// len is the number of addresses counted.
func (u useCounts) len() int { return len(u.v4) + len(u.v6) }

func addCount[K comparable](m map[K]int32, k K, d int) {
	if n := m[k] + int32(d); n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// appliedPort is what one programmed port was built from.
type appliedPort struct {
	port *core.ServicePort
	det  *core.FamilyLocalDetect
	// slots are a shared-map port's slot orders (nil for other ports): the
	// one thing not derived from port, since a change keeps every slot it can.
	slots *portSlots
}

// newApplied records a fully programmed ruleset, built with cfg.
func newApplied(rs *ruleset, cfg Config) *applied {
	eps := 0
	for _, p := range rs.Ports {
		eps += len(p.Endpoints)
	}
	cfg.Shards = rs.Shards
	a := newAppliedSized(rs.Table, rs.Globals, cfg, len(rs.Ports), eps)
	for _, p := range rs.Ports {
		a.record(p)
	}
	return a
}

// newAppliedSized is an empty record for about ports ports and eps endpoint
// addresses, built with cfg (Shards set).
func newAppliedSized(table string, g *globals, cfg Config, ports, eps int) *applied {
	return &applied{Table: table, Shards: cfg.Shards, Globals: g, Ports: make(map[core.PortKey]appliedPort, ports), cfg: cfg,
		clusterIPs: newUseCounts(ports), hairpin: newUseCounts(eps)}
}

// record adds one programmed port.
func (a *applied) record(p *portObjects) {
	a.Ports[p.Key] = p.From
	a.count(p, 1)
}

// objects builds the programmed objects of port k again, nil when k is not
// programmed.
func (a *applied) objects(k core.PortKey) *portObjects {
	ap, ok := a.Ports[k]
	if !ok {
		return nil
	}
	return buildPort(ap.port, ap.det, a.cfg, ap.slots)
}

func (a *applied) count(p *portObjects, d int) {
	if p.ClusterIP.IsValid() {
		a.clusterIPs.add(p.ClusterIP, d)
	}
	for _, e := range p.Endpoints {
		a.hairpin.add(e, d)
	}
}

// maxElementsPerOp keeps one element message under the 64 KiB netlink
// attribute limit.
const maxElementsPerOp = 200

func addElements(b opSink, kind opKind, table string, s Set, es []element) {
	for len(es) > 0 {
		n := min(len(es), maxElementsPerOp)
		b.add(Op{Kind: kind, Table: table, Set: s, Elements: es[:n]})
		es = es[n:]
	}
}

// inventory is what the kernel holds in one of crossproxy's tables.
type inventory struct {
	Chains []string
	Sets   []string
}

// opSink takes a plan's commands in order: a batch collects them, a
// batchWriter encodes them as they come.
type opSink interface{ add(Op) }

// planFull writes the whole ruleset in one batch. names are the tables the
// ruleset has (the main table, then the shards) and tables yields their
// content in that order, one at a time, so that a full sync streamed into a
// batchWriter holds one shard's objects at once, not the ruleset. existing
// maps each of crossproxy's tables found in the kernel to its chains and
// sets; objects crossproxy no longer wants are deleted (whole tables when the
// number of shards went down), the rest are rewritten in place (affinity
// sets keep their entries). With recreate, every table is deleted and
// written anew, which also repairs objects someone changed behind
// crossproxy's back.
func planFull(names []string, tables iter.Seq[*tableContent], existing map[string]inventory, recreate bool, b opSink) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	for _, name := range sortedKeys(existing) {
		if !want[name] {
			b.add(Op{Kind: OpDelTable, Table: name})
		}
	}
	for t := range tables {
		planTable(b, t, existing[t.Name], recreate)
	}
}

// planRuleset is planFull of a whole built ruleset, collected in a batch.
func planRuleset(rs *ruleset, existing map[string]inventory, recreate bool) *batch {
	tables := rs.tables()
	nops := 0
	for _, t := range tables {
		for _, c := range t.Chains {
			nops += 2 + len(c.Rules)
		}
	}
	b := &batch{Ops: make([]Op, 0, nops+len(rs.Ports)/maxElementsPerOp+64*len(tables))}
	planFull(rs.tableNames(), slices.Values(tables), existing, recreate, b)
	return b
}

func planTable(b opSink, t *tableContent, inv inventory, recreate bool) {
	b.add(Op{Kind: OpAddTable, Table: t.Name})
	if recreate {
		b.add(Op{Kind: OpDelTable, Table: t.Name})
		b.add(Op{Kind: OpAddTable, Table: t.Name})
		inv = inventory{}
	} else {
		b.add(Op{Kind: OpFlushTable, Table: t.Name})
	}
	wantSet := make(map[string]bool, len(t.Sets))
	for _, s := range t.Sets {
		wantSet[s.Name] = true
	}
	have := map[string]bool{}
	for _, n := range inv.Sets {
		have[n] = true
	}
	// Old elements go first so stale chains lose their references. A set
	// that stays is deleted and added again rather than flushed: the flushed
	// rules stay bound to it until the commit, and the kernel checks every
	// element added to a map against every rule bound to it, so refilling a
	// flushed map pays for the old rules too. Affinity sets keep their
	// entries (the clients' endpoints) across a full sync.
	for _, s := range t.Sets {
		if have[s.Name] && s.Kind != SetAffinity {
			b.add(Op{Kind: OpDelSet, Table: t.Name, Set: Set{Name: s.Name}})
		}
	}
	for _, n := range inv.Sets {
		if !wantSet[n] {
			b.add(Op{Kind: OpDelSet, Table: t.Name, Set: Set{Name: n}})
		}
	}
	wantChain := make(map[string]bool, len(t.Chains))
	for _, c := range t.Chains {
		wantChain[c.Name] = true
	}
	for _, n := range inv.Chains {
		if !wantChain[n] {
			b.add(Op{Kind: OpDelChain, Table: t.Name, Chain: &Chain{Name: n}})
		}
	}
	for _, s := range t.Sets {
		if !have[s.Name] || s.Kind != SetAffinity {
			b.add(Op{Kind: OpAddSet, Table: t.Name, Set: s})
		}
	}
	for _, c := range t.Chains {
		b.add(Op{Kind: OpAddChain, Table: t.Name, Chain: c})
	}
	// Rules before elements, though the kernel checks each element added to
	// a map against every rule bound to it: binding a rule to a filled map
	// walks the map's elements instead, which costs more (on 6.18, 3.8 s
	// against 1.2 s for a 10k full sync; test/results/scale.md).
	for _, c := range t.Chains {
		for _, r := range c.Rules {
			b.add(Op{Kind: OpAddRule, Table: t.Name, Chain: c, Rule: r})
		}
	}
	for _, s := range t.Sets {
		addElements(b, OpAddElements, t.Name, s, t.Elements[s.Name])
	}
	if t.Shared != nil {
		planShared(b, t.Name, t.Shared)
	}
}

// planShared adds the shared-map elements as the ports yield them, a
// command per maxElementsPerOp elements of a set, so that only one command's
// worth of each set is held at a time.
func planShared(b opSink, table string, ports iter.Seq[[]sharedElem]) {
	pending := map[*Set][]element{}
	for ses := range ports {
		for _, se := range ses {
			es := pending[se.set]
			if es == nil {
				es = make([]element, 0, maxElementsPerOp)
			}
			es = append(es, se.e)
			if len(es) == maxElementsPerOp {
				b.add(Op{Kind: OpAddElements, Table: table, Set: *se.set, Elements: es})
				es = nil
			}
			pending[se.set] = es
		}
	}
	sets := make([]*Set, 0, len(pending))
	for s, es := range pending {
		if len(es) > 0 {
			sets = append(sets, s)
		}
	}
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, s := range sets {
		b.add(Op{Kind: OpAddElements, Table: table, Set: *s, Elements: pending[s]})
	}
}

// partialPlan is a partial sync's batch and what Commit records once the
// kernel accepted it.
type partialPlan struct {
	Batch   *batch
	ports   map[core.PortKey]*portObjects
	ipDelta map[netip.Addr]int
	hpDelta map[netip.Addr]int
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
	return &partialPlan{Batch: b, ports: ports, ipDelta: d.ipDelta, hpDelta: d.hpDelta}
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
			b.add(Op{Kind: OpAddSet, Table: d.newSets[n].table, Set: d.newSets[n].set})
		}
	}
	for _, n := range d.chainOrder {
		if _, ok := d.oldChains[n]; !ok {
			b.add(Op{Kind: OpAddChain, Table: d.newChains[n].table, Chain: d.newChains[n].chain})
		}
	}
	// 2. changed chains are flushed and refilled, new ones filled.
	for _, n := range d.chainOrder {
		c := d.newChains[n]
		if o, ok := d.oldChains[n]; ok {
			if rulesEqual(o.chain.Rules, c.chain.Rules) {
				continue
			}
			b.add(Op{Kind: OpFlushChain, Table: c.table, Chain: c.chain})
		}
		for _, r := range c.chain.Rules {
			b.add(Op{Kind: OpAddRule, Table: c.table, Chain: c.chain, Rule: r})
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
		addElements(b, OpDelElements, m.table, s, d.fe[m].del)
	}
	for _, m := range maps {
		s := Set{Name: frontendMap(m.fam), Family: m.fam, Kind: SetFrontends}
		sortElems(d.fe[m].add)
		addElements(b, OpAddElements, m.table, s, d.fe[m].add)
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
		addElements(b, OpDelElements, prev.Table, *s, d.shared[s].del)
	}
	for _, s := range sets {
		sortElems(d.shared[s].add)
		addElements(b, OpAddElements, prev.Table, *s, d.shared[s].add)
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
		b.add(Op{Kind: OpFlushChain, Table: d.oldChains[n].table, Chain: d.oldChains[n].chain})
	}
	for _, n := range dying {
		b.add(Op{Kind: OpDelChain, Table: d.oldChains[n].table, Chain: d.oldChains[n].chain})
	}
	for _, n := range sortedKeys(d.oldSets) {
		if _, ok := d.newSets[n]; !ok {
			b.add(Op{Kind: OpDelSet, Table: d.oldSets[n].table, Set: d.oldSets[n].set})
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
		addElements(b, OpDelElements, table, s, del[f])
		addElements(b, OpAddElements, table, s, add[f])
	}
}
