package nft

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/golden"
)

func TestPlanFullGolden(t *testing.T) {
	rs := build(testState(t), Config{})
	var aff string
	for _, p := range rs.Ports {
		if len(p.AffinitySets) > 0 {
			aff = p.AffinitySets[0].Name
		}
	}
	// A stale chain and set from an earlier state, and the kept affinity set.
	b := planRuleset(rs, map[string]inventory{
		"crossproxy":   {Chains: []string{"nat-prerouting"}, Sets: []string{"cluster-ips-v4"}},
		"crossproxy-0": {Chains: []string{"svc-OLD-default/gone/tcp/p80", "nat-prerouting"}, Sets: []string{"frontends-v4", "aff-OLD", aff}},
		"crossproxy-7": {}, // a shard from a time with more Services
	}, false)
	golden.Check(t, filepath.Join("testdata", "plan-full.txt"), b.Text())
	if !strings.Contains(b.Text(), "delete table inet crossproxy-7\n") {
		t.Error("a shard no longer used must be deleted")
	}
	if n := strings.Count(b.Text(), "add set inet crossproxy-0 "+aff); n != 0 {
		t.Errorf("an existing affinity set must be kept (entries live in it), not re-added")
	}
}

func TestPlanFullRecreate(t *testing.T) {
	b := planRuleset(build(testState(t), Config{}), map[string]inventory{"crossproxy": {Chains: []string{"x"}, Sets: []string{"y"}}}, true)
	if !strings.HasPrefix(b.Text(), "add table inet crossproxy\ndelete table inet crossproxy\nadd table inet crossproxy\n") {
		t.Errorf("recreate must start by replacing the table:\n%s", b.Text()[:200])
	}
	if strings.Contains(b.Text(), "delete chain") {
		t.Error("nothing to delete one by one after the table is replaced")
	}
}

// TestPlanPartial changes one port's endpoints, removes another and adds a
// third, and checks the batch touches only those ports.
func TestPlanPartial(t *testing.T) {
	st := testState(t)
	cfg := Config{}
	rs := build(st, cfg)
	cfg.Shards = rs.Shards
	prev := newApplied(rs, cfg)

	web := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[web]
	p.ClusterEndpoints = append(append([]core.Endpoint(nil), p.ClusterEndpoints...), ep("10.244.3.3", 8080, false))
	gone := key("default", "dns", "dns", "UDP", "IPv4")
	added := key("default", "new", "", "TCP", "IPv4")
	np := *st.Ports[key("default", "empty", "", "TCP", "IPv4")]
	np.Key = added
	np.ClusterIP = p.ClusterIP // shares the ClusterIP of web: no new cluster-ips element
	np.Frontends = []core.Frontend{fe(core.FrontendClusterIP, "10.96.0.10", 81)}
	det := st.LocalDetect["IPv4"]
	changes := map[core.PortKey]*portObjects{
		web:   buildPort(&p, &det, cfg, nil),
		gone:  nil,
		added: buildPort(&np, &det, cfg, nil),
	}
	plan := planPartial(prev, changes)
	golden.Check(t, filepath.Join("testdata", "plan-partial.txt"), plan.Batch.Text())
	text := plan.Batch.Text()
	for _, untouched := range []string{"shop/lb", "default/empty"} {
		if strings.Contains(text, untouched) {
			t.Errorf("partial plan touches %s:\n%s", untouched, text)
		}
	}
	plan.commit(prev)
	if _, ok := prev.Ports[gone]; ok || prev.Ports[added].port != &np || prev.clusterIPs.get(p.ClusterIP) != 2 {
		t.Errorf("commit did not record the plan: %+v", prev.clusterIPs)
	}
	if prev.hairpin.get(ep("10.244.1.9", 53, false).Addr) != 0 {
		t.Error("endpoint of the removed port still counted")
	}
	// Nothing changed: an empty batch.
	again := planPartial(prev, map[core.PortKey]*portObjects{web: changes[web]})
	if again.Batch.Len() != 0 {
		t.Errorf("unchanged port produced commands:\n%s", again.Batch.Text())
	}
}

// TestAppliedBuildsTheSameObjects checks what applied relies on: the objects
// a partial sync compares against, built again from what applied keeps of a
// port, are the ones the full sync programmed, for every port of the test
// state (affinity, Local policies, load balancers, source ranges, no
// endpoints), also after the state the ports came from is gone.
func TestAppliedBuildsTheSameObjects(t *testing.T) {
	cfg := Config{Shards: 3, LocalhostNodePorts: true}
	rs := build(testState(t), cfg)
	a := newApplied(rs, cfg)
	if len(a.Ports) != len(rs.Ports) || len(rs.Ports) < 5 {
		t.Fatalf("applied %d ports of %d", len(a.Ports), len(rs.Ports))
	}
	for _, want := range rs.Ports {
		got := a.objects(want.Key)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s built again differs:\n got %+v\nwant %+v", want.Key, got, want)
		}
	}
	if a.objects(key("default", "nope", "", "TCP", "IPv4")) != nil {
		t.Error("a port never programmed has objects")
	}
}

// TestUseCounts counts addresses of both families apart and forgets an
// address whose count reaches zero.
func TestUseCounts(t *testing.T) {
	u := newUseCounts(0)
	v4, v6, v6b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::a00:1"), netip.MustParseAddr("fd00::1")
	u.add(v4, 2)
	u.add(v6, 1)
	u.add(v6b, 3)
	u.add(v4, -1)
	if u.get(v4) != 1 || u.get(v6) != 1 || u.get(v6b) != 3 || u.len() != 3 {
		t.Fatalf("counts %+v", u)
	}
	u.add(v4, -1)
	u.add(v6b, -3)
	if u.get(v4) != 0 || u.get(v6b) != 0 || u.len() != 1 {
		t.Errorf("an unused address is kept: %+v", u)
	}
}

// TestStreamedPlanIsTheRulesetsPlan checks that a full sync built shard by
// shard (fullBuild, what the backend sends) plans exactly the commands of the
// whole built ruleset, and records the same applied state, with and without
// existing tables and with recreate.
func TestStreamedPlanIsTheRulesetsPlan(t *testing.T) {
	existing := map[string]inventory{
		"crossproxy":   {Chains: []string{"nat-prerouting", "gone"}, Sets: []string{"cluster-ips-v4", "old"}},
		"crossproxy-0": {Chains: []string{"svc-OLD-default/gone/tcp/p80"}, Sets: []string{"frontends-v4"}},
		"crossproxy-9": {},
	}
	for _, tc := range []struct {
		name string
		st   *core.NodeState
		cfg  Config
	}{
		{"test state", testState(t), Config{LocalhostNodePorts: true}},
		{"1000 Services over shards", scaleStateN(1000, 10), Config{}},
		{"fixed shards", scaleStateN(300, 3), Config{Shards: 5, Table: "xp"}},
	} {
		for _, recreate := range []bool{false, true} {
			rs := build(tc.st, tc.cfg)
			want := planRuleset(rs, existing, recreate)
			fb := newFullBuild(tc.st, tc.cfg)
			got := &batch{}
			a := fb.newApplied()
			planFull(fb.names(), fb.tables(a.record), existing, recreate, got)
			if len(got.Ops) != len(want.Ops) || got.Text() != want.Text() {
				t.Fatalf("%s, recreate %v: streamed plan has %d commands, the ruleset's %d; they differ", tc.name, recreate, len(got.Ops), len(want.Ops))
			}
			a.setSizes(fb.main) // as syncFull does once the batch is committed
			cfg := tc.cfg
			cfg.Shards = rs.Shards
			wa := newApplied(rs, cfg)
			if !reflect.DeepEqual(a, wa) {
				t.Fatalf("%s: the streamed sync records a different applied state", tc.name)
			}
			if !reflect.DeepEqual(fb.skipped, rs.Skipped) {
				t.Fatalf("%s: skipped %v, ruleset %v", tc.name, fb.skipped, rs.Skipped)
			}
		}
	}
}
