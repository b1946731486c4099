package nft

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/golden"
	"github.com/crossproxy/crossproxy/internal/teststate"
)

// These tests run the Backend's sync, diff, drift and repair logic against
// the in-memory nftables (memnft.go): no root, no kernel. What only the
// kernel can show (packets, its own validation, notifications) stays in the
// root tests; TestModelAgreesWithTheKernel holds the model to the kernel.

// newMemBackend is a Backend whose kernel is a fresh in-memory nftables.
func newMemBackend(t testing.TB, cfg Config) (*Backend, *memKernel) {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	m := newMemKernel()
	b := &Backend{
		log:       log,
		cfg:       cfg,
		k:         m,
		sysctl:    &fakeSysctl{vals: map[string]string{}},
		conntrack: &fakeConntrack{},
		probed:    true, // the probe asks the kernel itself (probe_linux.go)
	}
	t.Cleanup(func() { b.closed.Store(true) })
	return b, m
}

func memSync(t testing.TB, b *Backend, st *core.NodeState, ch core.Changes) {
	t.Helper()
	if err := b.Sync(context.Background(), st, ch); err != nil {
		t.Fatalf("sync (full %v, %d ports): %v", ch.Full, len(ch.Ports), err)
	}
}

// canonicalDump is the model's dump of crossproxy's tables with each endpoint-map frontend's
// endpoints in the order of their addresses instead of their slots: a
// partial sync keeps every endpoint in its slot while a full sync numbers
// them afresh, and the two are the same rules for every packet. It fails
// when a frontend's slots are not exactly 0..N-1, which the draw relies on
// (maps.go).
func canonicalDump(m *memKernel, main string) (string, error) {
	c := m.clone()
	for tn := range c.tables {
		if !ownTable(main, tn) {
			delete(c.tables, tn)
		}
	}
	for tn, t := range c.tables {
		for sn, s := range t.sets {
			if s.decl.Kind != SetEndpoints {
				continue
			}
			byFront := map[string][]element{}
			for _, e := range s.elems {
				f := memKey(SetKeys, e)
				byFront[f] = append(byFront[f], e)
			}
			s.elems = map[string]element{}
			for f, es := range byFront {
				sort.Slice(es, func(i, j int) bool { return es[i].Slot < es[j].Slot })
				for i, e := range es {
					if e.Slot != uint32(i) {
						return "", fmt.Errorf("table %s map %s: frontend %s has slots %v, not 0..%d", tn, sn, f, slotsOf(es), len(es)-1)
					}
				}
				sort.Slice(es, func(i, j int) bool { return es[i].To.Compare(es[j].To) < 0 })
				for i := range es {
					es[i].Slot = uint32(i)
					s.elems[memKey(SetEndpoints, es[i])] = es[i]
				}
			}
		}
	}
	return c.Dump(), nil
}

func slotsOf(es []element) []uint32 {
	out := make([]uint32, len(es))
	for i, e := range es {
		out[i] = e.Slot
	}
	return out
}

// TestMemSyncFullPartialAndRepair is TestBackendFullAndPartialSync's sync
// logic without a kernel: a full sync, a partial one that adds an endpoint
// and removes a Service with commands for just those, the result equal to a
// full sync of the new state, and a flushed ruleset that fails the next
// partial sync and is repaired by the full one after it.
func TestMemSyncFullPartialAndRepair(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	st := testState(t)
	memSync(t, b, st, core.Changes{Full: true})
	got := m.Dump()
	for _, want := range []string{"10.96.0.10 . tcp . 80 . 0x00000000 : 10.244.1.5 . 8080", "10.96.0.53 . udp . 53"} {
		if !strings.Contains(got, want) {
			t.Errorf("model lacks %q:\n%s", want, got)
		}
	}

	k := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[k]
	// 10.244.1.5 replaced by 10.244.3.3: the count, and with it the
	// class, stays (TestMemClassesComeAndGo has the changes of class).
	p.ClusterEndpoints = append([]core.Endpoint{ep("10.244.3.3", 8080, false)}, p.ClusterEndpoints[1:]...)
	st.Ports[k] = &p
	gone := key("default", "empty", "", "TCP", "IPv4")
	delete(st.Ports, gone)
	before := m.commands
	memSync(t, b, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}, gone: {}}})
	s := b.LastSync()
	if s.Full || s.Commands == 0 || m.commands-before != s.Commands {
		t.Fatalf("want a partial sync whose commands reach the kernel, got %+v (%d commands applied)", s, m.commands-before)
	}
	// A replaced endpoint and a removed Service are a few element
	// commands, far fewer than the full sync's.
	if s.Commands > 12 {
		t.Errorf("partial sync sent %d commands for one endpoint replaced and one port removed", s.Commands)
	}
	got = m.Dump()
	if !strings.Contains(got, "10.96.0.10 . tcp . 80 . 0x00000000 : 10.244.3.3 . 8080") || !strings.Contains(got, "10.244.3.3 . 10.244.3.3") {
		t.Errorf("partial sync not applied:\n%s", got)
	}
	if strings.Contains(got, "default/empty") || strings.Contains(got, "10.96.0.30") {
		t.Errorf("removed port still present:\n%s", got)
	}
	assertSameAsFull(t, m, st, b.cfg)

	// nft flush ruleset behind crossproxy's back: a partial sync cannot
	// delete what is gone, and the sync after the failure is full.
	m.flushRuleset()
	p2 := *st.Ports[k]
	p2.ClusterEndpoints = p2.ClusterEndpoints[:1]
	st.Ports[k] = &p2
	err := b.Sync(context.Background(), st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}})
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("partial sync into a flushed ruleset: %v, want ENOENT", err)
	}
	memSync(t, b, st, core.Changes{})
	if !b.LastSync().Full {
		t.Errorf("sync after a failure should be full: %+v", b.LastSync())
	}
	assertSameAsFull(t, m, st, b.cfg)

	if err := b.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if d := m.Dump(); d != "" {
		t.Errorf("cleanup left:\n%s", d)
	}
}

// assertSameAsFull compares the model with a fresh model's full sync of st.
func assertSameAsFull(t testing.TB, m *memKernel, st *core.NodeState, cfg Config) {
	t.Helper()
	fresh, fm := newMemBackend(t, cfg)
	memSync(t, fresh, st, core.Changes{Full: true})
	got, err := canonicalDump(m, cfg.table())
	if err != nil {
		t.Fatal(err)
	}
	want, err := canonicalDump(fm, cfg.table())
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("incremental state differs from a full sync of the same NodeState:\n%s", golden.LineDiff(want, got))
	}
}

// TestMemStaleUDPClearedOnlyAfterASuccessfulSync: conntrack entries of a removed
// UDP endpoint are not cleared by a sync that failed (the old rules may still
// send to the endpoint) and are cleared by the next one, to which the caller
// (the Runner: TestRunnerRetriesFailureWithFullSync) passes them again.
func TestMemStaleUDPClearedOnlyAfterASuccessfulSync(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	ct := &fakeConntrack{}
	b.conntrack = ct
	ctx := context.Background()
	st := testState(t)
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	dns := key("default", "dns", "dns", "UDP", "IPv4")
	p := *st.Ports[dns]
	gone := p.ClusterEndpoints[0]
	p.ClusterEndpoints = nil
	st.Ports[dns] = &p
	stale := core.StaleEndpoint{Key: dns, Frontends: p.Frontends, Endpoint: gone.AddrPort()}
	m.flushRuleset()
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{dns: {}}, StaleUDP: []core.StaleEndpoint{stale}}); err == nil {
		t.Fatal("partial sync into a flushed ruleset should fail")
	}
	if len(ct.cleared) != 0 {
		t.Fatal("conntrack cleared while the old rules may still send to the endpoint")
	}
	if err := b.Sync(ctx, st, core.Changes{Full: true, StaleUDP: []core.StaleEndpoint{stale}}); err != nil {
		t.Fatal(err)
	}
	if len(ct.cleared) != 1 || ct.cleared[0].Endpoint != gone.AddrPort() {
		t.Errorf("stale endpoint not cleared after the repairing sync: %+v", ct.cleared)
	}
}

// TestMemInexpressiblePortIsSkipped: a Service port nftables cannot hold (a
// chain name over the kernel's 255 bytes, from a manifest no API server
// validated; a protocol the encoder has no number for) is left out with a
// reason, in full and partial syncs, and every other Service is programmed.
func TestMemInexpressiblePortIsSkipped(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	ctx := context.Background()
	st := testState(t)
	web := *st.Ports[key("default", "web", "http", "TCP", "IPv4")]
	long := web
	long.Key = key("default", strings.Repeat("n", 250), "http", "TCP", "IPv4")
	long.ClusterIP = netip.MustParseAddr("10.96.0.77")
	long.Frontends = []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.77", 80)}
	st.Ports[long.Key] = &long
	icmp := web
	icmp.Key = key("default", "icmp", "ping", "ICMP", "IPv4")
	icmp.Protocol = "ICMP"
	icmp.Frontends = []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.10", 80)}
	st.Ports[icmp.Key] = &icmp
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatalf("full sync with one inexpressible port: %v", err)
	}
	if got := m.Dump(); !strings.Contains(got, "10.96.0.53 . udp . 53") || strings.Contains(got, "10.96.0.77") {
		t.Errorf("want every other port and not the skipped one:\n%s", got)
	}
	if got := b.LastSync().Skipped; len(got) != 2 {
		t.Errorf("skipped ports not reported: %+v", got)
	}
	// A partial sync of a changed good port together with a bad one.
	dns := key("default", "dns", "dns", "UDP", "IPv4")
	d := *st.Ports[dns]
	d.ClusterEndpoints = []core.Endpoint{ep("10.244.1.99", 53, false)}
	st.Ports[dns] = &d
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{dns: {}, long.Key: {}, icmp.Key: {}}}); err != nil {
		t.Fatalf("partial sync with inexpressible ports: %v", err)
	}
	if got := m.Dump(); !strings.Contains(got, "10.244.1.99") {
		t.Errorf("good port not updated:\n%s", got)
	}
}

// TestMemLocalhostNodePortFollowsCoreClaims: when two Services ask for one
// NodePort, the core gives the node addresses to one of them; the other must
// not get a 127.0.0.1 NodePort frontend of its own, or the frontend map holds
// one key twice and the kernel refuses every batch.
func TestMemLocalhostNodePortFollowsCoreClaims(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	st := testState(t)
	web := st.Ports[key("default", "web", "http", "TCP", "IPv4")]
	loser := *web
	loser.Key = key("other", "web", "http", "TCP", "IPv4")
	loser.ClusterIP = netip.MustParseAddr("10.96.0.88")
	// The core dropped the NodePort frontend (claimed by default/web); the
	// ExternalIP frontend stays.
	loser.Frontends = []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.88", 80), fe(core.FrontendExternalIP, "203.0.113.8", 80)}
	st.Ports[loser.Key] = &loser
	if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
		t.Fatalf("full sync: %v", err)
	}
	got := m.Dump()
	if n := strings.Count(got, "127.0.0.1 . tcp . 30080 comment"); n != 1 {
		t.Errorf("want one localhost NodePort frontend, found %d:\n%s", n, got)
	}
}

// TestMemPartialSyncMovesFrontendBetweenServices: an ExternalIP that passes from
// one Service to another (in other shard tables) moves in one partial batch:
// the old element goes before the new one is added, and the ruleset then
// equals a full sync of the same state.
func TestMemPartialSyncMovesFrontendBetweenServices(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	b.cfg.Shards = 8
	ctx := context.Background()
	st := testState(t)
	webKey := key("default", "web", "http", "TCP", "IPv4")
	lbKey := key("shop", "lb", "", "TCP", "IPv4")
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if b.applied.objects(webKey).Shard == b.applied.objects(lbKey).Shard {
		t.Fatalf("want the two Services in different shards for this test")
	}
	web, lb := *st.Ports[webKey], *st.Ports[lbKey]
	moved := fe(core.FrontendExternalIP, "203.0.113.7", 80)
	web.Frontends = web.Frontends[:2]
	lb.Port = 80
	lb.Frontends = append(append([]core.Frontend(nil), lb.Frontends...), moved)
	st.Ports[webKey], st.Ports[lbKey] = &web, &lb
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{webKey: {}, lbKey: {}}}); err != nil {
		t.Fatalf("partial sync moving a frontend: %v", err)
	}
	partial := m.Dump()
	if n := strings.Count(partial, "203.0.113.7 . tcp . 80"); n != 1 {
		t.Errorf("moved frontend found %d times:\n%s", n, partial)
	}
	assertSameAsFull(t, m, st, b.cfg)
}

// TestMemFailedBatchChangesNothing: a partial batch the kernel refuses
// halfway (an element it deletes was removed by someone else) leaves every
// object as it was, names the command, and the next sync is a full one that
// puts everything right.
func TestMemFailedBatchChangesNothing(t *testing.T) {
	b, m := newMemBackend(t, Config{})
	st := testState(t)
	memSync(t, b, st, core.Changes{Full: true})
	k := key("default", "web", "http", "TCP", "IPv4")
	// Someone deletes the slot-1 endpoint element of 10.96.0.10:80.
	var victim element
	var set Set
	for _, s := range m.tables["crossproxy"].sets {
		for _, e := range s.elems {
			if s.decl.Kind == SetEndpoints && e.Addr == netip.MustParseAddr("10.96.0.10") && e.Slot == 1 {
				victim, set = e, s.decl
			}
		}
	}
	if !victim.Addr.IsValid() {
		t.Fatalf("no slot-1 endpoint of 10.96.0.10 in:\n%s", m.Dump())
	}
	if err := m.foreign(delElementsOp{Table: "crossproxy", Set: set, Elements: []element{victim}}); err != nil {
		t.Fatal(err)
	}
	before := m.Dump()
	// The endpoint in slot 1 goes away: the partial sync deletes its element.
	p := *st.Ports[k]
	p.ClusterEndpoints = p.ClusterEndpoints[:1]
	p.LocalEndpoints = nil
	st.Ports[k] = &p
	err := b.Sync(context.Background(), st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}})
	var be *batchError
	if !errors.As(err, &be) || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "delete") {
		t.Fatalf("want the refused delete named, got %v", err)
	}
	if after := m.Dump(); after != before {
		t.Fatalf("a refused batch changed the model:\n%s", golden.LineDiff(before, after))
	}
	memSync(t, b, st, core.Changes{})
	if !b.LastSync().Full {
		t.Fatalf("the sync after a refused batch must be full: %+v", b.LastSync())
	}
	assertSameAsFull(t, m, st, b.cfg)
}

// TestMemCheckDrift: CheckDrift stays silent when nobody else committed, or
// when others committed to tables of their own, and names what changed when
// crossproxy's tables lost objects; the full sync it leads to repairs them.
func TestMemCheckDrift(t *testing.T) {
	b, m := newMemBackend(t, Config{})
	ctx := context.Background()
	st := testState(t)
	memSync(t, b, st, core.Changes{Full: true})
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("no commit since the sync: drift %v, %v", d, err)
	}
	// firewalld's table, committed by someone else.
	if err := m.foreign(addTableOp{Table: "firewalld"}); err != nil {
		t.Fatal(err)
	}
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("a foreign table is not drift: %v, %v", d, err)
	}
	gen := m.gen
	if d, _ := b.CheckDrift(ctx); d != nil || b.gen != gen {
		t.Fatalf("the foreign generation should be remembered: %v, %d vs %d", d, b.gen, gen)
	}
	// A shard chain deleted (with its rules) by someone else.
	var shard, chain string
	for tn, tb := range m.tables {
		if tn == "crossproxy" || tn == "firewalld" {
			continue
		}
		for cn, c := range tb.chains {
			if c.hook == nil && !tb.chainInUse(cn) {
				shard, chain = tn, cn
			}
		}
	}
	if chain == "" {
		t.Fatalf("no unreferenced shard chain in:\n%s", m.Dump())
	}
	if err := m.foreign(delChainOp{Table: shard, Chain: &Chain{Name: chain}}); err != nil {
		t.Fatal(err)
	}
	d, err := b.CheckDrift(ctx)
	if err != nil || len(d) == 0 || !strings.Contains(strings.Join(d, " "), shard) {
		t.Fatalf("a deleted chain of %s should be drift: %v, %v", shard, d, err)
	}
	memSync(t, b, st, core.Changes{Full: true})
	assertSameAsFull(t, m, st, b.cfg)
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("after the repair: %v, %v", d, err)
	}
}

// TestMemPartialSyncsEqualFullSync drives random sequences of cluster
// changes through the core's Tracker and the Backend's partial syncs, as
// the runner does, and checks after every step that the model holds exactly
// what a full sync of the same NodeState writes into an empty one (endpoint
// slots compared as sets, and checked to be 0..N-1). Every few steps a full
// sync over the existing rules comes between, as the periodic sync does.
func TestMemPartialSyncsEqualFullSync(t *testing.T) {
	seeds, steps := 5, 30
	if testing.Short() {
		seeds, steps = 3, 20
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			c := teststate.NewCluster(t, int64(seed), teststate.FlannelDualStack())
			b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
			st, ch := c.Snapshot()
			memSync(t, b, st, ch)
			partial := 0
			for i := 0; i < steps; i++ {
				c.Step()
				if i%13 == 12 {
					c.ForceFull()
				}
				st, ch = c.Snapshot()
				memSync(t, b, st, ch)
				if !b.LastSync().Full {
					partial++
				}
				assertSameAsFull(t, m, st, b.cfg)
				// The census a partial sync derives from its batch is
				// the one the kernel reports.
				if census, _ := m.census(b.cfg.table()); !reflect.DeepEqual(census, b.census) {
					t.Fatalf("step %d: census %v, the kernel's %v", i, b.census, census)
				}
				// The element counts that decide when a set must be
				// declared anew are the kernel's, and no set holds more
				// than its size (else the model would have refused).
				for name, set := range m.tables[b.cfg.table()].sets {
					if n := b.applied.elems[name]; n != len(set.elems) {
						t.Fatalf("step %d: the backend counts %d elements in %s, the kernel holds %d", i, n, name, len(set.elems))
					}
					if set.decl.Size != b.applied.sizes[name] {
						t.Fatalf("step %d: %s declared with size %d, the backend remembers %d", i, name, set.decl.Size, b.applied.sizes[name])
					}
				}
			}
			if partial < steps/2 {
				t.Errorf("only %d of %d steps were partial syncs", partial, steps)
			}
		})
	}
}

// TestMemPeriodicFullSyncIsADiff: a full sync when nobody else has committed
// since crossproxy's last batch sends only what changed: nothing when
// nothing did, an endpoint's elements when one moved; and the result is a
// full sync's. Once someone else commits anything, even a change the
// census cannot see (a chain of crossproxy's flushed, which CheckDrift
// lets pass), the full sync rewrites everything and repairs it.
func TestMemPeriodicFullSyncIsADiff(t *testing.T) {
	b, m := newMemBackend(t, Config{LocalhostNodePorts: true})
	ctx := context.Background()
	st := testState(t)
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); !s.Full || s.AsDiff {
		t.Fatalf("the first sync must be a real full sync: %+v", s)
	}
	commits := m.commits
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); !s.Full || !s.AsDiff || s.Commands != 0 || m.commits != commits {
		t.Fatalf("a full sync with nothing changed sent %d commands in %d commits: %+v", s.Commands, m.commits-commits, s)
	}

	k := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[k]
	p.ClusterEndpoints = append([]core.Endpoint{ep("10.244.3.3", 8080, false)}, p.ClusterEndpoints[1:]...) // one endpoint moved
	st.Ports[k] = &p
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); !s.AsDiff || s.Commands == 0 || s.Commands > 8 {
		t.Fatalf("a full sync after one endpoint moved: %+v", s)
	}
	assertSameAsFull(t, m, st, b.cfg)

	// A foreign commit that moves no object count: the rules of one of
	// crossproxy's chains flushed. CheckDrift cannot tell (and remembers
	// the generation); the next full sync still rewrites everything.
	var shard, chain string
	for tn, tb := range m.tables {
		for cn, c := range tb.chains {
			if tn != "crossproxy" && c.hook == nil && len(c.rules) > 0 {
				shard, chain = tn, cn
			}
		}
	}
	if chain == "" {
		t.Fatalf("no shard chain with rules in:\n%s", m.Dump())
	}
	if err := m.foreign(flushChainOp{Table: shard, Chain: &Chain{Name: chain}}); err != nil {
		t.Fatal(err)
	}
	if d, err := b.CheckDrift(ctx); err != nil || d != nil {
		t.Fatalf("a flushed chain moves no count: drift %v, %v", d, err)
	}
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); !s.Full || s.AsDiff {
		t.Fatalf("after a foreign commit the full sync must rewrite everything: %+v", s)
	}
	assertSameAsFull(t, m, st, b.cfg)

	// Someone commits while a full sync is under way (before its batch
	// goes out): the tables then hold what crossproxy did not write, and
	// the next full sync is no diff.
	b.ownGen = 0 // a full sync that rewrites everything
	b.mutedHook = func() {
		if err := m.foreign(addChainOp{Table: "crossproxy", Chain: &Chain{Name: "intruder"}}); err != nil {
			t.Fatal(err)
		}
	}
	memSync(t, b, st, core.Changes{Full: true})
	b.mutedHook = nil
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); s.AsDiff {
		t.Fatalf("a full sync after a commit during the last one must rewrite everything: %+v", s)
	}
	if strings.Contains(m.Dump(), "intruder") {
		t.Fatalf("the foreign chain survived the rewrite:\n%s", m.Dump())
	}

	// A layout change (a new shard count) is a real full sync too.
	b.cfg.Shards = 3
	memSync(t, b, st, core.Changes{Full: true})
	if s := b.LastSync(); s.AsDiff {
		t.Fatalf("a new shard count must rewrite the tables: %+v", s)
	}
	assertSameAsFull(t, m, st, b.cfg)
}

// TestMemPartialSyncThatOutgrowsASetIsAFullSync adds Services one partial
// sync at a time to a node whose sets a full sync declared with room for
// half as many elements again (at least minSetSize): every sync stays
// partial until one would put an element beyond a set's declared size,
// which the kernel would refuse; that one is sent as a full sync, which
// declares the sets anew with room to grow, and the syncs after it are
// partial again.
func TestMemPartialSyncThatOutgrowsASetIsAFullSync(t *testing.T) {
	b, m := newMemBackend(t, Config{})
	all := scaleStateN(2*minSetSize, 1)
	keys := make([]core.PortKey, 0, len(all.Ports))
	for k := range all.Ports {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, core.PortKey.Compare)
	st := *all
	st.Ports = map[core.PortKey]*core.ServicePort{}
	const start = 300
	for _, k := range keys[:start] {
		st.Ports[k] = all.Ports[k]
	}
	memSync(t, b, &st, core.Changes{Full: true})
	frontends := shared(v1.IPv4Protocol).endpoints[pathMain][0].Name // one endpoint each: class 1
	size := func() uint32 { return m.tables["crossproxy"].sets[frontends].decl.Size }
	if got := size(); got != minSetSize {
		t.Fatalf("%s holding %d elements was declared with size %d, want %d", frontends, start, got, minSetSize)
	}
	fulls, declared := 0, size()
	for i, k := range keys[start:] {
		st.Ports[k] = all.Ports[k]
		memSync(t, b, &st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}})
		n := start + i + 1
		s := b.LastSync()
		switch {
		case n > int(declared) && (!s.Full || s.AsDiff):
			t.Fatalf("Service %d would put the %dth element into %s (size %d): want a full sync, got %+v", n, n, frontends, declared, s)
		case n <= int(declared) && s.Full:
			t.Fatalf("Service %d: %s has room (size %d): want a partial sync, got a full one", n, frontends, declared)
		}
		if s.Full {
			fulls++
			if declared = size(); declared != setSize(n) {
				t.Fatalf("after the resizing full sync %s has size %d, want %d", frontends, declared, setSize(n))
			}
		}
	}
	if fulls != 2 { // at 513 (size 512) and at 770 (size 769)
		t.Fatalf("%d full syncs, want 2", fulls)
	}
	assertSameAsFull(t, m, &st, b.cfg)
}

// TestMemClassesComeAndGo: a pick class exists only while a frontend is in
// it. Three Services with one endpoint each have class 1 alone; a second
// endpoint for one of them brings class 2's set, map and draw chain in the
// same partial batch as its elements, and taking it away again deletes
// them; after each step the tables are a full sync's, and a periodic full
// sync after the changes of class is still a diff that sends nothing.
func TestMemClassesComeAndGo(t *testing.T) {
	b, m := newMemBackend(t, Config{})
	st := scaleStateN(3, 1)
	memSync(t, b, st, core.Changes{Full: true})
	s := shared(v1.IPv4Protocol)
	has := func(c int) bool {
		tb := m.tables["crossproxy"]
		ch, set, emap := tb.chains[s.pickClass[pathMain][c]], tb.sets[s.classes[pathMain][c].Name], tb.sets[s.endpoints[pathMain][c].Name]
		if (ch == nil) != (set == nil) || (set == nil) != (emap == nil) {
			t.Fatalf("class %d half there: chain %v, set %v, map %v", 1<<c, ch != nil, set != nil, emap != nil)
		}
		return ch != nil
	}
	for c := 0; c <= pickClassBits; c++ {
		if has(c) != (c == 0) {
			t.Fatalf("after the full sync of three one-endpoint Services class %d exists: %v", 1<<c, has(c))
		}
	}
	if n := strings.Count(m.Dump(), "numgen random"); n != 1 {
		t.Fatalf("%d draw rules for class 1 alone, want 1", n)
	}

	var k core.PortKey
	for k = range st.Ports {
		break
	}
	one := st.Ports[k]
	two := *one
	two.ClusterEndpoints = append(slices.Clone(one.ClusterEndpoints), ep("10.255.0.9", 8080, false))
	st.Ports[k] = &two
	memSync(t, b, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}})
	if sy := b.LastSync(); sy.Full || !has(1) || !has(0) {
		t.Fatalf("a second endpoint: class 2 %v, class 1 %v, %+v", has(1), has(0), sy)
	}
	if n := b.LastSync().Commands; n > 3+pickAttempts+1+1+4+8 {
		t.Errorf("bringing class 2 in sent %d commands", n)
	}
	assertSameAsFull(t, m, st, b.cfg)

	st.Ports[k] = one
	memSync(t, b, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}})
	if sy := b.LastSync(); sy.Full || has(1) || !has(0) {
		t.Fatalf("the second endpoint gone: class 2 %v, class 1 %v, %+v", has(1), has(0), sy)
	}
	assertSameAsFull(t, m, st, b.cfg)

	commits := m.commits
	memSync(t, b, st, core.Changes{Full: true})
	if sy := b.LastSync(); !sy.AsDiff || sy.Commands != 0 || m.commits != commits {
		t.Fatalf("a periodic full sync after the changes of class: %+v", sy)
	}
}
