package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/platform"
)

// The kernel floor. Before its first sync the backend asks the kernel for
// every kind of object and expression its rulesets use, once, in a probe
// table: one batch creates the table dormant (its base chains see no packet)
// with one of each set, chain and rule shape, and the kernel validates it as
// it would a real ruleset (expression lookups and module loads, attributes,
// then at commit the hooks every rule is reachable from); a second batch
// deletes it. A table created and deleted in one batch is not enough: the
// kernel skips the commit-time validation of a table that the same batch
// deletes. A probe table an interrupted probe left behind is deleted by the
// next probe's first batch.
//
// A command the kernel refuses for lack of a feature (no such expression or
// chain type, an attribute it does not know, a rule on a hook it does not
// allow) names that feature; the backend then refuses to run with an error
// naming the features and the kernel release, instead of failing every sync.

// probeTable is the name of the probe's table, next to the main table's.
func probeTable(main string) string { return main + "-probe" }

// probeCommand is one command of the probe and the feature it needs.
type probeCommand struct {
	feature string
	op      Op
}

// Names of the probe's chains and sets.
const (
	probeSvc    = "svc"
	probeSvc6   = "svc6"
	probeExt    = "ext"
	probeMasq   = "masq-off-cluster"
	probeMark   = "mark-for-masquerade"
	probeReject = "reject-chain"
	probePick   = "pick"
)

// probeCommands lists, for table, one of each set kind, chain kind and
// statement the rulesets use, arranged as in a real ruleset: the service
// chains are reached through the frontend maps from both nat hooks that
// dispatch, so the kernel checks each expression on the hooks it really
// runs on. TestProbeCoversTheRuleset keeps it complete.
func probeCommands(table string) []probeCommand {
	v4, v6 := v1.IPv4Protocol, v1.IPv6Protocol
	type familySets struct{ front, addrs, pairs, aff, keys, eps Set }
	sets := map[v1.IPFamily]familySets{}
	for _, f := range []v1.IPFamily{v4, v6} {
		sfx := "-v4"
		if f == v6 {
			sfx = "-v6"
		}
		sets[f] = familySets{
			Set{Name: "frontends" + sfx, Family: f, Kind: SetFrontends},
			Set{Name: "cluster-ips" + sfx, Family: f, Kind: SetAddrs},
			Set{Name: "hairpin" + sfx, Family: f, Kind: SetAddrPairs},
			Set{Name: "aff" + sfx, Family: f, Kind: SetAffinity, Timeout: 3 * time.Hour},
			Set{Name: "service-frontends" + sfx, Family: f, Kind: SetKeys},
			Set{Name: "endpoints" + sfx, Family: f, Kind: SetEndpoints},
		}
	}
	var cmds []probeCommand
	add := func(feature string, op Op) {
		cmds = append(cmds, probeCommand{feature: feature, op: op})
	}
	for _, f := range []v1.IPFamily{v4, v6} {
		s := sets[f]
		add("verdict map keyed by address . protocol . port", addSetOp{Table: table, Set: s.front})
		add("set of addresses", addSetOp{Table: table, Set: s.addrs})
		add("set of concatenated address pairs", addSetOp{Table: table, Set: s.pairs})
		add("dynamic set with timeouts (session affinity)", addSetOp{Table: table, Set: s.aff})
		add("set of address . protocol . port", addSetOp{Table: table, Set: s.keys})
		add("data map address . protocol . port . slot : address . port", addSetOp{Table: table, Set: s.eps})
	}
	base := func(name, hookName string, prio int32) *Chain {
		return &Chain{Name: name, Hook: &hook{Type: "nat", Hook: hookName, Priority: prio}}
	}
	prerouting := base(chainPrerouting, "prerouting", priorityDstNAT)
	output := base(chainOutput, "output", priorityDstNAT)
	postrouting := base(chainPostrouting, "postrouting", prioritySrcNAT)
	for _, c := range []*Chain{prerouting, output, postrouting} {
		add("nat chain on hook "+c.Hook.Hook, addChainOp{Table: table, Chain: c})
	}
	localnet := localnetGuard()
	add("filter chain on hook input", addChainOp{Table: table, Chain: &Chain{Name: localnet.Name, Hook: localnet.Hook}})
	rule0 := localnet.Rules[0]
	chains := map[string]*Chain{}
	for _, name := range []string{probeSvc, probeSvc6, probeExt, probeMasq, probeMark, probeReject, probePick} {
		chains[name] = &Chain{Name: name}
		add("regular chain", addChainOp{Table: table, Chain: chains[name]})
	}
	rule := func(feature string, c *Chain, r ...stmt) { add(feature, addRuleOp{Table: table, Chain: c, Rule: r}) }
	rule("localhost guard: iifname, address, ct state and ct status matches (CVE-2020-8558)", localnet, rule0...)
	pod4, pod6 := netip.MustParseAddrPort("192.0.2.10:8080"), netip.MustParseAddrPort("[2001:db8::10]:8080")
	cluster4, cluster6 := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/64")
	for _, c := range []*Chain{prerouting, output} {
		rule("vmap lookup of ip daddr . meta l4proto . th dport", c, matchFamily{v4}, Dispatch{Family: v4, Map: sets[v4].front.Name})
		rule("vmap lookup of ip6 daddr . meta l4proto . th dport", c, matchFamily{v6}, Dispatch{Family: v6, Map: sets[v6].front.Name})
		rule("address set lookup", c, matchAddrSet{Family: v4, Set: sets[v4].addrs.Name}, Verdict{Kind: verdictGoto, Chain: probeReject})
		rule("address set lookup", c, matchAddrSet{Family: v6, Set: sets[v6].addrs.Name}, Verdict{Kind: verdictGoto, Chain: probeReject})
		for _, f := range []v1.IPFamily{v4, v6} {
			rule("set lookup of daddr . meta l4proto . th dport", c, matchFamily{f},
				matchFrontend{Family: f, Set: sets[f].keys.Name}, Verdict{Kind: verdictGoto, Chain: probePick})
		}
	}
	for _, f := range []v1.IPFamily{v4, v6} {
		rule("dnat to the address and port a data map gives for daddr . l4proto . dport . numgen random",
			chains[probePick], dnatPick{Family: f, Map: sets[f].eps.Name, Mod: 4})
	}
	rule("ct status, meta mark and masquerade fully-random", postrouting,
		matchDNAT{}, matchMark{Bit: masqueradeMark}, clearMark{Bit: masqueradeMark}, Masquerade{})
	for _, f := range []v1.IPFamily{v4, v6} {
		rule("concatenated address pair lookup (hairpin)", postrouting,
			matchFamily{f}, matchDNAT{}, matchHairpin{Family: f, Set: sets[f].pairs.Name}, Masquerade{})
	}
	rule("masquerade decision by source prefix", chains[probeMasq], matchAddr{Family: v4, Source: true, Prefix: cluster4}, Verdict{Kind: verdictReturn})
	rule("masquerade decision by source prefix", chains[probeMasq], matchAddr{Family: v6, Source: true, Prefix: cluster6, Invert: true}, Verdict{Kind: verdictReturn})
	rule("meta mark set", chains[probeMasq], setMark{Bit: masqueradeMark})
	rule("meta mark set", chains[probeMark], setMark{Bit: masqueradeMark})
	rule("jump", chains[probeSvc], Verdict{Kind: verdictJump, Chain: probeMasq})
	rule("session affinity (dynamic set lookup and update) with dnat", chains[probeSvc],
		matchAddrSet{Family: v4, Source: true, Set: sets[v4].aff.Name}, updateAffinity{Family: v4, Set: sets[v4].aff.Name},
		DNAT{Family: v4, Proto: v1.ProtocolTCP, To: pod4})
	rule("numgen random with dnat", chains[probeSvc], matchRandom{Mod: 2}, DNAT{Family: v4, Proto: v1.ProtocolTCP, To: pod4})
	rule("dnat to an IPv4 address and port", chains[probeSvc], DNAT{Family: v4, Proto: v1.ProtocolTCP, To: pod4})
	rule("session affinity (dynamic set update) with dnat", chains[probeSvc6],
		matchAddrSet{Family: v6, Source: true, Set: sets[v6].aff.Name}, updateAffinity{Family: v6, Set: sets[v6].aff.Name},
		DNAT{Family: v6, Proto: v1.ProtocolUDP, To: pod6})
	rule("dnat to an IPv6 address and port", chains[probeSvc6], DNAT{Family: v6, Proto: v1.ProtocolUDP, To: pod6})
	rule("iifname match", chains[probeExt], matchIif{Name: "cbr0"}, Verdict{Kind: verdictGoto, Chain: probeSvc})
	rule("iifname prefix match", chains[probeExt], matchIif{Name: "veth", Prefix: true}, Verdict{Kind: verdictGoto, Chain: probeSvc})
	rule("fib saddr type local", chains[probeExt], matchLocalSource{}, Verdict{Kind: verdictJump, Chain: probeMark})
	rule("meta l4proto match with accept", chains[probeExt], matchL4{v1.ProtocolSCTP}, Verdict{Kind: verdictAccept})
	rule("drop", chains[probeExt], Verdict{Kind: verdictDrop})
	rule("reject with tcp reset", chains[probeReject], matchL4{v1.ProtocolTCP}, reject{TCPReset: true})
	rule("reject with icmpx port-unreachable", chains[probeReject], reject{})
	// The elements last: they make the chains reachable from the hooks.
	for _, e := range []struct {
		f     v1.IPFamily
		addr  string
		proto v1.Protocol
		chain string
	}{
		{v4, "192.0.2.1", v1.ProtocolTCP, probeSvc},
		{v4, "192.0.2.2", v1.ProtocolTCP, probeExt},
		{v6, "2001:db8::1", v1.ProtocolUDP, probeSvc6},
	} {
		add("verdict map element with a comment (goto)", addElementsOp{Table: table, Set: sets[e.f].front,
			Elements: []element{{Addr: netip.MustParseAddr(e.addr), Proto: e.proto, Port: 80, Chain: e.chain, Comment: "ClusterIP"}}})
	}
	for _, f := range []v1.IPFamily{v4, v6} {
		a := netip.MustParseAddr("192.0.2.3")
		if f == v6 {
			a = netip.MustParseAddr("2001:db8::3")
		}
		add("address set element", addElementsOp{Table: table, Set: sets[f].addrs, Elements: []element{{Addr: a}}})
		add("concatenated set element", addElementsOp{Table: table, Set: sets[f].pairs, Elements: []element{{Addr: a, Addr2: a}}})
		key := element{Addr: a, Proto: v1.ProtocolTCP, Port: 80}
		gate := key
		gate.Comment = "ClusterIP default/probe"
		add("concatenated set element with a comment", addElementsOp{Table: table, Set: sets[f].keys, Elements: []element{gate}})
		key.Slot, key.To = 1, netip.AddrPortFrom(a, 8080)
		add("data map element address . port", addElementsOp{Table: table, Set: sets[f].eps, Elements: []element{key}})
	}
	return cmds
}

// errKernelFloor is what the probe returns when the kernel lacks a feature.
type errKernelFloor struct {
	release string
	missing []string // "feature: kernel's answer"
}

func (e *errKernelFloor) Error() string {
	return fmt.Sprintf("this kernel (Linux %s) lacks nftables features crossproxy needs (it runs on Linux 5.10 and later): %s",
		e.release, strings.Join(e.missing, "; "))
}

// Is makes the error a platform.ErrNodeUnfit: retrying cannot help.
func (e *errKernelFloor) Is(target error) bool { return target == platform.ErrNodeUnfit }

// missingFeature reports whether the kernel refused a command because it
// lacks what the command needs, as opposed to a passing condition (memory,
// a busy resource, permissions).
func missingFeature(errno syscall.Errno) bool {
	switch errno {
	case unix.ENOENT, unix.EOPNOTSUPP, unix.EINVAL, unix.EPROTONOSUPPORT, unix.EAFNOSUPPORT, unix.ERANGE, unix.E2BIG:
		return true
	}
	return false
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// probeKernel runs the probe in the backend's namespace (see above). It
// returns an error wrapping platform.ErrNodeUnfit when the kernel lacks a
// feature, and a plain error (retried with the next sync) otherwise.
func (b *Backend) probeKernel() error {
	return b.probe(probeCommands(probeTable(b.cfg.table())))
}

func (b *Backend) probe(cmds []probeCommand) error {
	table := probeTable(b.cfg.table())
	w := b.encoder.writer(len(cmds) + 3)
	// Add, delete (an interrupted probe's table, or the one just added),
	// add dormant: the probe starts from nothing whatever was there.
	head := []string{"inet table", "inet table", "dormant inet table"}
	w.add(addTableOp{Table: table})
	w.add(delTableOp{Table: table})
	w.out.start(nftMsg|unix.NFT_MSG_NEWTABLE, unix.NLM_F_REQUEST|unix.NLM_F_CREATE)
	w.out.buf = appendStrAttr(nfgen(w.out.buf), unix.NFTA_TABLE_NAME, table)
	w.out.buf = appendU32Attr(w.out.buf, unix.NFTA_TABLE_FLAGS, unix.NFT_TABLE_F_DORMANT)
	w.out.end()
	w.ops++
	for _, c := range cmds {
		w.add(c.op)
	}
	msgs, err := w.finish()
	if err != nil {
		return fmt.Errorf("kernel probe: %w", err)
	}
	describe := func(i int) string {
		if i < len(head) {
			return head[i]
		}
		if i-len(head) < len(cmds) {
			c := cmds[i-len(head)]
			return fmt.Sprintf("%s (%s)", c.feature, describeOp(c.op))
		}
		return fmt.Sprintf("command %d", i)
	}
	if err := b.batches.send(b.ns, msgs, describe); err != nil {
		return floorError(err)
	}
	del := &batch{Ops: []Op{delTableOp{Table: table}}}
	if err := b.apply(del); err != nil {
		return fmt.Errorf("kernel probe: delete table inet %s: %w", table, err)
	}
	b.log.WithField("kernel", kernelRelease()).Debug("the kernel has every nftables feature crossproxy uses")
	return nil
}

// floorError turns a refused probe into an errKernelFloor when every
// refusal is for a missing feature.
func floorError(err error) error {
	var be *batchError
	if !errors.As(err, &be) || len(be.Errors) == 0 {
		return fmt.Errorf("kernel probe: %w", err)
	}
	floor := &errKernelFloor{release: kernelRelease()}
	for _, e := range be.Errors {
		var se *os.SyscallError
		var errno syscall.Errno
		if !errors.As(e, &se) || !errors.As(se.Err, &errno) || !missingFeature(errno) {
			return fmt.Errorf("kernel probe: %w", err)
		}
		floor.missing = append(floor.missing, e.Error())
	}
	return floor
}
