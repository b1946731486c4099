package nft

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// TestCheckDriftSeesForeignChanges: nothing after crossproxy's own full and
// partial batches, nothing for another tool's table, and every deleted or
// emptied table of crossproxy's named after a foreign delete or flush.
func TestCheckDriftSeesForeignChanges(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	st := testState(t)
	check := func(what string) []string {
		t.Helper()
		d, err := b.CheckDrift(ctx)
		if err != nil {
			t.Fatalf("%s: CheckDrift: %v", what, err)
		}
		return d
	}
	if d := check("before any sync"); d != nil {
		t.Errorf("before any sync: %v", d)
	}
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if d := check("after a full sync"); d != nil {
		t.Errorf("own full sync reported as drift: %v", d)
	}
	k := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[k]
	p.ClusterEndpoints = append(append([]core.Endpoint(nil), p.ClusterEndpoints...), ep("10.244.3.3", 8080, false))
	st.Ports[k] = &p
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}}); err != nil {
		t.Fatal(err)
	}
	if b.LastSync().Full {
		t.Fatal("expected a partial sync")
	}
	if d := check("after a partial sync"); d != nil {
		t.Errorf("own partial sync reported as drift: %v", d)
	}
	nftIn(t, ns, "add", "table", "inet", "firewall")
	nftIn(t, ns, "add", "chain", "inet", "firewall", "input", "{ type filter hook input priority 0; }")
	if d := check("after another tool's table"); d != nil {
		t.Errorf("another tool's table reported as drift: %v", d)
	}
	// A chain of crossproxy's deleted: the table's object count drops.
	tables := b.census
	var victim string
	for name := range tables {
		victim = name
	}
	listing := nftIn(t, ns, "list", "table", "inet", victim)
	chain := ""
	for _, line := range strings.Split(listing, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "chain" && f[2] == "{" && !strings.Contains(listing, "jump "+f[1]) && !strings.Contains(listing, "goto "+f[1]) && !strings.Contains(listing, ": "+f[1]) {
			chain = f[1]
		}
	}
	if chain == "" {
		t.Fatalf("no chain without references in table %s:\n%s", victim, listing)
	}
	{
		nftIn(t, ns, "flush", "chain", "inet", victim, chain)
		nftIn(t, ns, "delete", "chain", "inet", victim, chain)
		if d := check("after a chain deleted"); len(d) != 1 || !strings.Contains(d[0], "table inet "+victim+" holds") {
			t.Errorf("chain %s deleted from %s: got %q", chain, victim, d)
		}
		if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
	}
	nftIn(t, ns, "delete", "table", "inet", victim)
	if d := check("after a table deleted"); len(d) != 1 || d[0] != "table inet "+victim+" deleted" {
		t.Errorf("table %s deleted: got %q", victim, d)
	}
	nftIn(t, ns, "flush", "ruleset")
	if d := check("after a flush"); len(d) != len(tables) {
		t.Errorf("flush ruleset: want all %d tables named, got %q", len(tables), d)
	}
	// The repairing full sync makes the check quiet again.
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if d := check("after the repair"); d != nil {
		t.Errorf("after the repair: %v", d)
	}
}

// TestWatchDriftReportsForeignChangesOnly: crossproxy's own full and partial
// batches raise nothing; a foreign flush of one of its chains is reported
// once, naming what changed and who did it; another tool's tables are not
// crossproxy's business.
func TestWatchDriftReportsForeignChangesOnly(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	reports := watchReports(t, b)
	// The watcher subscribes asynchronously: wait until a foreign change
	// to another table is surely past it (it must not be reported either).
	st := testState(t)
	for i := 0; i < 3; i++ {
		if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
	}
	k := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[k]
	p.ClusterEndpoints = p.ClusterEndpoints[:1]
	st.Ports[k] = &p
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}}); err != nil {
		t.Fatal(err)
	}
	nftIn(t, ns, "add", "table", "inet", "firewall")
	time.Sleep(300 * time.Millisecond)
	if r := reports(); len(r) != 0 {
		t.Fatalf("own batches or another table reported: %q", r)
	}
	nftIn(t, ns, "flush", "chain", "inet", b.cfg.table(), "nat-prerouting")
	deadline := time.Now().Add(5 * time.Second)
	for len(reports()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := reports()
	if len(r) != 1 || !strings.Contains(r[0], "table inet "+b.cfg.table()+": ") || !strings.Contains(r[0], " by nft (pid ") {
		t.Errorf("foreign chain flush: got %q", r)
	}
}

// TestMutedFullSyncStillSeesForeignObjects: a full sync mutes the watcher
// (the kernel then writes no notification for its batch); a chain another
// tool adds to crossproxy's table meanwhile survives the sync's flush, and
// the check after the sync names it, once; the repairing full sync deletes
// it. A full sync nobody interferes with leaves nothing to report.
func TestMutedFullSyncStillSeesForeignObjects(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	t.Cleanup(func() { _ = b.Close() })
	reports := watchReports(t, b)
	time.Sleep(100 * time.Millisecond)
	st := testState(t)
	for i := 0; i < 2; i++ {
		if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := b.CheckDrift(context.Background()); err != nil || d != nil {
		t.Fatalf("undisturbed full syncs: %q %v", d, err)
	}
	table := b.cfg.table()
	b.mutedHook = func() { nftIn(t, ns, "add", "chain", "inet", table, "intruder") }
	// A full sync that rewrites everything (as one after a foreign commit
	// does; with nothing changed and nobody else committing, it would be a
	// diff of no command, and mute nothing).
	b.ownGen = 0
	if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	b.mutedHook = nil
	if !strings.Contains(nftIn(t, ns, "list", "table", "inet", table), "chain intruder") {
		t.Fatal("the foreign chain did not survive the full sync; the test proves nothing")
	}
	d, err := b.CheckDrift(context.Background())
	if err != nil || len(d) != 1 || !strings.Contains(d[0], "table inet "+table+" holds") {
		t.Fatalf("foreign chain added during a muted full sync: got %q %v", d, err)
	}
	if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nftIn(t, ns, "list", "table", "inet", table), "chain intruder") {
		t.Error("the repairing full sync left the foreign chain")
	}
	if d, err := b.CheckDrift(context.Background()); err != nil || d != nil {
		t.Errorf("after the repair: %q %v", d, err)
	}
	time.Sleep(200 * time.Millisecond)
	if r := reports(); len(r) != 0 {
		t.Errorf("the watcher reported during muted full syncs: %q", r)
	}
}

// watchReports runs the backend's drift watcher until the test ends and
// returns what it has reported so far.
func watchReports(t *testing.T, b *Backend) func() []string {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []string
	done := make(chan error, 1)
	go func() {
		done <- b.WatchDrift(ctx, func(what string) {
			mu.Lock()
			seen = append(seen, what)
			mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchDrift: %v", err)
		}
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestOtherProxiesFindsKubeProxy: nothing in an empty namespace or beside
// crossproxy's own tables and an unrelated nat table; kube-proxy's nftables
// tables and its iptables-nft KUBE-SERVICES chain each named; nothing once
// they are gone.
func TestOtherProxiesFindsKubeProxy(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	look := func() []platform.OtherProxy {
		t.Helper()
		o, err := b.OtherProxies(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if err := b.Sync(ctx, testState(t), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	nftIn(t, ns, "add", "table", "ip", "nat")
	nftIn(t, ns, "add", "chain", "ip", "nat", "POSTROUTING", "{ type nat hook postrouting priority 100; }")
	if o := look(); o != nil {
		t.Fatalf("no other proxy yet, got %v", o)
	}
	nftIn(t, ns, "add", "table", "ip", "kube-proxy")
	nftIn(t, ns, "add", "table", "ip6", "kube-proxy")
	nftIn(t, ns, "add", "chain", "ip", "nat", "KUBE-SERVICES")
	o := look()
	want := "kube-proxy (nftables table ip kube-proxy, nftables table ip6 kube-proxy, iptables chain KUBE-SERVICES in table nat)"
	if len(o) != 1 || o[0].String() != want {
		t.Fatalf("got %v, want [%s]", o, want)
	}
	nftIn(t, ns, "delete", "table", "ip", "kube-proxy")
	nftIn(t, ns, "delete", "table", "ip6", "kube-proxy")
	nftIn(t, ns, "delete", "chain", "ip", "nat", "KUBE-SERVICES")
	if o := look(); o != nil {
		t.Fatalf("kube-proxy gone, got %v", o)
	}
}

func TestDescribeForeignGroupsByTable(t *testing.T) {
	pending := map[foreignChange]int{
		{table: "crossproxy", object: "table", what: "deleted"}:       1,
		{table: "crossproxy", object: "chain", what: "deleted"}:       4,
		{table: "crossproxy-0", object: "rule", what: "deleted"}:      2,
		{table: "crossproxy-0", object: "set element", what: "added"}: 1,
	}
	want := "table inet crossproxy deleted; table inet crossproxy-0: 1 set element added, 2 rules deleted"
	if got := describeForeign(pending, nil); got != want {
		t.Errorf("describeForeign:\n got %q\nwant %q", got, want)
	}
}
