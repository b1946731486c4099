package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"syscall"
	"testing"

	"github.com/google/nftables"
	v1 "k8s.io/api/core/v1"
)

// TestModelAgreesWithTheKernel keeps the in-memory nftables honest: the
// same batches go to the kernel (netlink, in a fresh network namespace) and
// to the model: the full ruleset of testState, then batches each of which
// ends in one command the kernel refuses, after commands it would accept.
// Both must accept or refuse each batch with the same errno, and hold the
// same tables, chains, sets, table use counts (the census CheckDrift
// compares) and element counts after every one (a refused batch changes
// neither).
func TestModelAgreesWithTheKernel(t *testing.T) {
	ns := testNS(t)
	kb := newTestBackend(t, ns)
	real := kb.k
	mem := newMemKernel()
	cfg := Config{}
	main := cfg.table()

	full := planRuleset(build(testState(t), cfg), map[string]inventory{}, false).Ops
	agree(t, "the full ruleset of testState", real, mem, ns, main, full, 0)

	// What the refusals are about, found in the model's copy of the rules.
	var endpoints, frontends, addrs *memSet
	var frontTable, jumped, jumpTable, base string
	for tn, tb := range mem.tables {
		for _, s := range tb.sets {
			switch {
			case s.decl.Kind == SetEndpoints && len(s.elems) > 1 && s.decl.Family == v1.IPv4Protocol:
				endpoints = s
			case s.decl.Kind == SetFrontends && len(s.elems) > 0:
				frontends, frontTable = s, tn
			case s.decl.Kind == SetAddrs && s.decl.Family == v1.IPv4Protocol:
				addrs = s
			}
		}
		for cn, c := range tb.chains {
			if c.hook != nil && tn == main {
				base = cn
			}
			for _, r := range c.rules {
				for _, st := range r {
					if v, ok := st.(Verdict); ok && v.Kind == verdictJump && jumped == "" {
						jumped, jumpTable = v.Chain, tn
					}
				}
			}
		}
	}
	if endpoints == nil || frontends == nil || addrs == nil || jumped == "" || base == "" {
		t.Fatalf("testState lacks an object the refusals need:\n%s", mem.Dump())
	}
	anyElem := func(s *memSet) element {
		for _, k := range sortedKeys(s.elems) {
			return s.elems[k]
		}
		return element{}
	}
	ep := anyElem(endpoints)
	other := ep
	other.To = netip.MustParseAddrPort("10.244.99.99:9999")
	missing := ep
	missing.Slot = 4000
	v6 := element{Addr: netip.MustParseAddr("fd00::1")}
	good := addElementsOp{Table: main, Set: addrs.decl, Elements: []element{{Addr: netip.MustParseAddr("10.96.200.1")}}}
	fr := anyElem(frontends)
	baseChain := mem.tables[main].chains[base]
	otherKind := endpoints.decl
	otherKind.Kind = SetAddrs
	if endpoints.decl.Size == 0 {
		t.Fatalf("map %s was declared without a size", endpoints.decl.Name)
	}
	var overfill []element // with the map's own elements, one more than it may hold
	for i := range int(endpoints.decl.Size) {
		e := ep
		e.Addr = netip.AddrFrom4([4]byte{10, 97, byte(i >> 8), byte(i)})
		overfill = append(overfill, e)
	}

	for _, c := range []struct {
		what string
		op   Op
		// older is what kernels before 6.18 answer instead, where the
		// answer changed; the model answers as 6.18 does.
		older syscall.Errno
	}{
		{"delete an element that is not there", delElementsOp{Table: main, Set: endpoints.decl, Elements: []element{missing}}, 0},
		{"add an element again with other data", addElementsOp{Table: main, Set: endpoints.decl, Elements: []element{other}}, 0},
		{"add an element again with the same data", addElementsOp{Table: main, Set: endpoints.decl, Elements: []element{ep}}, 0},
		{"delete a map a rule looks up", delSetOp{Table: main, Set: endpoints.decl}, 0},
		{"delete a chain a verdict-map element goes to", delChainOp{Table: frontTable, Chain: &Chain{Name: fr.Chain}}, 0},
		{"delete a chain a rule jumps to", delChainOp{Table: jumpTable, Chain: &Chain{Name: jumped}}, 0},
		{"add a rule that looks up a missing set", addRuleOp{Table: main, Chain: &Chain{Name: base}, Rule: Rule{matchAddrSet{Family: v1.IPv4Protocol, Set: "no-such-set"}, Verdict{Kind: verdictAccept}}}, 0},
		{"add a rule that jumps to a base chain", addRuleOp{Table: main, Chain: &Chain{Name: jumped}, Rule: Rule{Verdict{Kind: verdictJump, Chain: base}}}, 0},
		{"add an IPv6 address to an IPv4 set", addElementsOp{Table: main, Set: addrs.decl, Elements: []element{v6}}, 0},
		// 5.10 accepts the declaration (and refuses the first element of
		// the wrong type instead, platform_linux/README.md).
		{"declare a map again as another type", addSetOp{Table: main, Set: otherKind}, olderAccepts},
		{"add an element to a missing set", addElementsOp{Table: main, Set: Set{Name: "no-such-set", Family: v1.IPv4Protocol, Kind: SetAddrs}, Elements: []element{good.Elements[0]}}, 0},
		{"flush a missing chain", flushChainOp{Table: main, Chain: &Chain{Name: "no-such-chain"}}, 0},
		// 6.1 (the kernel guest) answers EEXIST here, 6.18 EOPNOTSUPP.
		{"add a base chain again with another hook", addChainOp{Table: main, Chain: &Chain{Name: base, Hook: &hook{Type: baseChain.hook.Type, Hook: "input", Priority: baseChain.hook.Priority}}}, syscall.EEXIST},
		{"make a regular chain a base chain", addChainOp{Table: jumpTable, Chain: &Chain{Name: jumped, Hook: baseChain.hook}}, 0},
		{"delete a missing table", delTableOp{Table: "no-such-table"}, 0},
		{"fill a map beyond its declared size", addElementsOp{Table: main, Set: endpoints.decl, Elements: overfill}, 0},
	} {
		if agree(t, c.what, real, mem, ns, main, []Op{good, c.op}, c.older) {
			// An older kernel took the batch the model refused: take the
			// good element out of the kernel alone.
			undo := real.batch(1)
			undo.add(delElementsOp{Table: main, Set: addrs.decl, Elements: good.Elements})
			if err := real.commit(undo, func(int) string { return "undo" }); err != nil {
				t.Fatal(err)
			}
		}
		// A batch both accepted (an element added again with the same
		// data) added the good element too: take it out of both.
		if _, ok := mem.tables[main].sets[addrs.decl.Name].elems[memKey(SetAddrs, good.Elements[0])]; ok {
			agree(t, "undo "+c.what, real, mem, ns, main, []Op{delElementsOp{Table: main, Set: addrs.decl, Elements: good.Elements}}, 0)
		}
	}
}

// olderAccepts, as the older answer of a case, says that kernels before
// 6.1 accept the batch the model refuses.
const olderAccepts = syscall.Errno(1 << 20)

// agree commits ops to both kernels and compares their verdicts and what
// they hold afterwards; older is an errno an older kernel may answer in
// place of the model's (0: none; olderAccepts: it accepts the batch). It
// reports whether the kernel accepted a batch the model refused (olderAccepts),
// and compares the contents only when it did not: the caller undoes it.
func agree(t *testing.T, what string, real kernel, mem *memKernel, ns, main string, ops []Op, older syscall.Errno) (accepted bool) {
	t.Helper()
	if len(ops) > 0 {
		commitTo := func(k kernel) error {
			b := k.batch(len(ops))
			for _, op := range ops {
				b.add(op)
			}
			return k.commit(b, func(i int) string { return describeOp(ops[i]) })
		}
		rerr, merr := commitTo(real), commitTo(mem)
		rno, rok := errnoOf(rerr)
		mno, mok := errnoOf(merr)
		switch {
		case rerr == nil && mok && older == olderAccepts && mno != 0:
			t.Logf("%s: this kernel accepts it, as kernels before 6.1 do; the model (6.18) %v", what, mno)
			return true
		case rok && mok && older != 0 && rno == older && mno != 0:
			t.Logf("%s: this kernel %v, as kernels before 6.18 answer; the model (6.18) %v", what, rno, mno)
		case rno != mno || rok != mok:
			t.Errorf("%s: kernel says %v, model says %v", what, rerr, merr)
		default:
			t.Logf("%s: both %v", what, rno)
		}
	}
	rinv, err := real.inventory(main)
	if err != nil {
		t.Fatal(err)
	}
	minv, _ := mem.inventory(main)
	for _, inv := range rinv {
		sort.Strings(inv.Chains)
		sort.Strings(inv.Sets)
	}
	if !reflect.DeepEqual(rinv, minv) {
		t.Errorf("%s: kernel holds %v, model %v", what, rinv, minv)
	}
	// The table's use count is what CheckDrift compares.
	rc, err := real.census(main)
	if err != nil {
		t.Fatal(err)
	}
	mc, _ := mem.census(main)
	if !reflect.DeepEqual(rc, mc) {
		t.Errorf("%s: census: kernel %v, model %v", what, rc, mc)
	}
	if got, want := kernelElementCounts(t, ns, main), memElementCounts(mem, main); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: element counts: kernel %v, model %v", what, got, want)
	}
	return false
}

// errnoOf is the errno a refused batch carries (0 when err is nil), and
// whether err was a refusal at all.
func errnoOf(err error) (syscall.Errno, bool) {
	if err == nil {
		return 0, true
	}
	var no syscall.Errno
	if errors.As(err, &no) {
		return no, true
	}
	return 0, false
}

func memElementCounts(m *memKernel, main string) map[string]int {
	out := map[string]int{}
	for tn, t := range m.tables {
		if !ownTable(main, tn) {
			continue
		}
		for sn, s := range t.sets {
			out[tn+"/"+sn] = len(s.elems)
		}
	}
	return out
}

func kernelElementCounts(t *testing.T, ns, main string) map[string]int {
	t.Helper()
	out := map[string]int{}
	b := newTestBackend(t, ns)
	defer b.Close()
	err := b.ns.withConn(func(c *nftables.Conn) error {
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, tb := range tables {
			if !ownTable(main, tb.Name) {
				continue
			}
			sets, err := c.GetSets(tb)
			if err != nil {
				return err
			}
			for _, s := range sets {
				es, err := c.GetSetElements(s)
				if err != nil {
					return fmt.Errorf("elements of %s: %w", s.Name, err)
				}
				// An interval set lists a range as two elements; crossproxy's
				// sets hold single keys only.
				out[tb.Name+"/"+s.Name] = len(es)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
