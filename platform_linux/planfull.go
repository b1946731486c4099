package nft

import (
	"iter"
	"slices"
	"sort"
)

// inventory is what the kernel holds in one of crossproxy's tables.
type inventory struct {
	Chains []string
	Sets   []string
}

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
			b.add(delTableOp{Table: name})
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
	b.add(addTableOp{Table: t.Name})
	if recreate {
		b.add(delTableOp{Table: t.Name})
		b.add(addTableOp{Table: t.Name})
		inv = inventory{}
	} else {
		b.add(flushTableOp{Table: t.Name})
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
			b.add(delSetOp{Table: t.Name, Set: Set{Name: s.Name}})
		}
	}
	for _, n := range inv.Sets {
		if !wantSet[n] {
			b.add(delSetOp{Table: t.Name, Set: Set{Name: n}})
		}
	}
	wantChain := make(map[string]bool, len(t.Chains))
	for _, c := range t.Chains {
		wantChain[c.Name] = true
	}
	for _, n := range inv.Chains {
		if !wantChain[n] {
			b.add(delChainOp{Table: t.Name, Chain: &Chain{Name: n}})
		}
	}
	sizes := sizedSets(t)
	for _, s := range t.Sets {
		if !have[s.Name] || s.Kind != SetAffinity {
			s.Size = sizes[s.Name]
			b.add(addSetOp{Table: t.Name, Set: s})
		}
	}
	for _, c := range t.Chains {
		b.add(addChainOp{Table: t.Name, Chain: c})
	}
	// Rules before elements, though the kernel checks each element added to
	// a map against every rule bound to it: binding a rule to a filled map
	// walks the map's elements instead, which costs more (on 6.18, 3.8 s
	// against 1.2 s for a 10k full sync; test/results/scale.md).
	for _, c := range t.Chains {
		for _, r := range c.Rules {
			b.add(addRuleOp{Table: t.Name, Chain: c, Rule: r})
		}
	}
	for _, s := range t.Sets {
		addElements(b, false, t.Name, s, t.Elements[s.Name])
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
				b.add(addElementsOp{Table: table, Set: *se.set, Elements: es})
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
		b.add(addElementsOp{Table: table, Set: *s, Elements: pending[s]})
	}
}
