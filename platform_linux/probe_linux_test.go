package nft

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crossproxy/crossproxy/platform"
)

// TestProbeCoversTheRuleset: every kind of statement, set and base chain a
// ruleset holds is in the probe, so a kernel that passes the probe can load
// any ruleset. A new statement or chain kind fails here until the probe
// asks for it too.
func TestProbeCoversTheRuleset(t *testing.T) {
	probed := map[string]bool{}
	for _, c := range probeCommands("p") {
		for _, k := range opKinds(c.op) {
			probed[k] = true
		}
	}
	for _, op := range planRuleset(build(testState(t), Config{LocalhostNodePorts: true}), nil, false).Ops {
		for _, k := range opKinds(op) {
			if !probed[k] {
				t.Errorf("the ruleset uses %s, which the kernel probe does not try (in %s)", k, describeOp(op))
			}
		}
	}
}

// opKinds names what kinds of kernel objects and expressions an op needs.
func opKinds(op Op) []string {
	switch op := op.(type) {
	case addSetOp:
		return []string{fmt.Sprintf("set kind %d", op.Set.Kind)}
	case addChainOp:
		if h := op.Chain.Hook; h != nil {
			return []string{fmt.Sprintf("%s chain on hook %s", h.Type, h.Hook)}
		}
	case addRuleOp:
		var out []string
		for _, s := range op.Rule {
			k := reflect.TypeOf(s).Name()
			switch s := s.(type) {
			case Verdict:
				k += " " + s.Kind.String()
			case reject:
				k += fmt.Sprint(" tcp-reset=", s.TCPReset)
			case matchIif:
				k += fmt.Sprint(" prefix=", s.Prefix)
			case matchAddr:
				k += fmt.Sprint(" invert=", s.Invert, " source=", s.Source)
			case matchAddrSet:
				k += fmt.Sprint(" source=", s.Source)
			}
			out = append(out, k)
		}
		return out
	}
	return nil
}

// TestProbeLeavesNothing: on this kernel the probe passes and leaves no
// table behind, also when an interrupted probe left its table.
func TestProbeLeavesNothing(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	defer b.Close()
	// What an interrupted probe leaves: the table, dormant, with a chain.
	nftIn(t, ns, "add", "table", "inet", "crossproxy-probe", "{ flags dormant; }")
	nftIn(t, ns, "add", "chain", "inet", "crossproxy-probe", "svc")
	for i := 0; i < 2; i++ {
		if err := b.probeKernel(); err != nil {
			t.Fatalf("probe %d: %v", i+1, err)
		}
		if out := nftIn(t, ns, "list", "tables"); strings.TrimSpace(out) != "" {
			t.Fatalf("probe %d left tables:\n%s", i+1, out)
		}
	}
}

// TestProbeNamesTheMissingFeature: a feature the kernel refuses stops the
// backend with an error naming it and the kernel release, which the runner
// does not retry; nothing is left in the kernel. Two refusals stand in for a
// missing feature: a nat chain on the forward hook (refused when the chain is
// added) and masquerade in a chain reached from prerouting (refused only by
// the commit's validation of the hooks each rule is reachable from, which a
// table deleted in the same batch would skip).
func TestProbeNamesTheMissingFeature(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	defer b.Close()
	table := probeTable(b.cfg.table())
	for _, extra := range []probeCommand{
		{feature: "nat chain on hook forward",
			op: addChainOp{Table: table, Chain: &Chain{Name: "fwd", Hook: &hook{Type: "nat", Hook: "forward"}}}},
		{feature: "masquerade reached from prerouting",
			op: addRuleOp{Table: table, Chain: &Chain{Name: probeSvc}, Rule: Rule{Masquerade{}}}},
	} {
		err := b.probe(append(probeCommands(table), extra))
		if err == nil {
			t.Fatalf("the kernel took %s", extra.feature)
		}
		t.Logf("%s: %v", extra.feature, err)
		if !errors.Is(err, platform.ErrNodeUnfit) {
			t.Errorf("error %v is not ErrNodeUnfit: the runner would retry it forever", err)
		}
		for _, want := range []string{extra.feature, "Linux " + kernelRelease(), "5.10"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not name %q: %v", want, err)
			}
		}
		if out := nftIn(t, ns, "list", "tables"); strings.TrimSpace(out) != "" {
			t.Fatalf("a refused probe left tables:\n%s", out)
		}
	}
	// The probe that fits the kernel passes on the same connection.
	if err := b.probeKernel(); err != nil {
		t.Fatalf("probe after a refused one: %v", err)
	}
}

// TestOnlyMissingFeaturesAreTheFloor: a refusal for a passing reason (no
// memory, a busy resource, no permission) is an ordinary failed sync, retried.
func TestOnlyMissingFeaturesAreTheFloor(t *testing.T) {
	refused := func(errno unix.Errno) error {
		return &batchError{Errors: []error{fmt.Errorf("x: %w", os.NewSyscallError("netlink", errno))}}
	}
	for errno, floor := range map[unix.Errno]bool{unix.ENOENT: true, unix.EOPNOTSUPP: true, unix.EINVAL: true,
		unix.ENOMEM: false, unix.EBUSY: false, unix.EPERM: false, unix.ENOBUFS: false} {
		err := floorError(refused(errno))
		if got := errors.Is(err, platform.ErrNodeUnfit); got != floor {
			t.Errorf("%v: floor %v, want %v (%v)", errno, got, floor, err)
		}
	}
	if err := floorError(errors.New("read nftables batch result: no answer")); errors.Is(err, platform.ErrNodeUnfit) {
		t.Errorf("a lost answer is not the floor: %v", err)
	}
}
