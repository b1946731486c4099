package nft

// Set sizes. A set declared without a size is a hash table that the kernel
// grows as elements arrive; growing it while one batch adds a million
// elements sends every insert through rhashtable's slow path (an insert while
// a rehash is pending), which was most of a 100k-Service full sync's kernel
// time (test/results/scale.md). Declared with a size, the kernel chooses a
// hash table of that size from the start, but also refuses (ENFILE) an
// element beyond it. So a full sync declares each endpoint map of the main
// table with room for half as many elements again as it holds
// (setSize), the backend counts the elements its partial syncs add and
// remove (applied.elems), and a partial sync that would outgrow a set is
// sent as a full sync instead, which declares the sets anew (overflow).

// minSetSize is the smallest size a set is declared with: a small cluster's
// sets grow by a few hundred elements before a full sync has to resize
// them. The kernel's table for it is 1,024 buckets (8 KiB).
const minSetSize = 512

// setSize is the size a set holding n elements is declared with.
func setSize(n int) uint32 { return uint32(max(minSetSize, n+n/2)) }

// sizable reports whether sets of kind k are declared with a size: the
// endpoint maps, which hold most elements (ten per frontend at ten
// endpoints). The frontend sets stay growing tables: sized too, they took
// a 100k full sync's kernel time from 1.7 to 1.3 s but doubled the
// first-packet latency (p50 38 -> 93 us; test/results/scale.md), which
// the endpoint maps alone do not change.
func sizable(k setKind) bool { return k == SetEndpoints }

// sizedSets maps each set of t declared with a size to that size; nil for a
// table without counts (a shard).
func sizedSets(t *tableContent) map[string]uint32 {
	if t.Counts == nil {
		return nil
	}
	out := make(map[string]uint32, len(t.Sets))
	for _, s := range t.Sets {
		if sizable(s.Kind) {
			out[s.Name] = setSize(t.Counts[s.Name])
		}
	}
	return out
}

// elementCounts counts the elements of t.Elements per set.
func elementCounts(t *tableContent) map[string]int {
	c := make(map[string]int, len(t.Sets))
	for n, es := range t.Elements {
		c[n] = len(es)
	}
	return c
}

// elementDeltas is how many elements b adds to (or, negative, removes from)
// each set of table.
func elementDeltas(b *batch, table string) map[string]int {
	d := map[string]int{}
	for _, op := range b.Ops {
		switch op := op.(type) {
		case addElementsOp:
			if op.Table == table {
				d[op.Set.Name] += len(op.Elements)
			}
		case delElementsOp:
			if op.Table == table {
				d[op.Set.Name] -= len(op.Elements)
			}
		}
	}
	return d
}
