package nft

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// masqueradeMark is the packet mark bit the service chains set on connections
// that must be masqueraded; the postrouting chain clears it and masquerades.
// It is the only thing crossproxy's rules share with the rest of the node.
const masqueradeMark uint32 = 0x4000

// Names of the table-wide chains and sets. Per-Service-port objects are named by
// portChainName and affinitySetName.
const (
	chainPrerouting   = "nat-prerouting"
	chainOutput       = "nat-output"
	chainPostrouting  = "nat-postrouting"
	chainMarkMasq     = "mark-for-masquerade"
	chainReject       = "reject-chain"
	chainOffClusterV4 = "masq-off-cluster-v4"
	chainOffClusterV6 = "masq-off-cluster-v6"
	chainLocalnet     = "filter-input-localnet"
)

// Priorities of the base chains: dstnat and srcnat, as kube-proxy uses them.
const (
	priorityDstNAT int32 = -100
	prioritySrcNAT int32 = 100
	priorityFilter int32 = 0
)

// setKind is the key (and data) type of a set, which decides how its elements
// are encoded.
type setKind int

const (
	// SetFrontends is a verdict map "address . protocol . port : verdict".
	SetFrontends setKind = iota
	// SetAddrs is a set of addresses.
	SetAddrs
	// SetAddrPairs is a set of "address . address" (hairpin).
	SetAddrPairs
	// SetAffinity is a dynamic set of client addresses with a timeout.
	SetAffinity
	// SetKeys is a plain set of frontends "address . protocol . port": the
	// shared-map layout's sets that say what a frontend does (maps.go).
	SetKeys
	// SetEndpoints is a data map "address . protocol . port . slot :
	// endpoint address . port": the endpoints of every shared-map frontend.
	SetEndpoints
)

// Set is one named set or map of the table.
type Set struct {
	Name    string
	Family  v1.IPFamily
	Kind    setKind
	Timeout time.Duration // SetAffinity only
	// Size is the most elements the kernel lets the set hold, 0 for no
	// limit. Given, it also makes the kernel choose a hash table of that
	// size instead of one that grows while a batch fills it (sizedSets).
	Size uint32
}

// element is one element of a set; which fields count depends on the set's Kind.
type element struct {
	Addr  netip.Addr
	Addr2 netip.Addr // SetAddrPairs
	Proto v1.Protocol
	Port  uint16
	// Chain is the verdict "goto Chain" of a SetFrontends element.
	Chain string
	// Comment names the frontend kind, so a reader of the table (and
	// Programmed) can tell a NodePort from an ExternalIP.
	Comment string
	// Slot and To are a SetEndpoints element's slot (part of the key) and
	// endpoint (the data).
	Slot uint32
	To   netip.AddrPort
}

// hook makes a chain a base chain.
type hook struct {
	Type     string // "nat"
	Hook     string // "prerouting", "output", "postrouting"
	Priority int32
}

// Chain is one chain with its rules in order.
type Chain struct {
	Name  string
	Hook  *hook
	Rules []Rule
}

// Rule is a sequence of matches and statements, evaluated in order.
type Rule []stmt

// stmt is one match or statement of a rule. Every stmt is a comparable value
// type, so rules compare with ==.
type stmt interface{ nft() string }

// matchFamily matches the packet's IP family (meta nfproto).
type matchFamily struct{ Family v1.IPFamily }

// matchL4 matches the transport protocol.
type matchL4 struct{ Proto v1.Protocol }

// matchAddr matches the source or destination address against a prefix.
type matchAddr struct {
	Family v1.IPFamily
	Source bool
	Prefix netip.Prefix
	Invert bool
}

// matchAddrSet matches the source or destination address against a named set.
type matchAddrSet struct {
	Family v1.IPFamily
	Source bool
	Set    string
}

// matchHairpin matches "source . destination" against a set of address pairs:
// a packet that a DNAT sent back to the pod that sent it.
type matchHairpin struct {
	Family v1.IPFamily
	Set    string
}

// matchIif matches the input interface name, or a prefix of it (or, with
// Invert, any other name).
type matchIif struct {
	Name   string
	Prefix bool
	Invert bool
}

// matchLocalSource matches packets whose source address is one of this host's (fib saddr type local).
type matchLocalSource struct{}

// matchMark matches packets with the mark bit set.
type matchMark struct{ Bit uint32 }

// matchDNAT matches connections that were destination-NATed (ct status
// dnat), or with Invert those that were not.
type matchDNAT struct{ Invert bool }

// matchNewConn matches packets of connections that are neither established
// nor related to one (ct state new, invalid or untracked).
type matchNewConn struct{}

// matchRandom matches one packet in Mod, chosen at random (numgen random mod Mod == 0).
type matchRandom struct{ Mod uint32 }

// Dispatch looks "daddr . l4proto . dport" up in a verdict map.
type Dispatch struct {
	Family v1.IPFamily
	Map    string
}

// matchFrontend matches "daddr . l4proto . dport" against a set of
// frontends (SetKeys).
type matchFrontend struct {
	Family v1.IPFamily
	Set    string
}

// dnatPick rewrites the destination to the endpoint the map holds for the
// packet's frontend and a slot drawn at random in [0, Mod): "dnat to daddr .
// l4proto . dport . numgen random mod Mod map @Map". A slot the frontend does
// not have is a miss, which ends the rule without a verdict, so the next
// rule draws again (maps.go).
type dnatPick struct {
	Family v1.IPFamily
	Map    string
	Mod    uint32
}

// setMark sets the mark bit.
type setMark struct{ Bit uint32 }

// clearMark clears the mark bit.
type clearMark struct{ Bit uint32 }

// updateAffinity adds or refreshes the source address in a dynamic set.
type updateAffinity struct {
	Family v1.IPFamily
	Set    string
}

// DNAT rewrites the destination to an endpoint. It carries the transport
// protocol because a port rewrite is only valid after a protocol match
// (meta l4proto), which it includes.
type DNAT struct {
	Family v1.IPFamily
	Proto  v1.Protocol
	To     netip.AddrPort
}

// Masquerade rewrites the source to the outgoing interface's address.
type Masquerade struct{}

// reject refuses the packet: a TCP reset, or ICMP port unreachable.
type reject struct{ TCPReset bool }

// Verdict ends the rule with accept, drop, return, or a jump or goto to Chain.
type Verdict struct {
	Kind  verdictKind
	Chain string
}

// verdictKind is how a Verdict ends a rule.
type verdictKind uint8

const (
	verdictAccept verdictKind = iota + 1
	verdictDrop
	verdictReturn
	verdictJump
	verdictGoto
)

func (k verdictKind) String() string {
	switch k {
	case verdictAccept:
		return "accept"
	case verdictDrop:
		return "drop"
	case verdictReturn:
		return "return"
	case verdictJump:
		return "jump"
	case verdictGoto:
		return "goto"
	}
	return fmt.Sprintf("verdict(%d)", uint8(k))
}

func ipKeyword(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return "ip6"
	}
	return "ip"
}

func protoName(p v1.Protocol) string { return strings.ToLower(string(p)) }

func dir(source bool) string {
	if source {
		return "saddr"
	}
	return "daddr"
}

func (m matchFamily) nft() string {
	if m.Family == v1.IPv6Protocol {
		return "meta nfproto ipv6"
	}
	return "meta nfproto ipv4"
}
func (m matchL4) nft() string { return "meta l4proto " + protoName(m.Proto) }
func (m matchAddr) nft() string {
	op := ""
	if m.Invert {
		op = "!= "
	}
	p := m.Prefix.String()
	if m.Prefix.IsSingleIP() {
		p = m.Prefix.Addr().String()
	}
	return fmt.Sprintf("%s %s %s%s", ipKeyword(m.Family), dir(m.Source), op, p)
}
func (m matchAddrSet) nft() string {
	return fmt.Sprintf("%s %s @%s", ipKeyword(m.Family), dir(m.Source), m.Set)
}
func (m matchHairpin) nft() string {
	k := ipKeyword(m.Family)
	return fmt.Sprintf("%s saddr . %s daddr @%s", k, k, m.Set)
}
func (m matchIif) nft() string {
	op := ""
	if m.Invert {
		op = "!= "
	}
	if m.Prefix {
		return fmt.Sprintf("iifname %s%q", op, m.Name+"*")
	}
	return fmt.Sprintf("iifname %s%q", op, m.Name)
}
func (matchLocalSource) nft() string { return "fib saddr type local" }
func (m matchMark) nft() string      { return fmt.Sprintf("meta mark & 0x%08x != 0x00000000", m.Bit) }
func (m matchDNAT) nft() string {
	if m.Invert {
		return "ct status & dnat == 0"
	}
	return "ct status dnat"
}
func (matchNewConn) nft() string  { return "ct state & (established | related) == 0" }
func (m matchRandom) nft() string { return fmt.Sprintf("numgen random mod %d 0", m.Mod) }
func (d Dispatch) nft() string {
	k := ipKeyword(d.Family)
	return fmt.Sprintf("%s daddr . meta l4proto . th dport vmap @%s", k, d.Map)
}
func (m matchFrontend) nft() string {
	return fmt.Sprintf("%s daddr . meta l4proto . th dport @%s", ipKeyword(m.Family), m.Set)
}
func (d dnatPick) nft() string {
	k := ipKeyword(d.Family)
	return fmt.Sprintf("dnat %s to %s daddr . meta l4proto . th dport . numgen random mod %d map @%s", k, k, d.Mod, d.Map)
}
func (s setMark) nft() string   { return fmt.Sprintf("meta mark set meta mark | 0x%08x", s.Bit) }
func (s clearMark) nft() string { return fmt.Sprintf("meta mark set meta mark & 0x%08x", ^s.Bit) }
func (u updateAffinity) nft() string {
	return fmt.Sprintf("update @%s { %s saddr }", u.Set, ipKeyword(u.Family))
}
func (d DNAT) nft() string {
	return fmt.Sprintf("meta l4proto %s dnat %s to %s", protoName(d.Proto), ipKeyword(d.Family), d.To)
}
func (Masquerade) nft() string { return "masquerade fully-random" }
func (r reject) nft() string {
	if r.TCPReset {
		return "reject with tcp reset"
	}
	return "reject"
}
func (v Verdict) nft() string {
	if v.Chain != "" {
		return v.Kind.String() + " " + v.Chain
	}
	return v.Kind.String()
}

// String prints the rule in nft syntax.
func (r Rule) String() string {
	parts := make([]string, len(r))
	for i, s := range r {
		parts[i] = s.nft()
	}
	return strings.Join(parts, " ")
}

// Equal reports whether two rules are the same, statement by statement.
func (r Rule) Equal(o Rule) bool {
	if len(r) != len(o) {
		return false
	}
	for i := range r {
		if r[i] != o[i] {
			return false
		}
	}
	return true
}

func rulesEqual(a, b []Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
