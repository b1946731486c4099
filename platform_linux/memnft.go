package nft

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
)

var _ kernel = (*memKernel)(nil)

// memKernel is an in-memory nftables for tests, the model of the kernel's
// behaviour for the objects crossproxy uses (inet tables, chains, rules,
// sets, maps and their elements). A batch is applied whole or not at all,
// with the kernel's refusals a sync relies on: a missing table, chain, set
// or element (ENOENT); a set declared again with another type, or an element
// added again with other data (EEXIST); a set a rule still uses, or a chain a
// rule or verdict-map element still jumps to (EBUSY); a key of the wrong type
// or family, a rule looking up a set of the wrong kind (EINVAL); a jump to a
// base chain (EOPNOTSUPP). Every commit, its own or a foreign one, advances
// the generation. Dump prints the state as sorted nft text.
//
// TestModelAgreesWithTheKernel holds the model to the kernel: the same
// batches, good and refused, against both.
type memKernel struct {
	gen    uint32
	tables map[string]*memTable
	// commits and commands count the batches applied and their commands.
	commits, commands int
}

type memTable struct {
	chains map[string]*memChain
	sets   map[string]*memSet
}

type memChain struct {
	hook  *hook
	rules []Rule
}

type memSet struct {
	decl  Set
	elems map[string]element
}

func newMemKernel() *memKernel { return &memKernel{gen: 1, tables: map[string]*memTable{}} }

func (m *memKernel) batch(int) kernelBatch { return &batch{} }

func (m *memKernel) commit(kb kernelBatch, describe func(i int) string) error {
	b, ok := kb.(*batch)
	if !ok {
		return fmt.Errorf("commit a %T to the in-memory nftables: not a batch of this kernel", kb)
	}
	return m.apply(b.Ops, describe)
}

// apply runs ops as one transaction: on a copy, which replaces the state
// only when every command was accepted.
func (m *memKernel) apply(ops []Op, describe func(i int) string) error {
	next := m.clone()
	for i, op := range ops {
		if errno := next.do(op); errno != 0 {
			return &batchError{Errors: []error{fmt.Errorf("%s: %w", describe(i), os.NewSyscallError("netlink", errno))}}
		}
	}
	m.tables = next.tables
	m.gen++
	m.commits++
	m.commands += len(ops)
	return nil
}

// foreign commits ops as another program would (nft, a firewall manager).
func (m *memKernel) foreign(ops ...Op) error {
	return m.apply(ops, func(i int) string { return describeOp(ops[i]) })
}

// flushRuleset is `nft flush ruleset`: every table gone, in one commit.
func (m *memKernel) flushRuleset() {
	m.tables = map[string]*memTable{}
	m.gen++
}

func (m *memKernel) generation() (uint32, error) { return m.gen, nil }

func (m *memKernel) inventory(main string) (map[string]inventory, error) {
	out := map[string]inventory{}
	for name, t := range m.tables {
		if !ownTable(main, name) {
			continue
		}
		inv := inventory{}
		for c := range t.chains {
			inv.Chains = append(inv.Chains, c)
		}
		for s := range t.sets {
			inv.Sets = append(inv.Sets, s)
		}
		sort.Strings(inv.Chains)
		sort.Strings(inv.Sets)
		out[name] = inv
	}
	return out, nil
}

// census counts chains and sets as the kernel's table use count does.
func (m *memKernel) census(main string) (map[string]tableCount, error) {
	out := map[string]tableCount{}
	for name, t := range m.tables {
		if ownTable(main, name) {
			out[name] = tableCount{Objects: uint32(len(t.chains) + len(t.sets))}
		}
	}
	return out, nil
}

func (m *memKernel) clone() *memKernel {
	out := &memKernel{tables: make(map[string]*memTable, len(m.tables))}
	for name, t := range m.tables {
		nt := &memTable{chains: make(map[string]*memChain, len(t.chains)), sets: make(map[string]*memSet, len(t.sets))}
		for n, c := range t.chains {
			nt.chains[n] = &memChain{hook: c.hook, rules: slices.Clone(c.rules)}
		}
		for n, s := range t.sets {
			ns := &memSet{decl: s.decl, elems: make(map[string]element, len(s.elems))}
			for k, e := range s.elems {
				ns.elems[k] = e
			}
			nt.sets[n] = ns
		}
		out.tables[name] = nt
	}
	return out
}

// do applies one command, or says why the kernel would refuse it.
func (m *memKernel) do(op Op) syscall.Errno {
	if op, ok := op.(addTableOp); ok {
		if m.tables[op.Table] == nil {
			m.tables[op.Table] = &memTable{chains: map[string]*memChain{}, sets: map[string]*memSet{}}
		}
		return 0
	}
	t := m.tables[op.opTable()]
	if t == nil {
		return syscall.ENOENT
	}
	switch op := op.(type) {
	case delTableOp:
		delete(m.tables, op.Table)
	case flushTableOp:
		for _, c := range t.chains {
			c.rules = nil
		}
	case addSetOp:
		if s := t.sets[op.Set.Name]; s != nil {
			if s.decl.Kind != op.Set.Kind || s.decl.Family != op.Set.Family || s.decl.Timeout != op.Set.Timeout {
				return syscall.EEXIST
			}
			return 0
		}
		t.sets[op.Set.Name] = &memSet{decl: op.Set, elems: map[string]element{}}
	case delSetOp:
		if t.sets[op.Set.Name] == nil {
			return syscall.ENOENT
		}
		if t.setInUse(op.Set.Name) {
			return syscall.EBUSY
		}
		delete(t.sets, op.Set.Name)
	case addChainOp:
		c := t.chains[op.Chain.Name]
		if c == nil {
			t.chains[op.Chain.Name] = &memChain{hook: op.Chain.Hook}
			return 0
		}
		// The kernel updates a chain added again, but a base chain's hook
		// cannot change, nor a regular chain become a base chain.
		switch {
		case op.Chain.Hook == nil:
		case c.hook == nil:
			return syscall.EEXIST
		case *c.hook != *op.Chain.Hook:
			return syscall.EOPNOTSUPP
		}
	case flushChainOp:
		c := t.chains[op.Chain.Name]
		if c == nil {
			return syscall.ENOENT
		}
		c.rules = nil
	case delChainOp:
		if t.chains[op.Chain.Name] == nil {
			return syscall.ENOENT
		}
		if t.chainInUse(op.Chain.Name) {
			return syscall.EBUSY
		}
		delete(t.chains, op.Chain.Name)
	case addRuleOp:
		c := t.chains[op.Chain.Name]
		if c == nil {
			return syscall.ENOENT
		}
		for _, s := range op.Rule {
			if errno := t.checkStmt(s); errno != 0 {
				return errno
			}
		}
		c.rules = append(c.rules, op.Rule)
	case addElementsOp:
		return t.addElements(op.Set.Name, op.Elements)
	case delElementsOp:
		return t.delElements(op.Set.Name, op.Elements)
	default:
		return syscall.EOPNOTSUPP
	}
	return 0
}

// setFor is the set elements es go to or come from, when it exists and
// every key has its type; else the kernel's refusal.
func (t *memTable) setFor(set string, es []element) (*memSet, syscall.Errno) {
	s := t.sets[set]
	if s == nil {
		return nil, syscall.ENOENT
	}
	for _, e := range es {
		if !keyFits(s.decl, e) {
			return nil, syscall.EINVAL
		}
	}
	return s, 0
}

// addElements adds elements to a set, or says why the kernel would refuse.
func (t *memTable) addElements(set string, es []element) syscall.Errno {
	s, errno := t.setFor(set, es)
	if errno != 0 {
		return errno
	}
	for _, e := range es {
		if s.decl.Kind == SetFrontends {
			c := t.chains[e.Chain]
			if c == nil {
				return syscall.ENOENT
			}
			if c.hook != nil {
				return syscall.EOPNOTSUPP
			}
		}
		k := memKey(s.decl.Kind, e)
		if old, ok := s.elems[k]; ok {
			// Added again: accepted when the data is the same, and the
			// element keeps what it had (its comment too).
			if old.Chain != e.Chain || old.To != e.To {
				return syscall.EEXIST
			}
			continue
		}
		// A set declared with a size holds no more (nft_add_set_elem:
		// ENFILE); elements deleted earlier in the batch are gone here.
		if s.decl.Size > 0 && len(s.elems) >= int(s.decl.Size) {
			return syscall.ENFILE
		}
		s.elems[k] = e
	}
	return 0
}

// delElements deletes elements of a set, or says why the kernel would refuse.
func (t *memTable) delElements(set string, es []element) syscall.Errno {
	s, errno := t.setFor(set, es)
	if errno != 0 {
		return errno
	}
	for _, e := range es {
		k := memKey(s.decl.Kind, e)
		if _, ok := s.elems[k]; !ok {
			return syscall.ENOENT
		}
		delete(s.elems, k)
	}
	return 0
}

// stmtRef is what a statement needs of the table: a set of some kind and
// family, or a chain to jump to.
type stmtRef struct {
	set    string
	kinds  []setKind
	family v1.IPFamily
	chain  string
}

func refOf(s stmt) stmtRef {
	switch s := s.(type) {
	case matchAddrSet:
		return stmtRef{set: s.Set, kinds: []setKind{SetAddrs, SetAffinity}, family: s.Family}
	case matchHairpin:
		return stmtRef{set: s.Set, kinds: []setKind{SetAddrPairs}, family: s.Family}
	case Dispatch:
		return stmtRef{set: s.Map, kinds: []setKind{SetFrontends}, family: s.Family}
	case matchFrontend:
		return stmtRef{set: s.Set, kinds: []setKind{SetKeys}, family: s.Family}
	case dnatPick:
		return stmtRef{set: s.Map, kinds: []setKind{SetEndpoints}, family: s.Family}
	case updateAffinity:
		return stmtRef{set: s.Set, kinds: []setKind{SetAffinity}, family: s.Family}
	case Verdict:
		if s.Kind == verdictJump || s.Kind == verdictGoto {
			return stmtRef{chain: s.Chain}
		}
	}
	return stmtRef{}
}

func (t *memTable) checkStmt(s stmt) syscall.Errno {
	r := refOf(s)
	if r.set != "" {
		set := t.sets[r.set]
		if set == nil {
			return syscall.ENOENT
		}
		if !slices.Contains(r.kinds, set.decl.Kind) || set.decl.Family != r.family {
			return syscall.EINVAL
		}
	}
	if r.chain != "" {
		c := t.chains[r.chain]
		if c == nil {
			return syscall.ENOENT
		}
		if c.hook != nil {
			return syscall.EOPNOTSUPP
		}
	}
	return 0
}

func (t *memTable) setInUse(name string) bool {
	for _, c := range t.chains {
		for _, r := range c.rules {
			for _, s := range r {
				if refOf(s).set == name {
					return true
				}
			}
		}
	}
	return false
}

func (t *memTable) chainInUse(name string) bool {
	for cn, c := range t.chains {
		if cn == name {
			continue // its own rules go with it
		}
		for _, r := range c.rules {
			for _, s := range r {
				if refOf(s).chain == name {
					return true
				}
			}
		}
	}
	for _, s := range t.sets {
		if s.decl.Kind != SetFrontends {
			continue
		}
		for _, e := range s.elems {
			if e.Chain == name {
				return true
			}
		}
	}
	return false
}

// keyFits reports whether an element's key has the set's type: addresses of
// its family.
func keyFits(s Set, e element) bool {
	fam := func(a netip.Addr) bool {
		if s.Family == v1.IPv6Protocol {
			return a.Is6() && !a.Is4In6()
		}
		return a.Is4()
	}
	if !fam(e.Addr) {
		return false
	}
	switch s.Kind {
	case SetAddrPairs:
		return fam(e.Addr2)
	case SetEndpoints:
		return fam(e.To.Addr())
	}
	return true
}

// memProto is the protocol as the key holds it: the encoder writes any
// protocol other than UDP and SCTP as TCP.
func memProto(p v1.Protocol) v1.Protocol {
	if p == v1.ProtocolUDP || p == v1.ProtocolSCTP {
		return p
	}
	return v1.ProtocolTCP
}

// memKey is an element's key as the set's type sees it.
func memKey(kind setKind, e element) string {
	switch kind {
	case SetFrontends, SetKeys:
		return fmt.Sprintf("%s/%s/%d", e.Addr, memProto(e.Proto), e.Port)
	case SetEndpoints:
		return fmt.Sprintf("%s/%s/%d/%d", e.Addr, memProto(e.Proto), e.Port, e.Slot)
	case SetAddrPairs:
		return e.Addr.String() + "/" + e.Addr2.String()
	}
	return e.Addr.String()
}

// Dump prints every table in nft syntax, tables, sets and chains sorted by
// name and each set's elements sorted, rules in their order: two states
// print the same exactly when they hold the same objects.
func (m *memKernel) Dump() string {
	var b strings.Builder
	for _, tn := range sortedKeys(m.tables) {
		t := m.tables[tn]
		fmt.Fprintf(&b, "table inet %s {\n", tn)
		for _, sn := range sortedKeys(t.sets) {
			s := t.sets[sn]
			word := "set"
			if s.decl.Kind == SetFrontends || s.decl.Kind == SetEndpoints {
				word = "map"
			}
			es := make([]string, 0, len(s.elems))
			for _, e := range s.elems {
				es = append(es, e.nft(s.decl.Kind))
			}
			sort.Strings(es)
			fmt.Fprintf(&b, "\t%s %s { %s;", word, sn, s.decl.nftDecl())
			if len(es) > 0 {
				fmt.Fprintf(&b, " elements = { %s };", strings.Join(es, ", "))
			}
			b.WriteString(" }\n")
		}
		for _, cn := range sortedKeys(t.chains) {
			c := t.chains[cn]
			fmt.Fprintf(&b, "\tchain %s {\n", cn)
			if h := c.hook; h != nil {
				fmt.Fprintf(&b, "\t\ttype %s hook %s priority %d;\n", h.Type, h.Hook, h.Priority)
			}
			for _, r := range c.rules {
				fmt.Fprintf(&b, "\t\t%s\n", r)
			}
			b.WriteString("\t}\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}
