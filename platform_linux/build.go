package nft

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// Config is what shapes the ruleset beyond the NodeState.
type Config struct {
	// Table is the inet table crossproxy owns.
	Table string
	// LocalhostNodePorts adds 127.0.0.1 NodePort frontends (IPv4 only).
	LocalhostNodePorts bool
	// Shards is the number of shard tables; 0 means ShardCount of the
	// number of Service ports with chains of their own.
	Shards int
	// ownChains gives every port chains of its own in the shards, as
	// crossproxy did before the shared-map layout (maps.go): what the
	// migration test starts from and what the benchmarks compare with
	// (BENCH_OWN_CHAINS). Unexported, so only this package's tests set it.
	ownChains bool
}

// defaultTable is the table name used when none is configured.
const defaultTable = "crossproxy"

func (c Config) table() string {
	if c.Table == "" {
		return defaultTable
	}
	return c.Table
}

// maxPortsPerShard and maxShards size the shard tables. Every commit that
// adds a rule with a NAT, verdict or lookup makes the kernel re-validate every
// chain reachable from the table's base chains, so a partial sync costs in
// proportion to the size of the table it touches; Services are spread over
// tables of at most a few hundred ports. Each shard adds one base-chain lookup
// to a connection's first packet, hence the cap, which keeps both an
// endpoint change and the first-packet latency small (the figures are in
// test/results/linux.md).
const (
	maxPortsPerShard = 256
	maxShards        = 24
)

// shardCount is the number of shard tables for n Service ports.
func shardCount(n int) int {
	s := (n + maxPortsPerShard - 1) / maxPortsPerShard
	return min(max(s, 1), maxShards)
}

// shardTable names shard i of the table.
func shardTable(table string, i int) string { return table + "-" + strconv.Itoa(i) }

// portObjects are the objects one Service port (in one family) owns: its
// chains, its elements in the family's frontend map, its affinity sets, and the
// addresses it contributes to the shared cluster-ips and hairpin sets. Keeping
// them per port is what lets a partial sync touch only changed Services.
type portObjects struct {
	Key core.PortKey
	// From is what the objects were built from, all the backend keeps of
	// them once they are programmed (see applied).
	From appliedPort
	// Shard is the shard table holding the chains, frontends and affinity
	// sets; ClusterIP and Endpoints go to the main table's shared sets.
	Shard        int
	Chains       []*Chain
	Frontends    []element
	AffinitySets []Set
	ClusterIP    netip.Addr
	Endpoints    []netip.Addr
	// Shared are the elements of a shared-map port (maps.go) in the main
	// table's sets; such a port has no chains, frontends or affinity sets.
	Shared []sharedElem
}

// globals are the objects that are not a Service port's: the main table's
// chains and sets, and those every shard table has.
type globals struct {
	Families    []v1.IPFamily
	Chains      []*Chain
	Sets        []Set
	ShardChains []*Chain
	ShardSets   []Set
}

// ruleset is the whole desired content of the main table and its shards.
type ruleset struct {
	Table   string
	Shards  int
	Globals *globals
	Ports   []*portObjects // sorted by key
	// Skipped are the ports left out because nftables cannot hold them.
	Skipped []Skipped
}

// Skipped is a Service port left out of the ruleset, and why. Leaving it out
// is what keeps the batch, and with it every other Service, acceptable to the
// kernel.
type Skipped struct {
	Key    core.PortKey
	Reason string
}

// maxNameLen is the longest chain or set name the kernel accepts
// (NFT_NAME_MAXLEN without its terminating NUL).
const maxNameLen = 255

// inexpressible says why nftables cannot hold port p, or "" when it can. The
// core validates its input, but manifests in standalone mode never passed an
// API server, and one port the kernel refuses would fail every batch. The
// answer depends only on p.Key, so a programmed port never becomes
// inexpressible through an update and loses its rules.
func inexpressible(p *core.ServicePort) string {
	switch p.Key.Family {
	case v1.IPv4Protocol, v1.IPv6Protocol:
	default:
		return fmt.Sprintf("IP family %q is not IPv4 or IPv6", p.Key.Family)
	}
	switch p.Key.Protocol {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		return fmt.Sprintf("protocol %q is not TCP, UDP or SCTP", p.Key.Protocol)
	}
	if p.Protocol != p.Key.Protocol {
		return fmt.Sprintf("protocol %q differs from the port key's %q", p.Protocol, p.Key.Protocol)
	}
	if n := len(portChainName("svc", p)); n > maxNameLen {
		return fmt.Sprintf("chain name of %d bytes is over the kernel's %d (namespace, name and port name too long)", n, maxNameLen)
	}
	return ""
}

func familySuffix(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return "v6"
	}
	return "v4"
}

func frontendMap(f v1.IPFamily) string  { return "frontends-" + familySuffix(f) }
func clusterIPSet(f v1.IPFamily) string { return "cluster-ips-" + familySuffix(f) }
func hairpinSet(f v1.IPFamily) string   { return "hairpin-" + familySuffix(f) }
func offClusterChain(f v1.IPFamily) string {
	if f == v1.IPv6Protocol {
		return chainOffClusterV6
	}
	return chainOffClusterV4
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return b32.EncodeToString(h[:5])
}

// portChainName names a chain of one Service port: kind, a hash of the port key
// (unique per family), and a readable namespace/name/protocol/port suffix.
func portChainName(kind string, p *core.ServicePort) string {
	h, _ := portHash(p.Key, 1)
	return kind + "-" + portChainSuffix(p, h)
}

// portHash is the short hash in a port's chain names and the shard (of
// shards) the port lives in, both from the port key.
func portHash(k core.PortKey, shards int) (string, int) {
	h := sha256.Sum256([]byte(k.String()))
	n := max(shards, 1)
	return b32.EncodeToString(h[:5]), int(binary.BigEndian.Uint32(h[5:9]) % uint32(n))
}

// portChainSuffix is what all chains of one port share after the kind.
func portChainSuffix(p *core.ServicePort, hash string) string {
	port := p.Key.PortName
	if port == "" {
		port = "p" + strconv.Itoa(int(p.Port))
	}
	return hash + "-" + p.Key.Service.Namespace + "/" + p.Key.Service.Name + "/" + protoName(p.Protocol) + "/" + port
}

// affinitySetName names the affinity set of one endpoint of one port; the
// timeout is part of the hash because a set's timeout cannot change in place.
func affinitySetName(p *core.ServicePort, ep core.Endpoint, timeout time.Duration) string {
	return fmt.Sprintf("aff-%s-%s", shortHash(p.Key.String()), shortHash(ep.AddrPort().String()+"/"+timeout.String()))
}

// parsePortChain splits a chain name made by portChainName into its kind and
// "namespace/name" (ok is false for other chains).
func parsePortChain(name string) (kind, service string, ok bool) {
	parts := strings.SplitN(name, "-", 3)
	if len(parts) != 3 {
		return "", "", false
	}
	switch parts[0] {
	case "svc", "ext", "fw", "clu":
	default:
		return "", "", false
	}
	fields := strings.Split(parts[2], "/")
	if len(fields) != 4 {
		return "", "", false
	}
	return parts[0], fields[0] + "/" + fields[1], true
}

// Render prints, in nft syntax, the ruleset the backend would program for a
// NodeState: what `crossproxy render --platform linux` shows on any OS.
func Render(state *core.NodeState, cfg Config) string { return build(state, cfg).Text() }

// build computes the whole ruleset for a NodeState, without the ports
// inexpressible refuses (listed in Skipped).
func build(state *core.NodeState, cfg Config) *ruleset {
	f := newFullBuild(state, cfg)
	rs := &ruleset{Table: f.table, Shards: f.cfg.Shards, Globals: f.globals, Skipped: f.skipped,
		Ports: make([]*portObjects, len(f.keys))}
	for i, k := range f.keys {
		rs.Ports[i] = buildPort(state.Ports[k], f.dets.of(state, k.Family), f.cfg, nil)
	}
	return rs
}

// fullBuild is a full sync's ruleset, built one shard at a time as the
// planner reaches it: the built objects of the whole ruleset and its command
// list would otherwise sit on top of the encoded batch at the memory peak of
// a proxy's life (test/results/scale.md). The ports
// are visited in key order; buildPort being deterministic, the batch is the
// same as planning Build's ruleset (TestStreamedPlanIsTheRulesetsPlan).
type fullBuild struct {
	state   *core.NodeState
	cfg     Config // Shards set
	table   string
	globals *globals
	keys    []core.PortKey // the expressible ports, in key order
	shards  [][]int32      // per shard, indexes into keys
	mapped  []int32        // the shared-map ports (main table), indexes into keys
	skipped []Skipped
	dets    detects
	// main is the main table's content once tables has yielded it.
	main *tableContent
	// tally counts the shared-map ports' elements per set (tallyShared).
	tally map[string]int
}

func newFullBuild(state *core.NodeState, cfg Config) *fullBuild {
	cfg.Shards = cfg.shardsFor(state)
	f := &fullBuild{state: state, cfg: cfg, table: cfg.table(),
		keys: make([]core.PortKey, 0, len(state.Ports)), shards: make([][]int32, cfg.Shards), dets: detects{}}
	for k := range state.Ports {
		f.keys = append(f.keys, k)
	}
	slices.SortFunc(f.keys, core.PortKey.Compare)
	kept := f.keys[:0]
	for _, k := range f.keys {
		if why := inexpressible(state.Ports[k]); why != "" {
			f.skipped = append(f.skipped, Skipped{Key: k, Reason: why})
			continue
		}
		if cfg.mapped(state.Ports[k]) {
			f.mapped = append(f.mapped, int32(len(kept)))
			kept = append(kept, k)
			continue
		}
		_, shard := portHash(k, cfg.Shards)
		f.shards[shard] = append(f.shards[shard], int32(len(kept)))
		kept = append(kept, k)
	}
	f.keys = kept
	// The shared-map ports' elements per set, before anything is built:
	// the classes in use shape the main table's chains, and the endpoint
	// maps are declared sized by these counts (sizes.go).
	f.tally = map[string]int{}
	for _, j := range f.mapped {
		k := f.keys[j]
		tallyShared(state.Ports[k], f.dets.of(state, k.Family), f.cfg, f.tally)
	}
	f.globals = buildGlobals(state, cfg, classUseOf(f.tally))
	return f
}

// shardsFor is the number of shard tables a full sync of state writes: the
// configured number, else one per so many ports with chains of their own.
func (c Config) shardsFor(state *core.NodeState) int {
	if c.Shards > 0 {
		return c.Shards
	}
	own := 0
	for _, p := range state.Ports {
		if !c.mapped(p) {
			own++
		}
	}
	return shardCount(own)
}

// names are the tables of the ruleset: the main table, then the shards.
func (f *fullBuild) names() []string { return tableNames(f.table, f.cfg.Shards) }

// commands estimates the batch's number of commands (it sizes the first
// chunk only).
func (f *fullBuild) commands() int { return 12 * len(f.keys) }

// newApplied is the empty record of what this build programs, sized for it;
// tables fills it port by port.
func (f *fullBuild) newApplied() *applied {
	eps := 0
	for _, k := range f.keys {
		eps += len(f.state.Ports[k].ClusterEndpoints)
	}
	return newAppliedSized(f.table, f.globals, f.cfg, len(f.keys), eps)
}

// shared gathers the main table's shared sets straight from the ports,
// before any is built: the main table comes first in the batch. A port's
// addresses there are its ClusterIP and its cluster then local endpoints,
// as buildPort records them.
func (f *fullBuild) shared() *sharedAddrs {
	var n sharedCounts
	for _, k := range f.keys {
		p := f.state.Ports[k]
		eps := 0
		for _, ep := range p.ClusterEndpoints {
			if hairpinsAll(p) || mayHairpin(ep) {
				eps++
			}
		}
		n.add(k.Family, eps)
	}
	s := newSharedAddrs(n)
	for _, k := range f.keys {
		p := f.state.Ports[k]
		i := familyIndex(k.Family)
		s.clusterIPs[i].add(p.ClusterIP, false)
		all := hairpinsAll(p)
		for _, set := range [][]core.Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
			for _, ep := range set {
				if all || mayHairpin(ep) {
					s.hairpins[i].add(ep.Addr, true)
				}
			}
		}
	}
	return s
}

// tables yields the main table and then each shard, whose ports are built
// when it is reached and dropped once the consumer moves on; record sees
// every port built.
func (f *fullBuild) tables(record func(*portObjects)) iter.Seq[*tableContent] {
	return func(yield func(*tableContent) bool) {
		main := mainContent(f.table, f.globals)
		f.shared().fill(main)
		main.Counts = elementCounts(main)
		for n, c := range f.tally {
			main.Counts[n] += c
		}
		f.main = main
		main.Shared = func(yield func([]sharedElem) bool) {
			for _, j := range f.mapped {
				k := f.keys[j]
				p := buildPort(f.state.Ports[k], f.dets.of(f.state, k.Family), f.cfg, nil)
				record(p)
				if !yield(p.Shared) {
					return
				}
			}
		}
		if !yield(main) {
			return
		}
		for i, idx := range f.shards {
			t := shardContent(f.table, i, f.globals)
			for _, j := range idx {
				k := f.keys[j]
				p := buildPort(f.state.Ports[k], f.dets.of(f.state, k.Family), f.cfg, nil)
				t.addPort(p)
				record(p)
			}
			if !yield(t) {
				return
			}
		}
	}
}

// detects hands out one copy of each family's local detection per sync, so
// the ports built in it share the copy their applied record points to.
type detects map[v1.IPFamily]*core.FamilyLocalDetect

func (d detects) of(state *core.NodeState, f v1.IPFamily) *core.FamilyLocalDetect {
	if det, ok := d[f]; ok {
		return det
	}
	det := state.LocalDetect[f]
	d[f] = &det
	return &det
}

// buildGlobals computes the chains and sets that are not a port's. The main
// table holds masquerading, the refusal of unused ClusterIP ports (priority
// dstnat+1: it only sees packets no shard translated) and the shared sets;
// every shard dispatches its own frontends and has its own helper chains,
// since a jump cannot leave its table.
func buildGlobals(state *core.NodeState, cfg Config, use classUse) *globals {
	g := &globals{Families: append([]v1.IPFamily(nil), state.Families...)}
	if len(g.Families) == 0 {
		g.Families = []v1.IPFamily{v1.IPv4Protocol}
	}
	var dispatch, unused []Rule
	for _, f := range g.Families {
		dispatch = append(dispatch, Rule{matchFamily{f}, Dispatch{f, frontendMap(f)}})
		// A ClusterIP packet no frontend took is for an unused port: refuse it.
		// (The set match carries the family check that nft shows as "ip".)
		unused = append(unused, Rule{matchAddrSet{Family: f, Set: clusterIPSet(f)}, Verdict{Kind: verdictGoto, Chain: chainReject}})
	}
	post := []Rule{{matchDNAT{}, matchMark{masqueradeMark}, clearMark{masqueradeMark}, Masquerade{}}}
	for _, f := range g.Families {
		post = append(post, Rule{matchFamily{f}, matchDNAT{}, matchHairpin{f, hairpinSet(f)}, Masquerade{}})
	}
	rejectChain := func() *Chain {
		return &Chain{Name: chainReject, Rules: []Rule{{matchL4{v1.ProtocolTCP}, reject{TCPReset: true}}, {reject{}}}}
	}
	g.Chains = append(g.Chains,
		&Chain{Name: chainPrerouting, Hook: &hook{"nat", "prerouting", priorityDstNAT + 1}, Rules: unused},
		&Chain{Name: chainOutput, Hook: &hook{"nat", "output", priorityDstNAT + 1}, Rules: unused},
		&Chain{Name: chainPostrouting, Hook: &hook{"nat", "postrouting", prioritySrcNAT}, Rules: post},
		rejectChain(),
	)
	g.ShardChains = append(g.ShardChains,
		&Chain{Name: chainPrerouting, Hook: &hook{"nat", "prerouting", priorityDstNAT}, Rules: dispatch},
		&Chain{Name: chainOutput, Hook: &hook{"nat", "output", priorityDstNAT}, Rules: dispatch},
		&Chain{Name: chainMarkMasq, Rules: []Rule{{setMark{masqueradeMark}}}},
		rejectChain(),
	)
	g.ShardChains = append(g.ShardChains, offClusterChains(state, g.Families)...)
	for _, f := range g.Families {
		g.Sets = append(g.Sets,
			Set{Name: clusterIPSet(f), Family: f, Kind: SetAddrs},
			Set{Name: hairpinSet(f), Family: f, Kind: SetAddrPairs})
		g.ShardSets = append(g.ShardSets, Set{Name: frontendMap(f), Family: f, Kind: SetFrontends})
	}
	// The shared-map layout (maps.go): its dispatch runs at dstnat like the
	// shards', while the refusal of unused ports waits at dstnat+1.
	var mapDispatch []Rule
	for _, f := range g.Families {
		s := shared(f)
		mapDispatch = append(mapDispatch, s.dispatchRule())
		g.Chains = append(g.Chains, s.chains(state.LocalDetect[f], use)...)
		g.Sets = append(g.Sets, s.sets...)
		g.Sets = append(g.Sets, s.classSets(use)...)
	}
	g.Chains = append(g.Chains,
		&Chain{Name: chainDispatchPrerouting, Hook: &hook{"nat", "prerouting", priorityDstNAT}, Rules: mapDispatch},
		&Chain{Name: chainDispatchOutput, Hook: &hook{"nat", "output", priorityDstNAT}, Rules: mapDispatch},
		&Chain{Name: chainMarkMasq, Rules: []Rule{{setMark{masqueradeMark}}}})
	g.Chains = append(g.Chains, offClusterChains(state, g.Families)...)
	if cfg.LocalhostNodePorts && slices.Contains(g.Families, v1.IPv4Protocol) {
		g.Chains = append(g.Chains, localnetGuard())
	}
	sort.Slice(g.Chains, func(i, j int) bool { return g.Chains[i].Name < g.Chains[j].Name })
	sort.Slice(g.ShardChains, func(i, j int) bool { return g.ShardChains[i].Name < g.ShardChains[j].Name })
	return g
}

// offClusterChains set the masquerade mark on packets from outside the
// cluster, per the family's local detection (none where it is off).
func offClusterChains(state *core.NodeState, families []v1.IPFamily) []*Chain {
	var out []*Chain
	for _, f := range families {
		det := state.LocalDetect[f]
		if det.Implemented() {
			rules := localSourceRules(f, det, Verdict{Kind: verdictReturn})
			rules = append(rules, Rule{setMark{masqueradeMark}})
			out = append(out, &Chain{Name: offClusterChain(f), Rules: rules})
		}
	}
	return out
}

// localnetGuard is the guard against CVE-2020-8558 that localhost NodePorts
// need: they set route_localnet, with which the kernel routes packets for
// 127.0.0.0/8 that arrive from other hosts instead of dropping them as
// martians, so a service bound to the node's loopback would answer the
// network. The chain drops such packets unless they belong to a connection
// already established or were DNATed (a NodePort crossproxy translated), as
// kube-proxy's iptables mode does in KUBE-FIREWALL ("block incoming localnet
// connections"). Loopback's own traffic is left alone.
func localnetGuard() *Chain {
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	return &Chain{Name: chainLocalnet, Hook: &hook{"filter", "input", priorityFilter}, Rules: []Rule{{
		matchIif{Name: "lo", Invert: true},
		matchAddr{Family: v1.IPv4Protocol, Prefix: loopback},
		matchAddr{Family: v1.IPv4Protocol, Source: true, Prefix: loopback, Invert: true},
		matchNewConn{},
		matchDNAT{Invert: true},
		Verdict{Kind: verdictDrop},
	}}}
}

// localSourceRules are rules that end in v for traffic the local-detection
// mode counts as coming from a pod of this cluster.
func localSourceRules(f v1.IPFamily, det core.FamilyLocalDetect, v Verdict) []Rule {
	var rules []Rule
	switch det.Mode {
	case core.LocalDetectClusterCIDR, core.LocalDetectNodeCIDR:
		for _, p := range det.CIDRs {
			if p.Addr().Is4() != (f == v1.IPv4Protocol) {
				continue
			}
			rules = append(rules, Rule{matchAddr{Family: f, Source: true, Prefix: p.Masked()}, v})
		}
	case core.LocalDetectBridgeInterface:
		rules = append(rules, Rule{matchIif{Name: det.Interface}, v})
	case core.LocalDetectInterfaceNamePrefix:
		rules = append(rules, Rule{matchIif{Name: det.Interface, Prefix: true}, v})
	}
	return rules
}

type portBuilder struct {
	p   *core.ServicePort
	det core.FamilyLocalDetect
	o   *portObjects
	aff map[string]bool
	// tally, when set, makes mapPort count the elements per set instead of
	// making them (tallyShared).
	tally map[string]int
}

// buildPort computes the objects of one Service port; cfg.Shards must be set
// and Inexpressible(p) must be "". It writes p's addresses as they are: the
// core guarantees they are valid, unmapped and of the port's family (see
// core.ServicePort), which the kernel needs to take the batch. The result
// depends only on *p, *detp and cfg, which is what lets the backend keep
// these three instead of the objects (applied.objects builds them again).
func buildPort(p *core.ServicePort, detp *core.FamilyLocalDetect, cfg Config, prev *portSlots) *portObjects {
	f := p.Key.Family
	det := *detp
	hash, shard := portHash(p.Key, cfg.Shards)
	b := &portBuilder{p: p, det: det, o: &portObjects{Key: p.Key, From: appliedPort{port: p, det: detp}, ClusterIP: p.ClusterIP, Shard: shard},
		aff: map[string]bool{}}
	if cfg.mapped(p) {
		b.o.Shard = -1
		b.mapPort(frontendTargets(p, cfg), prev)
		b.o.Endpoints = endpointAddrs(p)
		return b.o
	}
	suffix := portChainSuffix(p, hash)
	name := func(kind string) string { return kind + "-" + suffix }
	svc := name("svc")

	// Internal (ClusterIP) traffic.
	var rules []Rule
	switch {
	case p.Masquerade.All:
		rules = append(rules, Rule{Verdict{Kind: verdictJump, Chain: chainMarkMasq}})
	case p.Masquerade.OffClusterInternal && det.Implemented():
		rules = append(rules, Rule{Verdict{Kind: verdictJump, Chain: offClusterChain(f)}})
	}
	rules = append(rules, b.body(p.InternalEndpoints(), p.InternalEmpty)...)
	b.o.Chains = append(b.o.Chains, &Chain{Name: svc, Rules: rules})

	// External traffic (NodePort, ExternalIP, LoadBalancer).
	var ext, fw string
	hasExternal, hasLB := false, false
	for _, fe := range p.Frontends {
		hasExternal = hasExternal || fe.Kind.External()
		hasLB = hasLB || fe.Kind == core.FrontendLoadBalancer
	}
	if hasExternal {
		ext = name("ext")
		var er []Rule
		if !p.ExternalPolicyLocal {
			if p.Masquerade.External {
				er = append(er, Rule{Verdict{Kind: verdictJump, Chain: chainMarkMasq}})
			}
			if p.Masquerade.External && !p.InternalPolicyLocal {
				er = append(er, Rule{Verdict{Kind: verdictGoto, Chain: svc}})
			} else {
				er = append(er, b.body(p.ExternalEndpoints(), p.ExternalEmpty)...)
			}
		} else {
			// Local policy: traffic from pods and from the node itself may use
			// every endpoint; only traffic from outside keeps its source and
			// is limited to this node's endpoints.
			cluster := svc
			if p.InternalPolicyLocal {
				if len(p.ClusterEndpoints) > 0 {
					cluster = name("clu")
					b.o.Chains = append(b.o.Chains, &Chain{Name: cluster, Rules: b.body(p.ClusterEndpoints, core.VerdictReject)})
				} else {
					cluster = chainReject
				}
			}
			if det.Implemented() {
				er = append(er, localSourceRules(f, det, Verdict{Kind: verdictGoto, Chain: cluster})...)
			}
			er = append(er,
				Rule{matchLocalSource{}, Verdict{Kind: verdictJump, Chain: chainMarkMasq}},
				Rule{matchLocalSource{}, Verdict{Kind: verdictGoto, Chain: cluster}})
			er = append(er, b.body(p.LocalEndpoints, p.ExternalEmpty)...)
		}
		b.o.Chains = append(b.o.Chains, &Chain{Name: ext, Rules: er})
		if hasLB && len(p.SourceRanges) > 0 {
			fw = name("fw")
			var fr []Rule
			for _, r := range p.SourceRanges {
				fr = append(fr, Rule{matchAddr{Family: f, Source: true, Prefix: r.Masked()}, Verdict{Kind: verdictGoto, Chain: ext}})
			}
			fr = append(fr, Rule{Verdict{Kind: verdictDrop}})
			b.o.Chains = append(b.o.Chains, &Chain{Name: fw, Rules: fr})
		}
	}

	chains := [...]string{pathInternal: svc, pathExternal: ext, pathFirewall: fw}
	targets := frontendTargets(p, cfg)
	b.o.Frontends = make([]element, len(targets))
	for i, t := range targets {
		b.o.Frontends[i] = t.element
		b.o.Frontends[i].Chain = chains[t.path]
	}

	b.o.Endpoints = endpointAddrs(p)
	return b.o
}

// frontendPath is the path a frontend's packets take through a port's
// rules: the internal one (a ClusterIP's), the external one, or the external
// one behind the source-range check (a LoadBalancer IP with
// loadBalancerSourceRanges).
type frontendPath uint8

const (
	pathInternal frontendPath = iota
	pathExternal
	pathFirewall
)

// frontendTarget is one frontend of a port and the path its packets take.
type frontendTarget struct {
	element
	path frontendPath
}

// frontendTargets are p's frontends with their paths; with localhost
// NodePorts, the 127.0.0.1 NodePort too.
func frontendTargets(p *core.ServicePort, cfg Config) []frontendTarget {
	hasNodePort, hasLB := false, false
	for _, fe := range p.Frontends {
		hasLB = hasLB || fe.Kind == core.FrontendLoadBalancer
		hasNodePort = hasNodePort || fe.Kind == core.FrontendNodePort
	}
	out := make([]frontendTarget, 0, len(p.Frontends)+1)
	for _, fe := range p.Frontends {
		path := pathInternal
		switch {
		case fe.Kind == core.FrontendLoadBalancer && hasLB && len(p.SourceRanges) > 0:
			path = pathFirewall
		case fe.Kind.External():
			path = pathExternal
		}
		out = append(out, frontendTarget{element{Addr: fe.Addr, Proto: p.Protocol, Port: fe.Port, Comment: string(fe.Kind)}, path})
	}
	// The localhost frontend follows the core's NodePort frontends: a port
	// whose NodePort another Service claimed has none, and a second
	// 127.0.0.1 element of that port would make the kernel refuse the batch.
	if cfg.LocalhostNodePorts && p.Key.Family == v1.IPv4Protocol && hasNodePort {
		out = append(out, frontendTarget{element{Addr: netip.AddrFrom4([4]byte{127, 0, 0, 1}), Proto: p.Protocol,
			Port: p.NodePort, Comment: string(core.FrontendNodePort)}, pathExternal})
	}
	return out
}

// hairpinsAll reports whether every endpoint of p, remote ones included, may
// meet its own connection through p's rules. A hairpin connection (an
// endpoint reaching itself through its Service) needs its source
// masqueraded, or the endpoint would answer itself directly. A remote
// endpoint's own connections to a ClusterIP, ExternalIP or LoadBalancer IP
// are translated on its own node, and one to a NodePort of this node under
// the Cluster policy is masqueraded anyway (Masquerade.External); what is
// left is a NodePort under the Local policy, whose pod-originated connections
// take the cluster path unmasqueraded (with local detection by cluster CIDR,
// remote pods count as pods) and may draw the pod itself.
func hairpinsAll(p *core.ServicePort) bool { return p.ExternalPolicyLocal }

// mayHairpin reports whether ep may meet its own connections through any
// Service port's rules on this node: when it runs here, or when its slice
// does not say where it runs. With hairpinsAll false, only such endpoints
// need an element in the hairpin set: at 100k Services x 10 endpoints spread
// over the cluster's nodes, the set holds this node's pods instead of a
// million addresses (kube-proxy matches every endpoint's address in its
// endpoint chain, which costs it nothing more per rule).
func mayHairpin(ep core.Endpoint) bool { return ep.Local || ep.NodeName() == "" }

// endpointAddrs are the distinct addresses of p's cluster and local
// endpoints that may hairpin (hairpinsAll, mayHairpin), for the shared
// hairpin set.
func endpointAddrs(p *core.ServicePort) []netip.Addr {
	all := hairpinsAll(p)
	// Local endpoints are normally also cluster endpoints: count the
	// distinct addresses first so the slice the backend keeps is exact.
	seen := make(map[netip.Addr]bool, len(p.ClusterEndpoints)+len(p.LocalEndpoints))
	for _, set := range [][]core.Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
		for _, ep := range set {
			if all || mayHairpin(ep) {
				seen[ep.Addr] = true
			}
		}
	}
	out := make([]netip.Addr, 0, len(seen))
	for _, set := range [][]core.Endpoint{p.ClusterEndpoints, p.LocalEndpoints} {
		for _, ep := range set {
			if seen[ep.Addr] {
				delete(seen, ep.Addr)
				out = append(out, ep.Addr)
			}
		}
	}
	return out
}

// body spreads new connections over eps: optional affinity lookups, then a
// cascade "numgen random mod (n-k) == 0 → endpoint k" that picks each endpoint
// with probability 1/n and needs no per-Service map (maps bound to rules make
// the kernel's work grow with the square of the number of Services).
func (b *portBuilder) body(eps []core.Endpoint, empty core.Verdict) []Rule {
	f := b.p.Key.Family
	if len(eps) == 0 {
		if empty == core.VerdictDrop {
			return []Rule{{Verdict{Kind: verdictDrop}}}
		}
		return []Rule{{Verdict{Kind: verdictGoto, Chain: chainReject}}}
	}
	// One rule per endpoint (two with affinity), each sized exactly: at
	// 100,000 Services these rules are most of what the backend keeps.
	rules := make([]Rule, 0, len(eps))
	var sets []string
	if b.p.Affinity.ClientIP {
		rules = make([]Rule, 0, 2*len(eps))
		timeout := time.Duration(b.p.Affinity.TimeoutSeconds) * time.Second
		if timeout <= 0 {
			timeout = time.Duration(core.DefaultAffinityTimeoutSeconds) * time.Second
		}
		for _, ep := range eps {
			name := affinitySetName(b.p, ep, timeout)
			sets = append(sets, name)
			if !b.aff[name] {
				b.aff[name] = true
				b.o.AffinitySets = append(b.o.AffinitySets, Set{Name: name, Family: f, Kind: SetAffinity, Timeout: timeout})
			}
			rules = append(rules, Rule{matchAddrSet{Family: f, Source: true, Set: name}, updateAffinity{f, name}, DNAT{f, b.p.Protocol, ep.AddrPort()}})
		}
	}
	n := len(eps)
	for k, ep := range eps {
		size := 1
		if k < n-1 {
			size++
		}
		if sets != nil {
			size++
		}
		r := make(Rule, 0, size)
		if k < n-1 {
			r = append(r, matchRandom{uint32(n - k)})
		}
		if sets != nil {
			r = append(r, updateAffinity{f, sets[k]})
		}
		r = append(r, DNAT{f, b.p.Protocol, ep.AddrPort()})
		rules = append(rules, r)
	}
	return rules
}
