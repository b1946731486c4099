package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// Programmed reads the kernel's table (not the backend's memory) and reports
// every frontend of svc found in the frontend maps, the endpoints its chains
// spread new connections over, and the live conntrack entries to it.
func (b *Backend) Programmed(ctx context.Context, svc types.NamespacedName) (*platform.ProgrammedService, error) {
	out := &platform.ProgrammedService{Service: svc}
	fronts := map[frontendKey]bool{}
	// The namespace handle is held while the tables are read, not while
	// the conntrack helper takes it again below: a second read lock taken
	// while Close waits for the first would deadlock.
	err := b.ns.withConn(func(c *nftables.Conn) error { return b.readFrontends(c, svc, out, fronts) })
	if err != nil {
		return nil, err
	}
	if len(fronts) > 0 {
		conns, err := b.conntrack.List(fronts)
		if err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("connections unavailable: %v", err))
		}
		out.Connections = conns
	}
	return out, nil
}

// readFrontends fills out with svc's frontends from the kernel's frontend
// maps and records each in fronts.
func (b *Backend) readFrontends(c *nftables.Conn, svc types.NamespacedName, out *platform.ProgrammedService, fronts map[frontendKey]bool) error {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("list inet tables: %w", err)
	}
	main := b.cfg.table()
	found := false
	for _, tb := range tables {
		if tb.Name == main {
			ok, err := readShared(c, tableObj(main), svc, out, fronts)
			if err != nil {
				return err
			}
			found = found || ok
		}
	}
	for _, tb := range tables {
		if tb.Name == main || !ownTable(main, tb.Name) {
			continue
		}
		t := tableObj(tb.Name)
		r := &ruleReader{c: c, t: t, cache: map[string][]*nftables.Rule{}}
		for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
			set, err := c.GetSetByName(t, frontendMap(f))
			if err != nil {
				continue
			}
			found = true
			elems, err := c.GetSetElements(set)
			if err != nil {
				return fmt.Errorf("read map %s of table inet %s: %w", set.Name, t.Name, err)
			}
			for _, e := range elems {
				if err := b.readFrontend(r, f, e, svc, out, fronts); err != nil {
					return err
				}
			}
		}
	}
	sort.Strings(out.Notes)
	if !found {
		return fmt.Errorf("tables inet %s and %s-*: no frontend set or map: not programmed", main, main)
	}
	sort.Slice(out.Frontends, func(i, j int) bool {
		a, b := out.Frontends[i], out.Frontends[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Addr != b.Addr {
			return a.Addr.Less(b.Addr)
		}
		if a.Port != b.Port {
			return a.Port < b.Port
		}
		return a.Protocol < b.Protocol
	})
	return nil
}

// readFrontend adds the frontend of one map element to out when it belongs to svc.
func (b *Backend) readFrontend(r *ruleReader, f v1.IPFamily, e nftables.SetElement, svc types.NamespacedName,
	out *platform.ProgrammedService, fronts map[frontendKey]bool) error {
	target := verdictChain(e)
	kind, name, ok := parsePortChain(target)
	if !ok || name != svc.String() {
		return nil
	}
	addr, proto, port, ok := decodeFrontendKey(f, e.Key)
	if !ok {
		return nil
	}
	pf := platform.ProgrammedFrontend{Kind: core.FrontendKind(e.Comment), Addr: addr, Port: port, Protocol: protoNames[proto]}
	if pf.Kind == "" {
		pf.Kind = core.FrontendClusterIP
		if kind != "svc" {
			pf.Kind = core.FrontendNodePort
		}
	}
	eps, verdict, err := r.resolve(target, 0)
	if err != nil {
		return err
	}
	pf.Endpoints, pf.Verdict = eps, verdict
	fronts[frontendKey{proto, netip.AddrPortFrom(addr, port)}] = true
	if addr.IsLoopback() {
		// --localhost-nodeports frontends are the backend's own addition;
		// the computed state has no such frontend.
		out.Notes = append(out.Notes, fmt.Sprintf("localhost NodePort %s/%s (--localhost-nodeports) -> %v",
			netip.AddrPortFrom(addr, port), pf.Protocol, eps))
		return nil
	}
	out.Frontends = append(out.Frontends, pf)
	return nil
}

// readShared adds svc's frontends in the shared-map layout of table t
// (maps.go) to out, reporting whether t has that layout. A frontend's
// Service is the comment of its service-frontends element; what a new
// connection from outside the node meets is its drop or reject membership,
// else its endpoints in its class's endpoints-vN-M in slot order.
func readShared(c *nftables.Conn, t *nftables.Table, svc types.NamespacedName,
	out *platform.ProgrammedService, fronts map[frontendKey]bool) (bool, error) {
	found := false
	for _, f := range []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol} {
		s := shared(f)
		elems, ok, err := readElements(c, t, s.frontends.Name)
		if err != nil || !ok {
			return found, err
		}
		found = true
		var mine []platform.ProgrammedFrontend
		for _, e := range elems {
			kind, name, ok := strings.Cut(e.Comment, " ")
			if !ok || name != svc.String() {
				continue
			}
			addr, proto, port, ok := decodeFrontendKey(f, e.Key)
			if ok {
				mine = append(mine, platform.ProgrammedFrontend{Kind: core.FrontendKind(kind), Addr: addr, Port: port, Protocol: protoNames[proto]})
			}
		}
		if len(mine) == 0 {
			continue
		}
		member := map[string]map[frontendKey]bool{}
		for _, set := range []Set{s.drop[pathMain], s.reject[pathMain]} {
			es, _, err := readElements(c, t, set.Name)
			if err != nil {
				return found, err
			}
			member[set.Name] = map[frontendKey]bool{}
			for _, e := range es {
				if addr, proto, port, ok := decodeFrontendKey(f, e.Key); ok {
					member[set.Name][frontendKey{proto, netip.AddrPortFrom(addr, port)}] = true
				}
			}
		}
		type slotted struct {
			slot uint32
			to   netip.AddrPort
		}
		eps := map[frontendKey][]slotted{}
		var es []nftables.SetElement
		for _, m := range s.endpoints[pathMain] {
			got, _, err := readElements(c, t, m.Name)
			if err != nil {
				return found, err
			}
			es = append(es, got...)
		}
		n := int(addrLen(f))
		for _, e := range es {
			addr, proto, port, ok := decodeFrontendKey(f, e.Key)
			if !ok || len(e.Key) < n+12 || len(e.Val) < n+2 {
				continue
			}
			to, _ := netip.AddrFromSlice(e.Val[:n])
			k := frontendKey{proto, netip.AddrPortFrom(addr, port)}
			eps[k] = append(eps[k], slotted{binary.NativeEndian.Uint32(e.Key[n+8:]), netip.AddrPortFrom(to, uint16(e.Val[n])<<8|uint16(e.Val[n+1]))})
		}
		for _, pf := range mine {
			k := frontendKey{l4proto(pf.Protocol), netip.AddrPortFrom(pf.Addr, pf.Port)}
			fronts[k] = true
			switch {
			case member[s.drop[pathMain].Name][k]:
				pf.Verdict = core.VerdictDrop
			case member[s.reject[pathMain].Name][k]:
				pf.Verdict = core.VerdictReject
			default:
				sl := eps[k]
				sort.Slice(sl, func(i, j int) bool { return sl[i].slot < sl[j].slot })
				for _, x := range sl {
					pf.Endpoints = append(pf.Endpoints, x.to)
				}
				if len(pf.Endpoints) == 0 {
					pf.Verdict = core.VerdictDrop
				}
			}
			if pf.Addr.IsLoopback() {
				out.Notes = append(out.Notes, fmt.Sprintf("localhost NodePort %s/%s (--localhost-nodeports) -> %v",
					netip.AddrPortFrom(pf.Addr, pf.Port), pf.Protocol, pf.Endpoints))
				continue
			}
			out.Frontends = append(out.Frontends, pf)
		}
	}
	return found, nil
}

// readElements lists the elements of set name in t; ok is false when t has
// no such set.
func readElements(c *nftables.Conn, t *nftables.Table, name string) ([]nftables.SetElement, bool, error) {
	set, err := c.GetSetByName(t, name)
	if err != nil {
		return nil, false, nil
	}
	es, err := c.GetSetElements(set)
	if err != nil {
		return nil, true, fmt.Errorf("read set %s of table inet %s: %w", name, t.Name, err)
	}
	return es, true, nil
}

// verdictChain is the chain of a verdict map element. google/nftables v0.3.0
// leaves VerdictData empty when reading and keeps the nested verdict
// attributes (code, chain) in Val, so they are decoded here.
func verdictChain(e nftables.SetElement) string {
	if e.VerdictData != nil {
		return e.VerdictData.Chain
	}
	ad, err := netlink.NewAttributeDecoder(e.Val)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == unix.NFTA_VERDICT_CHAIN {
			return strings.TrimRight(ad.String(), "\x00")
		}
	}
	return ""
}

func decodeFrontendKey(f v1.IPFamily, k []byte) (netip.Addr, uint8, uint16, bool) {
	n := int(addrLen(f))
	if len(k) < n+8 {
		return netip.Addr{}, 0, 0, false
	}
	addr, ok := netip.AddrFromSlice(k[:n])
	return addr, k[n], uint16(k[n+4])<<8 | uint16(k[n+5]), ok
}

// dnatTarget decodes the destination a DNAT rule loads: one 8-byte immediate
// (IPv4 address and port) or an address and a port immediate (IPv6).
func dnatTarget(imm [][]byte) (netip.AddrPort, bool) {
	if last := imm[len(imm)-1]; len(last) == 8 {
		addr := netip.AddrFrom4([4]byte(last[:4]))
		return netip.AddrPortFrom(addr, uint16(last[4])<<8|uint16(last[5])), true
	}
	if len(imm) < 2 {
		return netip.AddrPort{}, false
	}
	addr, ok := netip.AddrFromSlice(imm[len(imm)-2])
	p := imm[len(imm)-1]
	if !ok || len(p) < 2 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, uint16(p[0])<<8|uint16(p[1])), true
}

type ruleReader struct {
	c     *nftables.Conn
	t     *nftables.Table
	cache map[string][]*nftables.Rule
}

func (r *ruleReader) rules(chain string) ([]*nftables.Rule, error) {
	if rs, ok := r.cache[chain]; ok {
		return rs, nil
	}
	rs, err := r.c.GetRules(r.t, &nftables.Chain{Table: r.t, Name: chain})
	if err != nil {
		return nil, fmt.Errorf("read chain %s of table inet %s: %w", chain, r.t.Name, err)
	}
	r.cache[chain] = rs
	return rs, nil
}

// resolve follows a chain the way a new connection from outside the node
// would: DNAT rules give endpoints, an unconditional goto is followed, a final
// drop or goto reject-chain gives the empty-set verdict. Conditional gotos
// (pod and node sources under a Local policy) are other paths and skipped,
// except in a firewall chain, whose allowed path is the one to report.
func (r *ruleReader) resolve(chain string, depth int) ([]netip.AddrPort, core.Verdict, error) {
	if depth > 8 {
		return nil, core.VerdictNone, fmt.Errorf("chain %s: jumps nest too deep", chain)
	}
	rules, err := r.rules(chain)
	if err != nil {
		return nil, core.VerdictNone, err
	}
	kind, _, _ := parsePortChain(chain)
	var eps []netip.AddrPort
	seen := map[netip.AddrPort]bool{}
	for _, rule := range rules {
		var imm [][]byte
		conditional, dnat := false, false
		var verdict *expr.Verdict
		for _, e := range rule.Exprs {
			switch e := e.(type) {
			case *expr.Lookup, *expr.Fib, *expr.Numgen:
				conditional = true
			case *expr.Payload:
				if e.Base == expr.PayloadBaseNetworkHeader {
					conditional = true
				}
			case *expr.Immediate:
				imm = append(imm, e.Data)
			case *expr.NAT:
				dnat = e.Type == expr.NATTypeDestNAT
			case *expr.Verdict:
				verdict = e
			}
		}
		switch {
		case dnat && len(imm) > 0:
			if ap, ok := dnatTarget(imm); ok && !seen[ap] {
				seen[ap] = true
				eps = append(eps, ap)
			}
		case verdict == nil || verdict.Kind == expr.VerdictJump:
		case verdict.Kind == expr.VerdictDrop && !conditional && len(eps) == 0 && kind != "fw":
			return nil, core.VerdictDrop, nil
		case verdict.Kind == expr.VerdictGoto && verdict.Chain == chainReject && !conditional && len(eps) == 0:
			return nil, core.VerdictReject, nil
		case verdict.Kind == expr.VerdictGoto && verdict.Chain != chainReject && (!conditional || kind == "fw") && len(eps) == 0:
			return r.resolve(verdict.Chain, depth+1)
		}
	}
	if len(eps) == 0 {
		return nil, core.VerdictDrop, nil
	}
	return eps, core.VerdictNone, nil
}
