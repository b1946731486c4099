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

// withoutUnusedRemotes drops from a propertyDump the remote endpoints that
// no load balancer line lists and want does not hold.
func withoutUnusedRemotes(dump, want string) string {
	wanted := map[string]bool{}
	for _, l := range strings.SplitAfter(want, "\n") {
		wanted[l] = true
	}
	lines := strings.SplitAfter(dump, "\n")
	used := map[string]bool{}
	for _, l := range lines {
		if strings.HasPrefix(l, "endpoint ") {
			continue
		}
		if a, b := strings.Index(l, "["), strings.Index(l, "]"); a >= 0 && b > a {
			for _, ip := range strings.Fields(l[a+1 : b]) {
				used[strings.TrimSuffix(ip, "*")] = true
			}
		}
	}
	var out strings.Builder
	for _, l := range lines {
		if f := strings.Fields(l); !wanted[l] && len(f) > 2 && f[0] == "endpoint" && f[2] == "remote=true" && !used[f[1]] {
			continue
		}
		out.WriteString(l)
	}
	return out.String()
}

// TestPartialSyncsEqualFullSync is the Windows side of the Linux backend's
// TestMemPartialSyncsEqualFullSync: random cluster changes go through the
// core's Tracker and the backend's partial syncs against the fake HNS, and
// after every step HNS must hold what a full sync of the same NodeState
// makes on a fresh node, but for remote endpoints no load balancer uses,
// which only full syncs collect; every few steps a full sync comes between,
// as the periodic one does, after which HNS must hold exactly that.
func TestPartialSyncsEqualFullSync(t *testing.T) {
	seeds, steps := 4, 25
	if testing.Short() {
		seeds, steps = 2, 15
	}
	ctx := context.Background()
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			c := teststate.NewCluster(t, int64(seed), flannelWindows())
			var locals []string
			for _, a := range c.LocalAddresses(v1.IPv4Protocol) {
				locals = append(locals, a.String())
			}
			r := newRig(t, AllFeatures(), locals...)
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
				fresh := newRig(t, AllFeatures(), locals...)
				if err := fresh.backend.Sync(ctx, st, core.Changes{Full: true}); err != nil {
					t.Fatalf("step %d, full sync on a fresh node: %v", i, err)
				}
				got, want := propertyDump(r.fake), propertyDump(fresh.fake)
				if !ch.Full {
					// Remote endpoints no load balancer uses any more are
					// collected by full syncs only (README, "Syncing"):
					// after a partial one they may remain, and nothing else.
					got = withoutUnusedRemotes(got, want)
				}
				if got != want {
					t.Fatalf("step %d (full %v): HNS after partial syncs differs from a full sync of the same state:\n%s", i, ch.Full, golden.LineDiff(want, got))
				}
			}
		})
	}
}
