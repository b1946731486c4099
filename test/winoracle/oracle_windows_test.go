package winoracle

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

var (
	update   = flag.Bool("update", false, "rewrite the results file instead of checking it")
	only     = flag.String("scenario", "", "run only the scenarios whose name contains this (skips the stale-allowlist and results checks)")
	allowArg = flag.String("allowlist", "allowlist.yaml", "the allowlist file")
	results  = flag.String("results", "../results/winoracle.md", "the results file the suite writes (-update) or checks")
)

// minScenarios keeps the table from shrinking unnoticed.
const minScenarios = 25

// row is one compared state: a scenario, or one step of a multi-step one.
type row struct {
	name    string
	diffs   []Diff
	reasons []string
	notices []string
}

func (r row) status() string {
	if len(r.diffs) == 0 {
		return "match"
	}
	if slices.Contains(r.reasons, "") {
		return "differs"
	}
	return "allowlisted"
}

// TestOracle feeds every scenario to winkernel and to crossproxy, compares
// what each programmed into its HNS mock, and fails on every difference the
// allowlist does not name, on every allowlist entry no difference needed,
// and when the results file is not what this run produced.
func TestOracle(t *testing.T) {
	klog.SetLogger(logr.Discard())
	allow := loadAllowlist(t, *allowArg)
	all := scenarios()
	if len(all) < minScenarios {
		t.Errorf("%d scenarios, want at least %d", len(all), minScenarios)
	}
	names := map[string]bool{}
	var rows []row
	for i := range all {
		sc := &all[i]
		if names[sc.Name] {
			t.Fatalf("scenario %q defined twice", sc.Name)
		}
		names[sc.Name] = true
		if *only != "" && !strings.Contains(sc.Name, *only) {
			continue
		}
		rs, err := run(sc)
		if err != nil {
			t.Errorf("%s: %v", sc.Name, err)
			continue
		}
		for _, r := range rs {
			r.reasons = allow.Reasons(r.name, r.diffs)
			rows = append(rows, r)
			report(t, r)
		}
	}
	if *only != "" {
		return
	}
	for _, e := range allow.Stale() {
		t.Errorf("stale allowlist entry (no difference matches it; remove it): %s", e)
	}
	md := renderResults(rows)
	if *update {
		if err := os.WriteFile(*results, md, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(*results)
	if err != nil {
		t.Fatalf("%v (run the suite with -update to write it)", err)
	}
	if !bytes.Equal(bytes.ReplaceAll(old, []byte("\r\n"), []byte("\n")), md) {
		t.Errorf("%s is not what this run produced: rerun with -update (make test-winoracle UPDATE=1) and commit it", *results)
	}
}

// run programs both proxies step by step and compares after each step.
func run(sc *scenario) ([]row, error) {
	wk, err := newWinkernelNode(sc)
	if err != nil {
		return nil, err
	}
	cp, err := newCrossproxyNode(sc)
	if err != nil {
		return nil, err
	}
	var rows []row
	var prev *objects
	for i := range sc.Steps {
		st := &sc.Steps[i]
		name := sc.Name
		if len(sc.Steps) > 1 {
			name += " / " + st.Name
		}
		if err := wk.apply(prev, &st.Objects); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := cp.apply(prev, &st.Objects); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		prev = &st.Objects
		want, err := wk.programmed()
		if err != nil {
			return nil, fmt.Errorf("%s: reading winkernel's HNS: %w", name, err)
		}
		got, err := cp.programmed()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row{name: name, diffs: Compare(want, got), notices: cp.notices.take()})
	}
	return rows, nil
}

// report logs a readable diff of one row and fails on what is not allowed.
func report(t *testing.T, r row) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", r.name, r.status())
	for i, d := range r.diffs {
		mark := "DIFFERS"
		if r.reasons[i] != "" {
			mark = "allowlisted: " + r.reasons[i]
		}
		fmt.Fprintf(&b, "\n    %s\n        [%s]", d, mark)
	}
	if len(r.notices) > 0 {
		fmt.Fprintf(&b, "\n    crossproxy notices: %s", strings.Join(r.notices, "; "))
	}
	t.Log(b.String())
	n := 0
	for _, reason := range r.reasons {
		if reason == "" {
			n++
		}
	}
	if n > 0 {
		t.Errorf("%s: %d differences no allowlist entry names (marked DIFFERS above)", r.name, n)
	}
}

func loadAllowlist(t *testing.T, path string) *Allowlist {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var a Allowlist
	if err := yaml.UnmarshalStrict(data, &a.Entries); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, e := range a.Entries {
		if err := e.compile(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	return &a
}

// renderResults is the results file: one line per row, so it cannot drift
// from the suite (the suite fails when the committed file differs).
func renderResults(rows []row) []byte {
	var b bytes.Buffer
	count := map[string]int{}
	for _, r := range rows {
		count[r.status()]++
	}
	b.WriteString("# Windows data plane held to kube-proxy's winkernel (oracle suite)\n\n")
	b.WriteString("Written by the suite: `make test-winoracle UPDATE=1` (test/winoracle, run under Wine); `make test-winoracle`\n")
	b.WriteString("fails when this file differs from what the suite produced. What each column means: test/winoracle/README.md.\n\n")
	fmt.Fprintf(&b, "%d rows: %d match, %d allowlisted, %d differ.\n\n", len(rows), count["match"], count["allowlisted"], count["differs"])
	b.WriteString("| scenario | result | differences (field: reason) |\n|---|---|---|\n")
	for _, r := range rows {
		var cells []string
		seen := map[string]bool{}
		for i, d := range r.diffs {
			reason := r.reasons[i]
			if reason == "" {
				reason = "NOT ALLOWLISTED"
			}
			c := d.Field + ": " + reason
			if !seen[c] {
				seen[c] = true
				cells = append(cells, c)
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.name, r.status(), strings.ReplaceAll(strings.Join(cells, "<br>"), "|", "\\|"))
	}
	return b.Bytes()
}
