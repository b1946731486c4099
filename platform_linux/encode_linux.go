package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// ruleEncoder writes NEWRULE messages itself, reusing the encoded form of
// statements it has seen (most statements repeat across Services), with the
// expressions encoded by google/nftables' expr.Marshal. Going through
// nftables.Conn.AddRule for 100,000 rules spends most of a full sync copying
// nested attributes.
type ruleEncoder struct {
	cache map[Stmt][]byte
}

func newRuleEncoder() *ruleEncoder { return &ruleEncoder{cache: map[Stmt][]byte{}} }

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
func cacheable(s Stmt) bool {
	switch s := s.(type) {
	case DNAT, UpdateAffinity:
		return false
	case MatchAddrSet:
		return !s.Source
	}
	return true
}

// stmt returns the statement's expressions as a run of NFTA_LIST_ELEM attributes.
func (e *ruleEncoder) stmt(s Stmt) ([]byte, error) {
	if b, ok := e.cache[s]; ok {
		return b, nil
	}
	if d, ok := s.(DNAT); ok {
		return e.dnat(d)
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
			e.cache = map[Stmt][]byte{}
		}
		e.cache[s] = b
	}
	return b, nil
}

// dnat encodes the two immediate loads by hand and reuses the encoded NAT
// expression, which is the same for every endpoint of a family.
func (e *ruleEncoder) dnat(d DNAT) ([]byte, error) {
	nat, err := e.natExpr(d.Family)
	if err != nil {
		return nil, err
	}
	addr := d.To.Addr().AsSlice()
	b := make([]byte, 0, immediateLen(len(addr))+immediateLen(2)+len(nat))
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

// rule encodes one NEWRULE (append) message.
func (e *ruleEncoder) rule(table, chain string, r Rule) (netlink.Message, error) {
	var parts [8][]byte
	stmts := parts[:0]
	size := 0
	for _, s := range r {
		b, err := e.stmt(s)
		if err != nil {
			return netlink.Message{}, fmt.Errorf("rule %q of chain %s: %w", r, chain, err)
		}
		stmts = append(stmts, b)
		size += len(b)
	}
	data := make([]byte, 0, 4+2*4+align4(len(table)+1)+align4(len(chain)+1)+4+size)
	data = append(data, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0)
	data = appendHdr(data, 4+len(table)+1, unix.NFTA_RULE_TABLE)
	data = pad4(append(append(data, table...), 0))
	data = appendHdr(data, 4+len(chain)+1, unix.NFTA_RULE_CHAIN)
	data = pad4(append(append(data, chain...), 0))
	data = appendHdr(data, 4+size, unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS)
	for _, b := range stmts {
		data = append(data, b...)
	}
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE),
			Flags: netlink.Request | netlink.Create | unix.NLM_F_APPEND,
		},
		Data: data,
	}, nil
}

// chainMessage encodes NEWCHAIN for a regular (not base) chain.
func chainMessage(table, chain string) netlink.Message {
	data := make([]byte, 0, 4+8+align4(len(table)+1)+align4(len(chain)+1))
	data = append(data, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0)
	data = appendHdr(data, 4+len(table)+1, unix.NFTA_CHAIN_TABLE)
	data = pad4(append(append(data, table...), 0))
	data = appendHdr(data, 4+len(chain)+1, unix.NFTA_CHAIN_NAME)
	data = pad4(append(append(data, chain...), 0))
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWCHAIN),
			Flags: netlink.Request | netlink.Create,
		},
		Data: data,
	}
}

// encode turns a batch into netlink messages (batch begin and end included):
// rules through the ruleEncoder, everything else through google/nftables.
func (e *ruleEncoder) encode(batch *Batch) ([]netlink.Message, error) {
	// Rules and regular chains (nearly all of a full sync) are encoded here;
	// the rest goes through google/nftables.
	mine := func(op Op) bool { return op.Kind == OpAddRule || op.Kind == OpAddChain && op.Chain.Hook == nil }
	var other []Op
	for _, op := range batch.Ops {
		if !mine(op) {
			other = append(other, op)
		}
	}
	captured, err := captureMessages(func(c *nftables.Conn) error { return encodeBatch(c, &Batch{Ops: other}) })
	if err != nil {
		return nil, err
	}
	if len(captured) != len(other)+2 {
		return nil, fmt.Errorf("encode batch: %d commands gave %d messages", len(other), len(captured)-2)
	}
	msgs := make([]netlink.Message, 0, len(batch.Ops)+2)
	msgs = append(msgs, captured[0])
	next := 1
	for _, op := range batch.Ops {
		if !mine(op) {
			msgs = append(msgs, captured[next])
			next++
			continue
		}
		if op.Kind == OpAddChain {
			msgs = append(msgs, chainMessage(op.Table, op.Chain.Name))
			continue
		}
		m, err := e.rule(op.Table, op.Chain.Name, op.Rule)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return append(msgs, captured[len(captured)-1]), nil
}
