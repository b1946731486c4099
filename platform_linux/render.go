package nft

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// Chains lists every chain of the ruleset, table-wide ones first.
func (rs *Ruleset) Chains() []*Chain {
	chains := append([]*Chain(nil), rs.Globals.Chains...)
	for _, p := range rs.Ports {
		chains = append(chains, p.Chains...)
	}
	return chains
}

// Sets lists every set of the ruleset, table-wide ones first.
func (rs *Ruleset) Sets() []Set {
	sets := append([]Set(nil), rs.Globals.Sets...)
	for _, p := range rs.Ports {
		sets = append(sets, p.AffinitySets...)
	}
	return sets
}

// Elements computes the content of the table-wide sets: every frontend in its
// family's map, every ClusterIP, every endpoint address (as a hairpin pair).
func (rs *Ruleset) Elements() map[string][]Element {
	out := map[string][]Element{}
	seen := map[string]map[netip.Addr]bool{}
	add := func(set string, a netip.Addr, pair bool) {
		if seen[set] == nil {
			seen[set] = map[netip.Addr]bool{}
		}
		if !a.IsValid() || seen[set][a] {
			return
		}
		seen[set][a] = true
		e := Element{Addr: a}
		if pair {
			e.Addr2 = a
		}
		out[set] = append(out[set], e)
	}
	for _, p := range rs.Ports {
		f := p.Key.Family
		out[frontendMap(f)] = append(out[frontendMap(f)], p.Frontends...)
		add(clusterIPSet(f), p.ClusterIP, false)
		for _, a := range p.Endpoints {
			add(hairpinSet(f), a, true)
		}
	}
	return out
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

func (e Element) nft(kind SetKind) string {
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
func (rs *Ruleset) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", rs.Table)
	elems := rs.Elements()
	sets := rs.Sets()
	sort.SliceStable(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, s := range sets {
		word := "set"
		if s.Kind == SetFrontends {
			word = "map"
		}
		fmt.Fprintf(&b, "\t%s %s {\n\t\ttype %s\n", word, s.Name, s.nftType())
		if s.Kind == SetAffinity {
			fmt.Fprintf(&b, "\t\tflags dynamic,timeout\n\t\ttimeout %ds\n", int64(s.Timeout.Seconds()))
		}
		if es := elems[s.Name]; len(es) > 0 {
			lines := make([]string, len(es))
			for i, e := range es {
				lines[i] = e.nft(s.Kind)
			}
			sort.Strings(lines)
			fmt.Fprintf(&b, "\t\telements = {\n\t\t\t%s,\n\t\t}\n", strings.Join(lines, ",\n\t\t\t"))
		}
		b.WriteString("\t}\n\n")
	}
	chains := rs.Chains()
	sort.SliceStable(chains, func(i, j int) bool {
		if (chains[i].Hook != nil) != (chains[j].Hook != nil) {
			return chains[i].Hook != nil
		}
		return chains[i].Name < chains[j].Name
	})
	for i, c := range chains {
		fmt.Fprintf(&b, "\tchain %s {\n", c.Name)
		if c.Hook != nil {
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %d; policy accept;\n", c.Hook.Type, c.Hook.Hook, c.Hook.Priority)
		}
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r)
		}
		b.WriteString("\t}\n")
		if i < len(chains)-1 {
			b.WriteString("\n")
		}
	}
	b.WriteString("}\n")
	return b.String()
}
