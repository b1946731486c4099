package nft

import (
	"fmt"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// Registers: reg1/reg2 are 16-byte registers, reg32 is the first 4-byte one,
// where concatenations start.
const (
	reg1  = unix.NFT_REG_1
	reg2  = unix.NFT_REG_2
	reg32 = unix.NFT_REG32_00
)

func addrLen(f v1.IPFamily) uint32 {
	if f == v1.IPv6Protocol {
		return 16
	}
	return 4
}

// addrOffset is the offset of the source or destination address in the network header.
func addrOffset(f v1.IPFamily, source bool) uint32 {
	switch {
	case f == v1.IPv6Protocol && source:
		return 8
	case f == v1.IPv6Protocol:
		return 24
	case source:
		return 12
	}
	return 16
}

func loadAddr(f v1.IPFamily, source bool, reg uint32) *expr.Payload {
	return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: addrOffset(f, source), Len: addrLen(f)}
}

func nfproto(f v1.IPFamily) byte {
	if f == v1.IPv6Protocol {
		return unix.NFPROTO_IPV6
	}
	return unix.NFPROTO_IPV4
}

func l4proto(p v1.Protocol) byte {
	switch p {
	case v1.ProtocolUDP:
		return unix.IPPROTO_UDP
	case v1.ProtocolSCTP:
		return unix.IPPROTO_SCTP
	}
	return unix.IPPROTO_TCP
}

func u32(v uint32) []byte { return binaryutil.NativeEndian.PutUint32(v) }

func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

var verdictKinds = map[verdictKind]expr.VerdictKind{
	verdictAccept: expr.VerdictAccept, verdictDrop: expr.VerdictDrop, verdictReturn: expr.VerdictReturn,
	verdictJump: expr.VerdictJump, verdictGoto: expr.VerdictGoto,
}

// familyCheck is the "meta nfproto" guard nft puts before an address match in
// an inet table; with it `nft list` prints "ip saddr" instead of raw offsets.
func familyCheck(f v1.IPFamily) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{nfproto(f)}}}
}

// loadFrontendKey loads "daddr . l4proto . dport" into the registers from
// reg32 on, after the family check.
func loadFrontendKey(f v1.IPFamily) []expr.Any {
	protoReg := reg32 + addrLen(f)/4
	return append(familyCheck(f), loadAddr(f, false, reg32),
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
		&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
}

// ruleExprs translates a model rule into netlink expressions.
func ruleExprs(r Rule) ([]expr.Any, error) {
	var out []expr.Any
	for _, s := range r {
		switch s := s.(type) {
		case matchFamily:
			out = append(out, &expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{nfproto(s.Family)}})
		case matchL4:
			out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{l4proto(s.Proto)}})
		case matchAddr:
			op := expr.CmpOpEq
			if s.Invert {
				op = expr.CmpOpNeq
			}
			out = append(out, familyCheck(s.Family)...)
			out = append(out, loadAddr(s.Family, s.Source, reg1))
			p := s.Prefix.Masked()
			if p.Bits() < p.Addr().BitLen() {
				mask := make([]byte, addrLen(s.Family))
				for i := 0; i < p.Bits(); i++ {
					mask[i/8] |= 0x80 >> (i % 8)
				}
				out = append(out, &expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: addrLen(s.Family),
					Mask: mask, Xor: make([]byte, addrLen(s.Family))})
			}
			out = append(out, &expr.Cmp{Op: op, Register: reg1, Data: p.Addr().AsSlice()})
		case matchAddrSet:
			out = append(out, familyCheck(s.Family)...)
			out = append(out, loadAddr(s.Family, s.Source, reg1), &expr.Lookup{SourceRegister: reg1, SetName: s.Set})
		case matchHairpin:
			out = append(out, loadAddr(s.Family, true, reg32), loadAddr(s.Family, false, reg32+addrLen(s.Family)/4),
				&expr.Lookup{SourceRegister: reg32, SetName: s.Set})
		case matchIif:
			data := ifname(s.Name)
			if s.Prefix {
				data = []byte(s.Name)
			}
			op := expr.CmpOpEq
			if s.Invert {
				op = expr.CmpOpNeq
			}
			out = append(out, &expr.Meta{Key: expr.MetaKeyIIFNAME, Register: reg1},
				&expr.Cmp{Op: op, Register: reg1, Data: data})
		case matchLocalSource:
			out = append(out, &expr.Fib{Register: reg1, FlagSADDR: true, ResultADDRTYPE: true},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: u32(unix.RTN_LOCAL)})
		case matchMark:
			out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: u32(s.Bit), Xor: u32(0)},
				&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: u32(0)})
		case matchDNAT:
			op := expr.CmpOpNeq
			if s.Invert {
				op = expr.CmpOpEq
			}
			out = append(out, &expr.Ct{Key: expr.CtKeySTATUS, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: u32(ipsDstNAT), Xor: u32(0)},
				&expr.Cmp{Op: op, Register: reg1, Data: u32(0)})
		case matchNewConn:
			out = append(out, &expr.Ct{Key: expr.CtKeySTATE, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: u32(ctStateEstablished | ctStateRelated), Xor: u32(0)},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: u32(0)})
		case matchRandom:
			out = append(out, &expr.Numgen{Register: reg1, Modulus: s.Mod, Type: unix.NFT_NG_RANDOM},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: u32(0)})
		case Dispatch:
			protoReg := reg32 + addrLen(s.Family)/4
			out = append(out, loadAddr(s.Family, false, reg32),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: protoReg},
				&expr.Payload{DestRegister: protoReg + 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
				&expr.Lookup{SourceRegister: reg32, DestRegister: 0, IsDestRegSet: true, SetName: s.Map})
		case matchFrontend:
			out = append(out, loadFrontendKey(s.Family)...)
			out = append(out, &expr.Lookup{SourceRegister: reg32, SetName: s.Set})
		case dnatPick:
			// The key "daddr . l4proto . dport . slot" from reg32 on; the
			// data "endpoint address . port" lands in reg1, its port in the
			// 4-byte register after the address.
			protoReg := reg32 + addrLen(s.Family)/4
			out = append(out, loadFrontendKey(s.Family)...)
			out = append(out,
				&expr.Numgen{Register: protoReg + 2, Modulus: s.Mod, Type: unix.NFT_NG_RANDOM},
				&expr.Lookup{SourceRegister: reg32, DestRegister: reg1, IsDestRegSet: true, SetName: s.Map},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nfproto(s.Family)), RegAddrMin: reg1, RegAddrMax: reg1,
					RegProtoMin: protoReg, RegProtoMax: protoReg, Specified: true})
		case setMark:
			out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: u32(^s.Bit), Xor: u32(s.Bit)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case clearMark:
			out = append(out, &expr.Meta{Key: expr.MetaKeyMARK, Register: reg1},
				&expr.Bitwise{SourceRegister: reg1, DestRegister: reg1, Len: 4, Mask: u32(^s.Bit), Xor: u32(0)},
				&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: reg1})
		case updateAffinity:
			out = append(out, loadAddr(s.Family, true, reg1),
				&expr.Dynset{SrcRegKey: reg1, SetName: s.Set, Operation: unix.NFT_DYNSET_OP_UPDATE})
		case DNAT:
			// The protocol match always holds (only the frontend map, keyed
			// by protocol, leads here), but nft needs it to print a port
			// rewrite it can read back.
			port := []byte{byte(s.To.Port() >> 8), byte(s.To.Port())}
			out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{l4proto(s.Proto)}},
				&expr.Immediate{Register: reg1, Data: s.To.Addr().AsSlice()},
				&expr.Immediate{Register: reg2, Data: port},
				&expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(nfproto(s.Family)), RegAddrMin: reg1, RegProtoMin: reg2, Specified: true})
		case Masquerade:
			out = append(out, &expr.Masq{FullyRandom: true})
		case reject:
			if s.TCPReset {
				out = append(out, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
			} else {
				out = append(out, &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH})
			}
		case Verdict:
			k, ok := verdictKinds[s.Kind]
			if !ok {
				return nil, fmt.Errorf("rule %q: unknown verdict %q", r, s.Kind)
			}
			out = append(out, &expr.Verdict{Kind: k, Chain: s.Chain})
		default:
			return nil, fmt.Errorf("rule %q: no netlink form for %T", r, s)
		}
	}
	return out, nil
}

// ipsDstNAT is the conntrack status bit of a destination-NATed connection.
const ipsDstNAT = 1 << 5

// ct state bits (NF_CT_STATE_BIT of IP_CT_ESTABLISHED and IP_CT_RELATED).
const (
	ctStateEstablished = 1 << 1
	ctStateRelated     = 1 << 2
)
