package nft

import (
	"fmt"
	"strings"
)

// Op is one command of a batch, on one of crossproxy's tables. Each kind of
// command is a type of its own that carries what it needs: its table, and
// the set, chain, rule or elements it works on.
type Op interface {
	opTable() string
}

type (
	// addTableOp adds the table if it does not exist.
	addTableOp struct{ Table string }
	// delTableOp deletes the table and everything in it.
	delTableOp struct{ Table string }
	// flushTableOp deletes every rule of the table's chains.
	flushTableOp struct{ Table string }
	// addSetOp declares a set or map (again, when it has that type).
	addSetOp struct {
		Table string
		Set   Set
	}
	// delSetOp deletes a set no rule uses.
	delSetOp struct {
		Table string
		Set   Set
	}
	// addChainOp declares a chain (again: no change).
	addChainOp struct {
		Table string
		Chain *Chain
	}
	// flushChainOp deletes every rule of a chain.
	flushChainOp struct {
		Table string
		Chain *Chain
	}
	// delChainOp deletes a chain nothing jumps to, with its rules.
	delChainOp struct {
		Table string
		Chain *Chain
	}
	// addRuleOp appends a rule to a chain.
	addRuleOp struct {
		Table string
		Chain *Chain
		Rule  Rule
	}
	// addElementsOp adds elements to a set or map.
	addElementsOp struct {
		Table    string
		Set      Set
		Elements []element
	}
	// delElementsOp deletes elements of a set or map.
	delElementsOp struct {
		Table    string
		Set      Set
		Elements []element
	}
)

func (o addTableOp) opTable() string    { return o.Table }
func (o delTableOp) opTable() string    { return o.Table }
func (o flushTableOp) opTable() string  { return o.Table }
func (o addSetOp) opTable() string      { return o.Table }
func (o delSetOp) opTable() string      { return o.Table }
func (o addChainOp) opTable() string    { return o.Table }
func (o flushChainOp) opTable() string  { return o.Table }
func (o delChainOp) opTable() string    { return o.Table }
func (o addRuleOp) opTable() string     { return o.Table }
func (o addElementsOp) opTable() string { return o.Table }
func (o delElementsOp) opTable() string { return o.Table }

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
		t := "inet " + op.opTable()
		switch op := op.(type) {
		case addTableOp:
			fmt.Fprintf(&s, "add table %s\n", t)
		case delTableOp:
			fmt.Fprintf(&s, "delete table %s\n", t)
		case flushTableOp:
			fmt.Fprintf(&s, "flush table %s\n", t)
		case addSetOp:
			word := "set"
			if op.Set.Kind == SetFrontends || op.Set.Kind == SetEndpoints {
				word = "map"
			}
			size := ""
			if op.Set.Size > 0 {
				size = fmt.Sprintf(" size %d;", op.Set.Size)
			}
			fmt.Fprintf(&s, "add %s %s %s { %s;%s }\n", word, t, op.Set.Name, op.Set.nftDecl(), size)
		case delSetOp:
			fmt.Fprintf(&s, "delete set %s %s\n", t, op.Set.Name)
		case addChainOp:
			fmt.Fprintf(&s, "add chain %s %s\n", t, op.Chain.Name)
		case flushChainOp:
			fmt.Fprintf(&s, "flush chain %s %s\n", t, op.Chain.Name)
		case delChainOp:
			fmt.Fprintf(&s, "delete chain %s %s\n", t, op.Chain.Name)
		case addRuleOp:
			fmt.Fprintf(&s, "add rule %s %s %s\n", t, op.Chain.Name, op.Rule)
		case addElementsOp:
			es := make([]string, len(op.Elements))
			for i, e := range op.Elements {
				es[i] = e.nft(op.Set.Kind)
			}
			fmt.Fprintf(&s, "add element %s %s { %s }\n", t, op.Set.Name, strings.Join(es, ", "))
		case delElementsOp:
			es := make([]string, len(op.Elements))
			for i, e := range op.Elements {
				switch op.Set.Kind {
				case SetFrontends:
					es[i] = fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port)
				case SetEndpoints:
					es[i] = fmt.Sprintf("%s . %s . %d . 0x%08x", e.Addr, protoName(e.Proto), e.Port, e.Slot)
				default:
					es[i] = e.nft(op.Set.Kind)
				}
			}
			fmt.Fprintf(&s, "delete element %s %s { %s }\n", t, op.Set.Name, strings.Join(es, ", "))
		}
	}
	return s.String()
}

// maxElementsPerOp keeps one element message under the 64 KiB netlink
// attribute limit.
const maxElementsPerOp = 200

func addElements(b opSink, del bool, table string, s Set, es []element) {
	for len(es) > 0 {
		n := min(len(es), maxElementsPerOp)
		if del {
			b.add(delElementsOp{Table: table, Set: s, Elements: es[:n]})
		} else {
			b.add(addElementsOp{Table: table, Set: s, Elements: es[:n]})
		}
		es = es[n:]
	}
}

// opSink takes a plan's commands in order: a batch collects them, a
// batchWriter encodes them as they come.
type opSink interface{ add(Op) }
