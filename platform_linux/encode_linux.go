package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
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
	natKey := DNAT{Family: d.Family}
	nat, ok := e.cache[natKey]
	if !ok {
		data, err := expr.Marshal(unix.NFPROTO_INET, &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nfproto(d.Family)),
			RegAddrMin: reg1, RegProtoMin: reg2, Specified: true})
		if err != nil {
			return nil, fmt.Errorf("encode dnat: %w", err)
		}
		nat = appendAttr(nil, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, data)
		e.cache[natKey] = nat
	}
	b := make([]byte, 0, 2*48+len(nat))
	b = appendImmediate(b, reg1, d.To.Addr().AsSlice())
	b = appendImmediate(b, reg2, []byte{byte(d.To.Port() >> 8), byte(d.To.Port())})
	return append(b, nat...), nil
}

var immediateName = []byte("immediate\x00")

// appendImmediate appends an "immediate" expression loading data into reg.
func appendImmediate(b []byte, reg uint32, data []byte) []byte {
	var r [4]byte
	binary.BigEndian.PutUint32(r[:], reg)
	value := appendAttr(nil, unix.NFTA_DATA_VALUE, data)
	body := appendAttr(nil, unix.NFTA_IMMEDIATE_DREG, r[:])
	body = appendAttr(body, unix.NLA_F_NESTED|unix.NFTA_IMMEDIATE_DATA, value)
	elem := appendAttr(nil, unix.NFTA_EXPR_NAME, immediateName)
	elem = appendAttr(elem, unix.NLA_F_NESTED|unix.NFTA_EXPR_DATA, body)
	return appendAttr(b, unix.NLA_F_NESTED|unix.NFTA_LIST_ELEM, elem)
}

// rule encodes one NEWRULE (append) message.
func (e *ruleEncoder) rule(table, chain string, r Rule) (netlink.Message, error) {
	var body []byte
	for _, s := range r {
		b, err := e.stmt(s)
		if err != nil {
			return netlink.Message{}, fmt.Errorf("rule %q of chain %s: %w", r, chain, err)
		}
		body = append(body, b...)
	}
	data := make([]byte, 0, 4+8+len(table)+len(chain)+8+len(body)+8)
	data = append(data, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0)
	data = appendAttr(data, unix.NFTA_RULE_TABLE, append([]byte(table), 0))
	data = appendAttr(data, unix.NFTA_RULE_CHAIN, append([]byte(chain), 0))
	data = appendAttr(data, unix.NLA_F_NESTED|unix.NFTA_RULE_EXPRESSIONS, body)
	return netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_NEWRULE),
			Flags: netlink.Request | netlink.Create | unix.NLM_F_APPEND,
		},
		Data: data,
	}, nil
}

// encode turns a batch into netlink messages (batch begin and end included):
// rules through the ruleEncoder, everything else through google/nftables.
func (e *ruleEncoder) encode(batch *Batch) ([]netlink.Message, error) {
	var other []Op
	for _, op := range batch.Ops {
		if op.Kind != OpAddRule {
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
		if op.Kind != OpAddRule {
			msgs = append(msgs, captured[next])
			next++
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
