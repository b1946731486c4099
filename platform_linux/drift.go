package nft

import (
	"fmt"
	"iter"
	"sort"
	"strings"
)

// tableCount is what a census keeps of one table: how many chains, sets and
// other objects it holds (the kernel's use count) and its flags (a dormant
// table is still there but filters nothing).
type tableCount struct {
	Objects uint32
	Flags   uint32
}

// censusAfter is the census of crossproxy's tables after batch, from the
// one before it: each chain or set the batch adds or deletes moves its
// table's count by one. ok is false for a batch that adds, deletes or
// flushes a table, whose census is read from the kernel instead. It holds
// for the batches of partial syncs, which add only chains and sets that do
// not exist and delete only ones that do.
func censusAfter(before map[string]tableCount, batch *batch) (after map[string]tableCount, ok bool) {
	after = make(map[string]tableCount, len(before))
	for name, c := range before {
		after[name] = c
	}
	for _, op := range batch.Ops {
		d := 0
		switch op.(type) {
		case addTableOp, delTableOp, flushTableOp:
			return nil, false
		case addChainOp, addSetOp:
			d = 1
		case delChainOp, delSetOp:
			d = -1
		default:
			continue
		}
		c, ok := after[op.opTable()]
		if !ok {
			return nil, false
		}
		c.Objects = uint32(int(c.Objects) + d)
		after[op.opTable()] = c
	}
	return after, true
}

// compareCensus names every difference between the tables crossproxy left
// after its last batch (was) and the ones in the kernel now, in table order.
// It cannot see a rule changed inside a chain (the counts stay the same);
// the notification watcher does.
func compareCensus(was, now map[string]tableCount) []string {
	names := sortedNames(was, now)
	var out []string
	for _, n := range names {
		w, had := was[n]
		c, has := now[n]
		switch {
		case !has:
			out = append(out, fmt.Sprintf("table inet %s deleted", n))
		case !had:
			out = append(out, fmt.Sprintf("table inet %s created", n))
		case w.Objects != c.Objects:
			out = append(out, fmt.Sprintf("table inet %s holds %d chains and sets, %d programmed", n, c.Objects, w.Objects))
		case w.Flags != c.Flags:
			out = append(out, fmt.Sprintf("table inet %s flags changed from %#x to %#x", n, w.Flags, c.Flags))
		}
	}
	return out
}

// sortedNames is the union of the keys of a and b, sorted.
func sortedNames[A, B any](a map[string]A, b map[string]B) []string {
	names := make([]string, 0, len(a)+len(b))
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// objectCount is how many chains and named sets a table holds.
type objectCount struct {
	Chains, Sets int
}

// countObjects passes tables on and records each one's chains and sets in
// counts as it goes: the full sync streams its tables, so they are counted
// on the way through.
func countObjects(tables iter.Seq[*tableContent], counts map[string]objectCount) iter.Seq[*tableContent] {
	return func(yield func(*tableContent) bool) {
		for t := range tables {
			counts[t.Name] = objectCount{Chains: len(t.Chains), Sets: len(t.Sets)}
			if !yield(t) {
				return
			}
		}
	}
}

// namedSets counts the sets of a listing that are not anonymous (the kernel
// names those __set%d and deletes them with their rule).
func namedSets(names []string) int {
	n := 0
	for _, s := range names {
		if !strings.HasPrefix(s, "__set") {
			n++
		}
	}
	return n
}

// compareWritten names every table whose chains or sets differ from what a
// full sync wrote.
func compareWritten(written, found map[string]objectCount) []string {
	var out []string
	for _, n := range sortedNames(written, found) {
		w, wrote := written[n]
		f, has := found[n]
		switch {
		case !has:
			out = append(out, fmt.Sprintf("table inet %s deleted", n))
		case !wrote:
			out = append(out, fmt.Sprintf("table inet %s created", n))
		case w != f:
			out = append(out, fmt.Sprintf("table inet %s holds %d chains and %d sets, %d and %d written", n, f.Chains, f.Sets, w.Chains, w.Sets))
		}
	}
	return out
}
