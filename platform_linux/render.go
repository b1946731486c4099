package nft

import (
	"fmt"
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
}

// tables lists the main table and then every shard, with their content: the
// main table's shared sets hold every ClusterIP and every endpoint address
// (as a hairpin pair), each shard's frontend maps hold its ports' frontends.
func (rs *ruleset) tables() []*tableContent {
	main := &tableContent{Name: rs.Table, Chains: append([]*Chain(nil), rs.Globals.Chains...),
		Sets: append([]Set(nil), rs.Globals.Sets...), Elements: map[string][]element{}}
	shards := make([]*tableContent, rs.Shards)
	for i := range shards {
		shards[i] = &tableContent{Name: shardTable(rs.Table, i), Chains: append([]*Chain(nil), rs.Globals.ShardChains...),
			Sets: append([]Set(nil), rs.Globals.ShardSets...), Elements: map[string][]element{}}
	}
	// The shared sets (ClusterIPs, hairpin pairs) hold each address once. At
	// 100,000 endpoints these are the largest transient of a full sync, so
	// they are counted first and sized once.
	type shared struct {
		seen  map[netip.Addr]struct{}
		elems []element
	}
	var clusterIPs, hairpins [2]shared // by family: IPv4, IPv6
	fi := func(f v1.IPFamily) int {
		if f == v1.IPv6Protocol {
			return 1
		}
		return 0
	}
	var nIPs, nEPs [2]int
	for _, p := range rs.Ports {
		nIPs[fi(p.Key.Family)]++
		nEPs[fi(p.Key.Family)] += len(p.Endpoints)
	}
	for i := range clusterIPs {
		clusterIPs[i] = shared{seen: make(map[netip.Addr]struct{}, nIPs[i]), elems: make([]element, 0, nIPs[i])}
		hairpins[i] = shared{seen: make(map[netip.Addr]struct{}, nEPs[i]), elems: make([]element, 0, nEPs[i])}
	}
	add := func(s *shared, a netip.Addr, pair bool) {
		if !a.IsValid() {
			return
		}
		if _, dup := s.seen[a]; dup {
			return
		}
		s.seen[a] = struct{}{}
		e := element{Addr: a}
		if pair {
			e.Addr2 = a
		}
		s.elems = append(s.elems, e)
	}
	for _, p := range rs.Ports {
		f := p.Key.Family
		sh := shards[p.Shard]
		sh.Chains = append(sh.Chains, p.Chains...)
		sh.Sets = append(sh.Sets, p.AffinitySets...)
		sh.Elements[frontendMap(f)] = append(sh.Elements[frontendMap(f)], p.Frontends...)
		add(&clusterIPs[fi(f)], p.ClusterIP, false)
		for _, a := range p.Endpoints {
			add(&hairpins[fi(f)], a, true)
		}
	}
	for i, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		if len(clusterIPs[i].elems) > 0 {
			main.Elements[clusterIPSet(f)] = clusterIPs[i].elems
		}
		if len(hairpins[i].elems) > 0 {
			main.Elements[hairpinSet(f)] = hairpins[i].elems
		}
	}
	return append([]*tableContent{main}, shards...)
}

func (s Set) nftType() string {
	a := "ipv4_addr"
	if s.Family == v1.IPv6Protocol {
		a = "ipv6_addr"
	}
	switch s.Kind {
	case SetFrontends:
		return a + " . inet_proto . inet_service : verdict"
	case SetAddrPairs:
		return a + " . " + a
	}
	return a
}

func (e element) nft(kind setKind) string {
	switch kind {
	case SetFrontends:
		s := fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port)
		if e.Comment != "" {
			s += fmt.Sprintf(" comment %q", e.Comment)
		}
		return s + " : goto " + e.Chain
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
	fmt.Fprintf(b, "table inet %s {\n", t.Name)
	sets := append([]Set(nil), t.Sets...)
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, s := range sets {
		word := "set"
		if s.Kind == SetFrontends {
			word = "map"
		}
		fmt.Fprintf(b, "\t%s %s {\n\t\ttype %s\n", word, s.Name, s.nftType())
		if s.Kind == SetAffinity {
			fmt.Fprintf(b, "\t\tflags dynamic,timeout\n\t\ttimeout %ds\n", int64(s.Timeout.Seconds()))
		}
		if es := t.Elements[s.Name]; len(es) > 0 {
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
