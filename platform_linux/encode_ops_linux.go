package nft

import (
	"encoding/binary"
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"
)

// The messages below are written byte for byte as google/nftables v0.3.0
// writes them (TestOpEncodingMatchesLibrary compares every kind), but straight
// into the batch: the library keeps each message as its own allocation until
// Flush, which then asks for an ACK and an echo of every message and reads
// them one by one: for 100,000 rules that overflows the socket and takes
// seconds (platform_linux/README.md, "Syncing"). The library's lasting
// connection and Flush are therefore not used for batches; its expression
// encoder (expr.Marshal) and data types are.

const nftMsg = unix.NFNL_SUBSYS_NFTABLES << 8

// nftGoto is NFT_GOTO (negative, written as its two's complement).
var nftGoto int32 = unix.NFT_GOTO

// appendElementKey appends a set element's key: address, or address .
// protocol . port (each field padded to 4 bytes), or address . address.
func appendElementKey(b []byte, kind setKind, e element) []byte {
	b = append(b, e.Addr.AsSlice()...)
	switch kind {
	case SetFrontends, SetKeys:
		b = append(b, l4proto(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
	case SetEndpoints:
		b = append(b, l4proto(e.Proto), 0, 0, 0, byte(e.Port>>8), byte(e.Port), 0, 0)
		b = binary.NativeEndian.AppendUint32(b, e.Slot) // numgen writes host order
	case SetAddrPairs:
		b = append(b, e.Addr2.AsSlice()...)
	}
	return b
}

func appendStrAttr(b []byte, typ uint16, s string) []byte {
	b = appendHdr(b, 4+len(s)+1, typ)
	return pad4(append(append(b, s...), 0))
}

func appendU32Attr(b []byte, typ uint16, v uint32) []byte {
	return binary.BigEndian.AppendUint32(appendHdr(b, 8, typ), v)
}

// nest starts a nested attribute; end it with endNest(b, at).
func nest(b []byte, typ uint16) ([]byte, int) {
	return appendHdr(b, 0, unix.NLA_F_NESTED|typ), len(b)
}

func endNest(b []byte, at int) []byte {
	binary.NativeEndian.PutUint16(b[at:at+2], uint16(len(b)-at))
	return b
}

// nfgen is the nfgenmsg header of every message: family inet, version 0.
func nfgen(b []byte) []byte { return append(b, unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0) }

// appendOp writes one command other than a rule or regular chain; setID
// numbers the sets the batch adds, as google/nftables does.
func appendOp(out *batchBuf, op Op, setID *uint32) error {
	switch op := op.(type) {
	case addTableOp:
		out.start(nftMsg|unix.NFT_MSG_NEWTABLE, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_TABLE_NAME, op.Table)
		out.buf = appendU32Attr(out.buf, unix.NFTA_TABLE_FLAGS, 0)
	case delTableOp:
		out.start(nftMsg|unix.NFT_MSG_DELTABLE, unix.NLM_F_REQUEST)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_TABLE_NAME, op.Table)
		out.buf = appendU32Attr(out.buf, unix.NFTA_TABLE_FLAGS, 0)
	case flushTableOp:
		out.start(nftMsg|unix.NFT_MSG_DELRULE, unix.NLM_F_REQUEST)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_RULE_TABLE, op.Table)
	case addSetOp:
		*setID++
		out.start(nftMsg|unix.NFT_MSG_NEWSET, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendSet(nfgen(out.buf), op.Table, op.Set, *setID)
	case delSetOp:
		out.start(nftMsg|unix.NFT_MSG_DELSET, unix.NLM_F_REQUEST)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_SET_TABLE, op.Table)
		out.buf = appendStrAttr(out.buf, unix.NFTA_SET_NAME, op.Set.Name)
	case addChainOp:
		out.start(nftMsg|unix.NFT_MSG_NEWCHAIN, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_CHAIN_TABLE, op.Table)
		out.buf = appendStrAttr(out.buf, unix.NFTA_CHAIN_NAME, op.Chain.Name)
		if h := op.Chain.Hook; h != nil {
			hook, ok := hooks[h.Hook]
			if !ok {
				return fmt.Errorf("encode chain %s: unknown hook %q", op.Chain.Name, h.Hook)
			}
			var at int
			out.buf, at = nest(out.buf, unix.NFTA_CHAIN_HOOK)
			out.buf = appendU32Attr(out.buf, unix.NFTA_HOOK_HOOKNUM, uint32(*hook))
			out.buf = appendU32Attr(out.buf, unix.NFTA_HOOK_PRIORITY, uint32(h.Priority))
			out.buf = endNest(out.buf, at)
			out.buf = appendStrAttr(out.buf, unix.NFTA_CHAIN_TYPE, h.Type)
		}
	case flushChainOp:
		out.start(nftMsg|unix.NFT_MSG_DELRULE, unix.NLM_F_REQUEST)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_RULE_TABLE, op.Table)
		out.buf = appendStrAttr(out.buf, unix.NFTA_RULE_CHAIN, op.Chain.Name)
	case delChainOp:
		out.start(nftMsg|unix.NFT_MSG_DELCHAIN, unix.NLM_F_REQUEST)
		out.buf = appendStrAttr(nfgen(out.buf), unix.NFTA_CHAIN_TABLE, op.Table)
		out.buf = appendStrAttr(out.buf, unix.NFTA_CHAIN_NAME, op.Chain.Name)
	case addElementsOp:
		out.start(nftMsg|unix.NFT_MSG_NEWSETELEM, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendElements(nfgen(out.buf), op.Table, op.Set, op.Elements, true)
	case delElementsOp:
		out.start(nftMsg|unix.NFT_MSG_DELSETELEM, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
		out.buf = appendElements(nfgen(out.buf), op.Table, op.Set, op.Elements, false)
	default:
		return fmt.Errorf("encode: no netlink form for %T", op)
	}
	out.end()
	return nil
}

// appendSet writes NEWSET's attributes for one of crossproxy's set kinds
// (nftSet says which key, data and flags each has).
func appendSet(b []byte, table string, s Set, id uint32) []byte {
	ns := nftSet(nil, s)
	var flags uint32
	if ns.IsMap {
		flags |= unix.NFT_SET_MAP
	}
	if ns.HasTimeout {
		flags |= unix.NFT_SET_TIMEOUT
	}
	if ns.Dynamic {
		flags |= unix.NFT_SET_EVAL
	}
	if ns.Concatenation {
		flags |= nftables.NFT_SET_CONCAT
	}
	b = appendStrAttr(b, unix.NFTA_SET_TABLE, table)
	b = appendStrAttr(b, unix.NFTA_SET_NAME, s.Name)
	b = appendU32Attr(b, unix.NFTA_SET_FLAGS, flags)
	b = appendU32Attr(b, unix.NFTA_SET_KEY_TYPE, ns.KeyType.GetNFTMagic())
	b = appendU32Attr(b, unix.NFTA_SET_KEY_LEN, ns.KeyType.Bytes)
	b = appendU32Attr(b, unix.NFTA_SET_ID, id)
	switch {
	case ns.IsMap && s.Kind == SetEndpoints:
		b = appendU32Attr(b, unix.NFTA_SET_DATA_TYPE, ns.DataType.GetNFTMagic())
		b = appendU32Attr(b, unix.NFTA_SET_DATA_LEN, ns.DataType.Bytes)
	case ns.IsMap: // the frontend maps are verdict maps
		b = appendU32Attr(b, unix.NFTA_SET_DATA_TYPE, uint32(unix.NFT_DATA_VERDICT))
		b = appendU32Attr(b, unix.NFTA_SET_DATA_LEN, ns.DataType.Bytes)
	}
	if ns.HasTimeout && ns.Timeout != 0 {
		b = binary.BigEndian.AppendUint64(appendHdr(b, 12, unix.NFTA_SET_TIMEOUT), uint64(ns.Timeout.Milliseconds()))
	}
	if s.Size > 0 && !ns.Concatenation {
		var desc int
		b, desc = nest(b, unix.NFTA_SET_DESC)
		b = appendU32Attr(b, unix.NFTA_SET_DESC_SIZE, s.Size)
		b = endNest(b, desc)
	}
	if ns.Concatenation {
		var desc, concat int
		b, desc = nest(b, unix.NFTA_SET_DESC)
		if s.Size > 0 {
			b = appendU32Attr(b, unix.NFTA_SET_DESC_SIZE, s.Size)
		}
		b, concat = nest(b, nftables.NFTA_SET_DESC_CONCAT)
		for _, t := range nftables.ConcatSetTypeElements(ns.KeyType) {
			at := len(b)
			b = appendHdr(b, 12, unix.NFTA_SET_DESC_SIZE) // not flagged nested, as the library writes it
			b = appendU32Attr(b, unix.NFTA_DATA_VALUE, t.Bytes)
			b = endNest(b, at)
		}
		b = endNest(b, concat)
		b = endNest(b, desc)
	}
	return b
}

// appendElements writes the element list of NEWSETELEM/DELSETELEM; with data,
// frontend map elements carry their verdict and comment.
func appendElements(b []byte, table string, set Set, elements []element, withData bool) []byte {
	b = appendStrAttr(b, unix.NFTA_SET_NAME, set.Name)
	b = appendU32Attr(b, unix.NFTA_LOOKUP_SET_ID, 0)
	b = appendStrAttr(b, unix.NFTA_SET_TABLE, table)
	var list int
	b, list = nest(b, unix.NFTA_SET_ELEM_LIST_ELEMENTS)
	var key [40]byte
	for i, e := range elements {
		var item, k int
		b, item = nest(b, uint16(i+1))
		b, k = nest(b, unix.NFTA_SET_ELEM_KEY)
		kb := appendElementKey(key[:0], set.Kind, e)
		b = pad4(append(appendHdr(b, 4+len(kb), unix.NFTA_DATA_VALUE), kb...))
		b = endNest(b, k)
		if withData && set.Kind == SetKeys && e.Comment != "" {
			ud := userdata.AppendString(nil, userdata.NFTNL_UDATA_SET_ELEM_COMMENT, e.Comment)
			b = pad4(append(appendHdr(b, 4+len(ud), unix.NFTA_SET_ELEM_USERDATA), ud...))
		}
		if withData && set.Kind == SetEndpoints {
			var data int
			b, data = nest(b, unix.NFTA_SET_ELEM_DATA)
			to := append(e.To.Addr().AsSlice(), byte(e.To.Port()>>8), byte(e.To.Port()), 0, 0)
			b = pad4(append(appendHdr(b, 4+len(to), unix.NFTA_DATA_VALUE), to...))
			b = endNest(b, data)
		}
		if withData && set.Kind == SetFrontends {
			var data, verdict int
			b, data = nest(b, unix.NFTA_SET_ELEM_DATA)
			b, verdict = nest(b, unix.NFTA_DATA_VERDICT)
			b = appendU32Attr(b, unix.NFTA_VERDICT_CODE, uint32(nftGoto))
			if e.Chain != "" {
				b = appendStrAttr(b, unix.NFTA_VERDICT_CHAIN, e.Chain)
			}
			b = endNest(b, verdict)
			b = endNest(b, data)
			if e.Comment != "" {
				ud := userdata.AppendString(nil, userdata.NFTNL_UDATA_SET_ELEM_COMMENT, e.Comment)
				b = pad4(append(appendHdr(b, 4+len(ud), unix.NFTA_SET_ELEM_USERDATA), ud...))
			}
		}
		b = endNest(b, item)
	}
	return endNest(b, list)
}
