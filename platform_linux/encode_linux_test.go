package nft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The reference encoder: google/nftables' own calls, captured through its
// test hook (in tests only), against which the batch encoder is checked.

// captureMessages lets google/nftables encode a batch without sending it:
// its Flush asks for an ACK and an echo of every message and reads them one by
// one, which for 100,000 rules overflows the socket and takes seconds. The
// captured messages go out through batchConn.send instead.
func captureMessages(build func(*nftables.Conn) error) ([]netlink.Message, error) {
	var captured []netlink.Message
	c, err := nftables.New(nftables.WithTestDial(func(req []netlink.Message) ([]netlink.Message, error) {
		if req != nil {
			captured = append(captured, req...)
		}
		return nil, nil
	}))
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	if err := build(c); err != nil {
		return nil, err
	}
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	return captured, nil
}

func elementKey(kind setKind, e element) []byte {
	switch kind {
	case SetFrontends, SetKeys:
		k := append([]byte(nil), e.Addr.AsSlice()...)
		k = append(k, l4proto(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
		return k
	case SetEndpoints:
		k := append([]byte(nil), e.Addr.AsSlice()...)
		k = append(k, l4proto(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
		return binary.NativeEndian.AppendUint32(k, e.Slot)
	case SetAddrPairs:
		return append(e.Addr.AsSlice(), e.Addr2.AsSlice()...)
	}
	return e.Addr.AsSlice()
}

func nftElements(kind setKind, es []element, withData bool) []nftables.SetElement {
	out := make([]nftables.SetElement, len(es))
	for i, e := range es {
		out[i] = nftables.SetElement{Key: elementKey(kind, e)}
		if withData && kind == SetFrontends {
			out[i].VerdictData = &expr.Verdict{Kind: expr.VerdictGoto, Chain: e.Chain}
			out[i].Comment = e.Comment
		}
		if withData && kind == SetKeys {
			out[i].Comment = e.Comment
		}
		if withData && kind == SetEndpoints {
			out[i].Val = append(e.To.Addr().AsSlice(), byte(e.To.Port()>>8), byte(e.To.Port()), 0, 0)
		}
	}
	return out
}

// encodeBatch turns the planned commands into google/nftables calls.
func encodeBatch(c *nftables.Conn, batch *batch) error {
	setID := uint32(0)
	tables := map[string]*nftables.Table{}
	for _, op := range batch.Ops {
		t := tables[op.opTable()]
		if t == nil {
			t = tableObj(op.opTable())
			tables[op.opTable()] = t
		}
		switch op := op.(type) {
		case addTableOp:
			c.AddTable(t)
		case delTableOp:
			c.DelTable(t)
		case flushTableOp:
			c.FlushTable(t)
		case addSetOp:
			s := nftSet(t, op.Set)
			setID++
			s.ID = setID
			if err := c.AddSet(s, nil); err != nil {
				return fmt.Errorf("encode set %s: %w", op.Set.Name, err)
			}
		case delSetOp:
			c.DelSet(&nftables.Set{Table: t, Name: op.Set.Name})
		case addChainOp:
			ch := &nftables.Chain{Table: t, Name: op.Chain.Name}
			if h := op.Chain.Hook; h != nil {
				ch.Type = nftables.ChainType(h.Type)
				ch.Hooknum = hooks[h.Hook]
				ch.Priority = nftables.ChainPriorityRef(nftables.ChainPriority(h.Priority))
			}
			c.AddChain(ch)
		case flushChainOp:
			c.FlushChain(&nftables.Chain{Table: t, Name: op.Chain.Name})
		case delChainOp:
			c.DelChain(&nftables.Chain{Table: t, Name: op.Chain.Name})
		case addRuleOp:
			exprs, err := ruleExprs(op.Rule)
			if err != nil {
				return fmt.Errorf("encode rule of chain %s: %w", op.Chain.Name, err)
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: &nftables.Chain{Table: t, Name: op.Chain.Name}, Exprs: exprs})
		case addElementsOp:
			if err := c.SetAddElements(nftSet(t, op.Set), nftElements(op.Set.Kind, op.Elements, true)); err != nil {
				return fmt.Errorf("encode elements of set %s: %w", op.Set.Name, err)
			}
		case delElementsOp:
			if err := c.SetDeleteElements(nftSet(t, op.Set), nftElements(op.Set.Kind, op.Elements, false)); err != nil {
				return fmt.Errorf("encode elements of set %s: %w", op.Set.Name, err)
			}
		default:
			return fmt.Errorf("encode: no library form for %T", op)
		}
	}
	return nil
}

// TestOpEncodingMatchesLibrary encodes every kind of command crossproxy sends
// (tables, each set kind and family, base and regular chains, rules, flushes,
// deletions, element additions with verdicts and comments, element
// deletions) and compares each message with what google/nftables writes for
// the same command: type, flags (without the per-message ACK and echo the
// library asks for) and payload, byte for byte. It also checks the framing:
// consecutive sequence numbers from the first, and an ACK asked only by the
// last command.
func TestOpEncodingMatchesLibrary(t *testing.T) {
	rs := build(testState(t), Config{Table: "crossproxy", LocalhostNodePorts: true})
	existing := map[string]inventory{
		"crossproxy":   {Chains: []string{"old-chain"}, Sets: []string{"old-set", "cluster-ips-v4"}},
		"crossproxy-0": {Sets: []string{"frontends-v4"}},
		"crossproxy-7": {},
	}
	batch := planRuleset(rs, existing, false)
	batch.Ops = append(batch.Ops, planRuleset(rs, nil, true).Ops...)
	var affinity, anyChain *Chain
	for _, p := range rs.Ports {
		for _, c := range p.Chains {
			anyChain = c
		}
		if len(p.AffinitySets) > 0 {
			affinity = p.Chains[0]
		}
		shard := shardTable("crossproxy", p.Shard)
		batch.add(delElementsOp{Table: shard, Set: Set{Name: frontendMap(p.Key.Family), Family: p.Key.Family, Kind: SetFrontends}, Elements: p.Frontends})
	}
	if affinity == nil {
		t.Fatal("test state has no affinity set")
	}
	batch.add(flushChainOp{Table: "crossproxy-0", Chain: anyChain})
	kinds := map[string]int{}
	for _, op := range batch.Ops {
		kinds[fmt.Sprintf("%T", op)]++
	}
	for _, k := range []Op{addTableOp{}, delTableOp{}, flushTableOp{}, addSetOp{}, delSetOp{}, addChainOp{}, flushChainOp{},
		delChainOp{}, addRuleOp{}, addElementsOp{}, delElementsOp{}} {
		if kinds[fmt.Sprintf("%T", k)] == 0 {
			t.Fatalf("the test batch lacks command kind %T", k)
		}
	}

	got, err := newRuleEncoder().encode(batch)
	if err != nil {
		t.Fatal(err)
	}
	got.number(100)
	chunks, _ := got.all()
	msgs, err := syscall.ParseNetlinkMessage(bytes.Join(chunks, nil))
	if err != nil {
		t.Fatal(err)
	}
	want, err := captureMessages(func(c *nftables.Conn) error { return encodeBatch(c, batch) })
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != len(want) || len(msgs) != len(batch.Ops)+2 {
		t.Fatalf("%d messages, the library wrote %d, for %d commands", len(msgs), len(want), len(batch.Ops))
	}
	for i, m := range msgs {
		w := want[i]
		what := "batch begin/end"
		if i > 0 && i <= len(batch.Ops) {
			what = describeOp(batch.Ops[i-1])
		}
		if m.Header.Seq != uint32(100+i) {
			t.Errorf("message %d (%s): seq %d, want %d", i, what, m.Header.Seq, 100+i)
		}
		ack := m.Header.Flags&unix.NLM_F_ACK != 0
		if ack != (i == len(batch.Ops)) {
			t.Errorf("message %d (%s): ack %v; only the last command asks for one", i, what, ack)
		}
		flags := m.Header.Flags &^ (unix.NLM_F_ACK | unix.NLM_F_ECHO)
		wflags := uint16(w.Header.Flags) &^ (unix.NLM_F_ACK | unix.NLM_F_ECHO)
		if m.Header.Type != uint16(w.Header.Type) || flags != wflags {
			t.Errorf("message %d (%s): type %#x flags %#x, library %#x %#x", i, what, m.Header.Type, flags, uint16(w.Header.Type), wflags)
		}
		data := m.Data
		if !bytes.Equal(data, w.Data) {
			t.Errorf("message %d (%s): payload differs from the library's\n got %x\nwant %x", i, what, m.Data, w.Data)
		}
	}
}

// TestBatchChunksStayFewForHugeBatches: however large a batch grows, its
// chunks stay well below the 1,024 buffers one sendmsg accepts (the sizes a
// batchBuf would close its chunks at, up to 4 GiB: about 10 times a
// 100k-Service full sync).
func TestBatchChunksStayFewForHugeBatches(t *testing.T) {
	written, chunks := 0, 0
	for written < 4<<30 {
		written += chunkLimit(written)
		chunks++
	}
	if chunks > 512 {
		t.Fatalf("%d chunks for %d MiB", chunks, written>>20)
	}
}

// TestStreamedBatchIsTheEncodedPlan checks that the batch a full sync streams
// (built, planned and encoded shard by shard) is byte for byte the encoding
// of the planned ruleset, over several chunks.
func TestStreamedBatchIsTheEncodedPlan(t *testing.T) {
	st := scaleStateN(5000, 10)
	want, err := newRuleEncoder().encode(planRuleset(build(st, Config{}), nil, false))
	if err != nil {
		t.Fatal(err)
	}
	fb := newFullBuild(st, Config{})
	w := newRuleEncoder().writer(fb.commands())
	planFull(fb.names(), fb.tables(func(*portObjects) {}), nil, false, w)
	got, err := w.finish()
	if err != nil {
		t.Fatal(err)
	}
	want.number(7)
	got.number(7)
	wc, wsize := want.all()
	gc, gsize := got.all()
	if len(wc) < 3 {
		t.Fatalf("the test batch is %d bytes in %d chunks; it needs several", wsize, len(wc))
	}
	if gsize != wsize || !bytes.Equal(bytes.Join(gc, nil), bytes.Join(wc, nil)) || got.ack != want.ack || got.messages() != want.messages() {
		t.Fatalf("streamed batch: %d bytes, %d messages, ack %d; planned: %d bytes, %d messages, ack %d",
			gsize, got.messages(), got.ack, wsize, want.messages(), want.ack)
	}
}
