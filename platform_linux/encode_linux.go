package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// ruleEncoder writes NEWRULE messages itself, reusing the encoded form of
// statements it has seen (most statements repeat across Services), with the
// expressions encoded by google/nftables' expr.Marshal. Going through
// nftables.Conn.AddRule for 100,000 rules spends most of a full sync copying
// nested attributes.
type ruleEncoder struct {
	cache map[stmt][]byte
}

func newRuleEncoder() *ruleEncoder { return &ruleEncoder{cache: map[stmt][]byte{}} }

const maxCachedStmts = 1 << 16

func appendAttr(b []byte, typ uint16, payload []byte) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:2], uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(h[2:4], typ)
	b = append(b, h[:]...)
	b = append(b, payload...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// cacheable reports whether a statement is likely to repeat: endpoint
// addresses and per-endpoint sets are not.
func cacheable(s stmt) bool {
	switch s := s.(type) {
	case DNAT, updateAffinity:
		return false
	case matchAddrSet:
		return !s.Source
	}
	return true
}

// stmt returns the statement's expressions as a run of NFTA_LIST_ELEM
// attributes (DNAT is appended in place by appendRule instead).
func (e *ruleEncoder) stmt(s stmt) ([]byte, error) {
	if b, ok := e.cache[s]; ok {
		return b, nil
	}
	exprs, err := ruleExprs(Rule{s})
	if err != nil {
		return nil, err
	}
	var b []byte
	for _, x := range exprs {
		data, err := expr.Marshal(unix.NFPROTO_INET, x)
		if err != nil {
			return nil, fmt.Errorf("encode %q: %w", s.nft(), err)
		}
		b = appendAttr(b, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, data)
	}
	if cacheable(s) {
		if len(e.cache) >= maxCachedStmts {
			e.cache = map[stmt][]byte{}
		}
		e.cache[s] = b
	}
	return b, nil
}

// appendDNAT appends the protocol match (ruleExprs says why), the two
// immediate loads, written by hand, and the encoded NAT expression, which is
// the same for every endpoint of a family.
func (e *ruleEncoder) appendDNAT(b []byte, d DNAT) ([]byte, error) {
	nat, err := e.natExpr(d.Family)
	if err != nil {
		return nil, err
	}
	l4, err := e.stmt(matchL4{d.Proto})
	if err != nil {
		return nil, err
	}
	b = append(b, l4...)
	addr := d.To.Addr().AsSlice()
	b = appendImmediate(b, reg1, addr)
	b = appendImmediate(b, reg2, []byte{byte(d.To.Port() >> 8), byte(d.To.Port())})
	return append(b, nat...), nil
}

func (e *ruleEncoder) natExpr(f v1.IPFamily) ([]byte, error) {
	key := DNAT{Family: f}
	if nat, ok := e.cache[key]; ok {
		return nat, nil
	}
	data, err := expr.Marshal(unix.NFPROTO_INET, &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nfproto(f)),
		RegAddrMin: reg1, RegProtoMin: reg2, Specified: true})
	if err != nil {
		return nil, fmt.Errorf("encode dnat: %w", err)
	}
	nat := appendAttr(nil, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, data)
	e.cache[key] = nat
	return nat, nil
}

var immediateName = []byte("immediate\x00")

func align4(n int) int { return (n + 3) &^ 3 }

// immediateLen is the encoded size of an immediate expression of n data bytes.
func immediateLen(n int) int {
	value := 4 + align4(n)                            // NFTA_DATA_VALUE
	body := 8 + 4 + value                             // NFTA_IMMEDIATE_DREG, NFTA_IMMEDIATE_DATA
	elem := 4 + align4(len(immediateName)) + 4 + body // NFTA_EXPR_NAME, NFTA_EXPR_DATA
	return 4 + elem                                   // NFTA_LIST_ELEM
}

func appendHdr(b []byte, length int, typ uint16) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:2], uint16(length))
	binary.NativeEndian.PutUint16(h[2:4], typ)
	return append(b, h[:]...)
}

func pad4(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendImmediate appends an "immediate" expression loading data into reg,
// written in place (one per endpoint and rule: the hot path of a full sync).
func appendImmediate(b []byte, reg uint32, data []byte) []byte {
	n := immediateLen(len(data))
	value := 4 + len(data)
	body := 8 + 4 + align4(value)
	b = appendHdr(b, n, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM)
	b = appendHdr(b, 4+len(immediateName), unix.NFTA_EXPR_NAME)
	b = pad4(append(b, immediateName...))
	b = appendHdr(b, 4+body, unix.NLA_F_NESTED|unix.NFTA_EXPR_DATA)
	b = appendHdr(b, 8, unix.NFTA_IMMEDIATE_DREG)
	b = binary.BigEndian.AppendUint32(b, reg)
	b = appendHdr(b, 4+align4(value), unix.NLA_F_NESTED|unix.NFTA_IMMEDIATE_DATA)
	b = appendHdr(b, value, unix.NFTA_DATA_VALUE)
	return pad4(append(b, data...))
}

// appendRule appends the payload of one NEWRULE (append) message: the
// statements are written straight into the batch, so a full sync holds its
// rules once, as the bytes the kernel reads.
func (e *ruleEncoder) appendRule(data []byte, table, chain string, r Rule) ([]byte, error) {
	data = append(data, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0)
	data = appendHdr(data, 4+len(table)+1, unix.NFTA_RULE_TABLE)
	data = pad4(append(append(data, table...), 0))
	data = appendHdr(data, 4+len(chain)+1, unix.NFTA_RULE_CHAIN)
	data = pad4(append(append(data, chain...), 0))
	at := len(data)
	data = appendHdr(data, 0, unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS)
	for _, s := range r {
		var err error
		if d, ok := s.(DNAT); ok {
			data, err = e.appendDNAT(data, d)
		} else {
			var b []byte
			b, err = e.stmt(s)
			data = append(data, b...)
		}
		if err != nil {
			return nil, fmt.Errorf("rule %q of chain %s: %w", r, chain, err)
		}
	}
	if len(data)-at > 0xffff {
		return nil, fmt.Errorf("rule %q of chain %s: %d bytes of expressions, over the netlink attribute limit", r, chain, len(data)-at)
	}
	binary.NativeEndian.PutUint16(data[at:at+2], uint16(len(data)-at))
	return data, nil
}

// appendChain appends the payload of NEWCHAIN for a regular (not base) chain.
func appendChain(data []byte, table, chain string) []byte {
	data = append(data, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0)
	data = appendHdr(data, 4+len(table)+1, unix.NFTA_CHAIN_TABLE)
	data = pad4(append(append(data, table...), 0))
	data = appendHdr(data, 4+len(chain)+1, unix.NFTA_CHAIN_NAME)
	return pad4(append(append(data, chain...), 0))
}

const (
	msgNewRule  = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE
	msgNewChain = unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN
)

// batchWriter encodes commands one by one as a planner hands them over (it
// is an opSink), so a full sync never holds its commands, only their bytes.
// The first error sticks: later commands are dropped and finish reports it.
type batchWriter struct {
	enc   *ruleEncoder
	out   *batchBuf
	setID uint32
	ops   int
	err   error
}

// writer starts a batch (its begin message); commands is the expected number
// of commands, which only sizes the first chunk.
func (e *ruleEncoder) writer(commands int) *batchWriter {
	w := &batchWriter{enc: e, out: newBatchBuf(commands)}
	w.mark(unix.NFNL_MSG_BATCH_BEGIN)
	return w
}

func (w *batchWriter) mark(typ uint16) {
	w.out.start(typ, unix.NLM_F_REQUEST)
	w.out.buf = append(w.out.buf, unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, unix.NFNL_SUBSYS_NFTABLES)
	w.out.end()
}

// add encodes one command.
func (w *batchWriter) add(op Op) {
	if w.err != nil {
		return
	}
	out := w.out
	rule, isRule := op.(addRuleOp)
	chain, isChain := op.(addChainOp)
	switch {
	case isRule:
		out.start(msgNewRule, unix.NLM_F_REQUEST|unix.NLM_F_CREATE|unix.NLM_F_APPEND)
		out.buf, w.err = w.enc.appendRule(out.buf, rule.Table, rule.Chain.Name, rule.Rule)
		if w.err != nil {
			return
		}
		out.end()
	case isChain && chain.Chain.Hook == nil:
		out.start(msgNewChain, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendChain(out.buf, chain.Table, chain.Chain.Name)
		out.end()
	default:
		if w.err = appendOp(out, op, &w.setID); w.err != nil {
			return
		}
	}
	w.ops++
}

// Len is the number of commands written.
func (w *batchWriter) Len() int { return w.ops }

// finish ends the batch: the last command asks for the ACK, then the batch
// end message. Sequence numbers are given when the batch is sent.
func (w *batchWriter) finish() (*batchBuf, error) {
	if w.err != nil {
		return nil, w.err
	}
	if w.ops > 0 {
		w.out.ackLast()
	}
	w.mark(unix.NFNL_MSG_BATCH_END)
	return w.out, nil
}

// encode writes a planned batch as netlink messages, batch begin and end
// included.
func (e *ruleEncoder) encode(batch *batch) (*batchBuf, error) {
	w := e.writer(len(batch.Ops))
	for _, op := range batch.Ops {
		w.add(op)
	}
	return w.finish()
}
