package nft

import (
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// tableContent is everything one table of the ruleset holds.
type tableContent struct {
	Name     string
	Chains   []*Chain
	Sets     []Set
	Elements map[string][]element
	// Shared yields the shared-map ports' elements, port by port (main
	// table only): a full sync encodes them as they come instead of
	// holding a million of them at once.
	Shared iter.Seq[[]sharedElem]
	// Counts are the number of elements each set of the main table will
	// hold, Shared included (nil in the shards): what sizedSets sizes the
	// sets by.
	Counts map[string]int
}

// tables lists the main table and then every shard, with their content: the
// main table's shared sets hold every ClusterIP and every endpoint address
// (as a hairpin pair), each shard's frontend maps hold its ports' frontends.
func (rs *ruleset) tables() []*tableContent {
	main := mainContent(rs.Table, rs.Globals)
	shards := make([]*tableContent, rs.Shards)
	for i := range shards {
		shards[i] = shardContent(rs.Table, i, rs.Globals)
	}
	var n sharedCounts
	for _, p := range rs.Ports {
		n.add(p.Key.Family, len(p.Endpoints))
	}
	shared := newSharedAddrs(n)
	var mapped []*portObjects
	for _, p := range rs.Ports {
		if p.Shard < 0 {
			mapped = append(mapped, p)
		} else {
			shards[p.Shard].addPort(p)
		}
		shared.add(p.Key.Family, p.ClusterIP, p.Endpoints)
	}
	shared.fill(main)
	main.Counts = elementCounts(main)
	for _, p := range mapped {
		for _, se := range p.Shared {
			main.Counts[se.set.Name]++
		}
	}
	main.Shared = func(yield func([]sharedElem) bool) {
		for _, p := range mapped {
			if !yield(p.Shared) {
				return
			}
		}
	}
	return append([]*tableContent{main}, shards...)
}

// tableNames names the main table and then every shard.
func (rs *ruleset) tableNames() []string { return tableNames(rs.Table, rs.Shards) }

func tableNames(table string, shards int) []string {
	names := make([]string, 0, shards+1)
	names = append(names, table)
	for i := range shards {
		names = append(names, shardTable(table, i))
	}
	return names
}

// mainContent is the main table without its shared sets' elements.
func mainContent(table string, g *globals) *tableContent {
	return &tableContent{Name: table, Chains: append([]*Chain(nil), g.Chains...),
		Sets: append([]Set(nil), g.Sets...), Elements: map[string][]element{}}
}

// shardContent is shard i without any port's objects.
func shardContent(table string, i int, g *globals) *tableContent {
	return &tableContent{Name: shardTable(table, i), Chains: append([]*Chain(nil), g.ShardChains...),
		Sets: append([]Set(nil), g.ShardSets...), Elements: map[string][]element{}}
}

// addPort puts a port's chains, affinity sets and frontends into its shard.
func (t *tableContent) addPort(p *portObjects) {
	f := frontendMap(p.Key.Family)
	t.Chains = append(t.Chains, p.Chains...)
	t.Sets = append(t.Sets, p.AffinitySets...)
	t.Elements[f] = append(t.Elements[f], p.Frontends...)
}

// familyIndex numbers the families for the per-family arrays: IPv4 0, IPv6 1.
func familyIndex(f v1.IPFamily) int {
	if f == v1.IPv6Protocol {
		return 1
	}
	return 0
}

// sharedCounts counts, per family, the ClusterIPs and endpoint addresses the
// shared sets may hold, to size them once.
type sharedCounts struct{ ips, eps [2]int }

func (n *sharedCounts) add(f v1.IPFamily, endpoints int) {
	n.ips[familyIndex(f)]++
	n.eps[familyIndex(f)] += endpoints
}

// sharedAddrs gathers the main table's shared sets (ClusterIPs, hairpin
// pairs), each address once, in the order the ports add them. At 100,000
// endpoints these are the largest transient of a full sync, so they are sized
// once and the addresses seen are kept as 4 (or 16) bytes.
type sharedAddrs struct {
	clusterIPs, hairpins [2]sharedSet
}

type sharedSet struct {
	seen  useCounts
	elems []element
}

func newSharedAddrs(n sharedCounts) *sharedAddrs {
	s := &sharedAddrs{}
	for i := range 2 {
		s.clusterIPs[i] = sharedSet{seen: newUseCounts(n.ips[i]), elems: make([]element, 0, n.ips[i])}
		s.hairpins[i] = sharedSet{seen: newUseCounts(n.eps[i]), elems: make([]element, 0, n.eps[i])}
	}
	return s
}

func (s *sharedSet) add(a netip.Addr, pair bool) {
	if !a.IsValid() || s.seen.get(a) > 0 {
		return
	}
	s.seen.add(a, 1)
	e := element{Addr: a}
	if pair {
		e.Addr2 = a
	}
	s.elems = append(s.elems, e)
}

// add records one port's ClusterIP (invalid: none) and endpoint addresses.
func (s *sharedAddrs) add(f v1.IPFamily, clusterIP netip.Addr, endpoints []netip.Addr) {
	i := familyIndex(f)
	s.clusterIPs[i].add(clusterIP, false)
	for _, a := range endpoints {
		s.hairpins[i].add(a, true)
	}
}

// fill puts the shared sets' elements into the main table.
func (s *sharedAddrs) fill(main *tableContent) {
	for i, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if len(s.clusterIPs[i].elems) > 0 {
			main.Elements[clusterIPSet(f)] = s.clusterIPs[i].elems
		}
		if len(s.hairpins[i].elems) > 0 {
			main.Elements[hairpinSet(f)] = s.hairpins[i].elems
		}
	}
}

func (s Set) nftType() string {
	a := "ipv4_addr"
	if s.Family == v1.IPv6Protocol {
		a = "ipv6_addr"
	}
	switch s.Kind {
	case SetFrontends:
		return a + " . inet_proto . inet_service : verdict"
	case SetKeys:
		return a + " . inet_proto . inet_service"
	case SetEndpoints:
		return a + " . inet_proto . inet_service . mark : " + a + " . inet_service"
	case SetAddrPairs:
		return a + " . " + a
	}
	return a
}

// nftDecl is the set's type declaration.
func (s Set) nftDecl() string { return "type " + s.nftType() }

func (e element) nft(kind setKind) string {
	switch kind {
	case SetFrontends:
		s := fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port)
		if e.Comment != "" {
			s += fmt.Sprintf(" comment %q", e.Comment)
		}
		return s + " : goto " + e.Chain
	case SetKeys:
		s := fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port)
		if e.Comment != "" {
			s += fmt.Sprintf(" comment %q", e.Comment)
		}
		return s
	case SetEndpoints:
		return fmt.Sprintf("%s . %s . %d . 0x%08x : %s . %d", e.Addr, protoName(e.Proto), e.Port, e.Slot, e.To.Addr(), e.To.Port())
	case SetAddrPairs:
		return fmt.Sprintf("%s . %s", e.Addr, e.Addr2)
	}
	return e.Addr.String()
}

// Text prints the ruleset in nft syntax, in a stable order: what
// `crossproxy render --platform linux` shows and `nft -f` accepts.
func (rs *ruleset) Text() string {
	var b strings.Builder
	for _, s := range rs.Skipped {
		fmt.Fprintf(&b, "# not programmed: %s: %s\n", s.Key, s.Reason)
	}
	for i, t := range rs.tables() {
		if i > 0 {
			b.WriteString("\n")
		}
		t.text(&b)
	}
	return b.String()
}

func (t *tableContent) text(b *strings.Builder) {
	elements := t.Elements
	if t.Shared != nil {
		elements = maps.Clone(t.Elements)
		for ses := range t.Shared {
			for _, se := range ses {
				elements[se.set.Name] = append(elements[se.set.Name], se.e)
			}
		}
	}
	fmt.Fprintf(b, "table inet %s {\n", t.Name)
	sets := append([]Set(nil), t.Sets...)
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	sizes := sizedSets(t)
	for _, s := range sets {
		word := "set"
		if s.Kind == SetFrontends {
			word = "map"
		}
		if s.Kind == SetEndpoints {
			word = "map"
		}
		fmt.Fprintf(b, "\t%s %s {\n\t\t%s\n", word, s.Name, s.nftDecl())
		if s.Kind == SetAffinity {
			fmt.Fprintf(b, "\t\tflags dynamic,timeout\n\t\ttimeout %ds\n", int64(s.Timeout.Seconds()))
		}
		if n := sizes[s.Name]; n > 0 {
			fmt.Fprintf(b, "\t\tsize %d\n", n)
		}
		if es := elements[s.Name]; len(es) > 0 {
			lines := make([]string, len(es))
			for i, e := range es {
				lines[i] = e.nft(s.Kind)
			}
			sort.Strings(lines)
			fmt.Fprintf(b, "\t\telements = {\n\t\t\t%s,\n\t\t}\n", strings.Join(lines, ",\n\t\t\t"))
		}
		b.WriteString("\t}\n\n")
	}
	chains := append([]*Chain(nil), t.Chains...)
	sort.SliceStable(chains, func(i, j int) bool {
		if (chains[i].Hook != nil) != (chains[j].Hook != nil) {
			return chains[i].Hook != nil
		}
		return chains[i].Name < chains[j].Name
	})
	for i, c := range chains {
		fmt.Fprintf(b, "\tchain %s {\n", c.Name)
		if c.Hook != nil {
			fmt.Fprintf(b, "\t\ttype %s hook %s priority %d; policy accept;\n", c.Hook.Type, c.Hook.Hook, c.Hook.Priority)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
		if i < len(chains)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString("}\n")
}
