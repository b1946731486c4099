package hns

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/golden"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/internal/teststate"
)

// flannelWindows lays a cluster out as flannel's vxlan backend does with a
// Windows node beside a Linux one (sig-windows-tools): the Windows node
// win-1 (192.168.0.11, pods in 10.244.1.0/24, host 2 its source VIP) and
// the Linux node linux-1 (192.168.0.12, pods in 10.244.2.0/24), as the
// test network overlay describes them; IPv4, ClusterCIDR local detection.
func flannelWindows() teststate.Layout {
	return teststate.Layout{
		Node:  testobj.Node("win-1", "", "192.168.0.11"),
		Other: testobj.Node("linux-1", "", "192.168.0.12"),
		Pods: map[string]map[v1.IPFamily]netip.Prefix{
			"win-1":   {v1.IPv4Protocol: netip.MustParsePrefix("10.244.1.0/24")},
			"linux-1": {v1.IPv4Protocol: netip.MustParsePrefix("10.244.2.0/24")},
		},
		Families: []v1.IPFamily{v1.IPv4Protocol},
		Options: core.Options{
			IPFamilies:  []v1.IPFamily{v1.IPv4Protocol},
			LocalDetect: core.LocalDetect{Mode: core.LocalDetectClusterCIDR, CIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}},
		},
	}
}

// propertyDump is what HNS holds of crossproxy's, without the ids HNS
// makes up: stateDump and each load balancer's affinity.
func propertyDump(f *Fake) string {
	_, lbs := f.State()
	var sb strings.Builder
	sb.WriteString(stateDump(f))
	for _, lb := range lbs {
		if lb.SourceIPAffinity {
			fmt.Fprintf(&sb, "%s affinity\n", lb.frontend())
		}
	}
	return sb.String()
}

// TestPartialSyncsEqualFullSync is the Windows side of the Linux backend's
// TestMemPartialSyncsEqualFullSync: random cluster changes go through the
// core's Tracker and the backend's partial syncs against the fake HNS, and
// after every step HNS must hold what a full sync of the same NodeState
// makes on a fresh node, but for remote endpoints no load balancer uses,
// which only full syncs collect; every few steps a full sync comes between,
// as the periodic one does, after which HNS must hold exactly that.
//
// It runs under every Windows Server profile (profiles_test.go): on HNS
// 15.4, where a modify keeps the old endpoints, the partial syncs must still
// end where a full sync does.
func TestPartialSyncsEqualFullSync(t *testing.T) {
	seeds, steps := 4, 25
	if testing.Short() {
		seeds, steps = 2, 15
	}
	ctx := context.Background()
	for _, prof := range profiles {
		for seed := 1; seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", prof.Name, seed), func(t *testing.T) { partialsEqualFull(t, ctx, prof, seed, steps) })
		}
	}
}

func partialsEqualFull(t *testing.T, ctx context.Context, prof Profile, seed, steps int) {
	c := teststate.NewCluster(t, int64(seed), flannelWindows())
	var locals []string
	for _, a := range c.LocalAddresses(v1.IPv4Protocol) {
		locals = append(locals, a.String())
	}
	rig := func() *rig {
		r := newRig(t, prof.Features, locals...)
		r.fake.profile = prof
		return r
	}
	r := rig()
	st, ch := c.Snapshot()
	if err := r.backend.Sync(ctx, st, ch); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < steps; i++ {
		c.Step()
		if i%11 == 10 {
			c.ForceFull()
		}
		st, ch = c.Snapshot()
		if err := r.backend.Sync(ctx, st, ch); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		fresh := rig()
		if err := fresh.backend.Sync(ctx, st, core.Changes{Full: true}); err != nil {
			t.Fatalf("step %d, full sync on a fresh node: %v", i, err)
		}
		// Remote endpoints no load balancer uses any more go in the
		// same sync, partial or full (kubernetes #130963): HNS holds
		// exactly what a full sync makes.
		got, want := propertyDump(r.fake), propertyDump(fresh.fake)
		if got != want {
			t.Fatalf("step %d (full %v): HNS after partial syncs differs from a full sync of the same state:\n%s", i, ch.Full, golden.LineDiff(want, got))
		}
	}
}
