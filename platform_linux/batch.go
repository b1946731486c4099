package nft

import (
	"fmt"
	"strings"
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

// opSink takes a plan's commands in order: a batch collects them, a
// batchWriter encodes them as they come.
type opSink interface{ add(Op) }
