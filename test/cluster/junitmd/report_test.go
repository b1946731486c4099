package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const focusFile = `# comment
focus \[sig-network\] Services .*\[Conformance\]
focus \[sig-network\] Traffic Distribution

# They restart components
# the cluster runs as host daemons.
skip \[Disruptive\]|\[Serial\]
# Needs a second pod CIDR.
skip-single PreferClose
short \[sig-network\] Services should serve a basic endpoint from pods
`

// A report as e2e.test --report-dir writes it: suite nodes, passed,
// failed, skipped-in-spec and filtered-out specs.
const junitXML = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="1" time="150">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="6" disabled="0" skipped="3" errors="0" failures="1" time="150" timestamp="2026-12-03T08:00:00">
    <properties><property name="SuiteSucceeded" value="false"></property></properties>
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.2"></testcase>
    <testcase name="[It] [sig-network] Services should serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="passed" time="12.5"></testcase>
    <testcase name="[It] [sig-network] Services should be able to create a functioning NodePort service [Conformance]" classname="Kubernetes e2e suite" status="failed" time="130.2"><failure type="failed">[FAILED] service is not reachable within 2m0s timeout on endpoint nodeport-test:80 over TCP protocol | a pipe&#xA;In [It] at: service.go:1310 @ 12/03/26 08:02:00</failure><system-err>log</system-err></testcase>
    <testcase name="[It] [sig-network] Traffic Distribution should route traffic to an endpoint in the same zone when using PreferClose" classname="Kubernetes e2e suite" status="skipped" time="0.5"><skipped message="skipped - got 2 zones with schedulable nodes, need at least 3"></skipped></testcase>
    <testcase name="[It] [sig-network] DNS should provide DNS for services [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-network] Services should work after restarting kube-proxy [Disruptive] [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
    <testcase name="[It] [sig-network] Services should complete a service status lifecycle [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="300"><failure type="timedout">[TIMEDOUT] A suite timeout occurred</failure></testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e JUnit report" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
  </testsuite>
</testsuites>
`

func writeRun(t *testing.T, junit, steps string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "junit_01.xml"), []byte(junit), 0o644); err != nil {
		t.Fatal(err)
	}
	if steps != "" {
		if err := os.WriteFile(filepath.Join(dir, "steps.tsv"), []byte(steps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeFocus(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "focus")
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadSelection(t *testing.T) {
	f := writeFocus(t, focusFile)
	full, err := readSelection(f, "full")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]":              true,
		"[sig-network] Traffic Distribution should route traffic when using PreferClose":            true,
		"[sig-network] Services should work after restarting kube-proxy [Disruptive] [Conformance]": false,
		"[sig-network] DNS should provide DNS for services [Conformance]":                           false,
		"[sig-network] Services should be updated after adding or deleting ports":                   false,
	} {
		if got := full.selects(name); got != want {
			t.Errorf("full selects %q = %v, want %v", name, got, want)
		}
	}
	if len(full.skip) != 1 || full.skip[0].reason != "They restart components the cluster runs as host daemons." ||
		len(full.skipSingle) != 1 || full.skipSingle[0].reason != "Needs a second pod CIDR." {
		t.Errorf("skip lines and reasons: %+v %+v", full.skip, full.skipSingle)
	}
	td := "[sig-network] Traffic Distribution should route traffic when using PreferClose"
	if !full.selectsOn(td, "dual") || full.selectsOn(td, "single") {
		t.Errorf("skip-single: selectsOn(dual) = %v, selectsOn(single) = %v, want true, false",
			full.selectsOn(td, "dual"), full.selectsOn(td, "single"))
	}
	short, err := readSelection(f, "short")
	if err != nil {
		t.Fatal(err)
	}
	if len(short.focus) != 1 || !short.selects("[sig-network] Services should serve a basic endpoint from pods [Conformance]") ||
		short.selects("[sig-network] Traffic Distribution should route traffic when using PreferClose") {
		t.Errorf("short selection = %+v", short)
	}
	// A skip line needs a reason right above it (a blank line ends one).
	for _, bad := range []string{"focus [unclosed\n", "fokus x\n", "focus x\nskip y\n", "focus x\n# why\n\nskip y\n", "# why\nskip x\n"} {
		if _, err := readSelection(writeFocus(t, bad), "full"); err == nil {
			t.Errorf("focus file %q accepted", bad)
		}
	}
}

func TestTableFromReports(t *testing.T) {
	sel, err := readSelection(writeFocus(t, focusFile), "full")
	if err != nil {
		t.Fatal(err)
	}
	a, err := loadRun("crossproxy", writeRun(t, junitXML, "cluster up\t30.5\t3.10\t4.20\ne2e specs\t600.0\t4.20\t5.00\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The second run stopped before two specs.
	short := strings.Replace(junitXML, `<testcase name="[It] [sig-network] Services should complete a service status lifecycle [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="300"><failure type="timedout">[TIMEDOUT] A suite timeout occurred</failure></testcase>`, "", 1)
	short = strings.Replace(short, `status="failed" time="130.2"><failure type="failed">[FAILED] service is not reachable within 2m0s timeout on endpoint nodeport-test:80 over TCP protocol | a pipe&#xA;In [It] at: service.go:1310 @ 12/03/26 08:02:00</failure>`, `status="passed" time="20">`, 1)
	// The second run was on a dual-stack cluster.
	bdir := writeRun(t, short, "cluster up\t20.0\t1\t2\nstart kube-proxy\t1.0\t2\t2\ne2e specs\t500.0\t2\t3\nstop kube-proxy\t0.5\t3\t3\n")
	if err := os.WriteFile(filepath.Join(bdir, "stack"), []byte("dual\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := loadRun("kube-proxy", bdir)
	if err != nil {
		t.Fatal(err)
	}
	if a.stack != "single" || b.stack != "dual" {
		t.Errorf("stacks %q %q, want single (no file) and dual", a.stack, b.stack)
	}
	tb := buildTable(sel, []runResult{a, b})
	want := []string{
		"[sig-network] Services should be able to create a functioning NodePort service [Conformance]",
		"[sig-network] Services should complete a service status lifecycle [Conformance]",
		"[sig-network] Services should serve a basic endpoint from pods [Conformance]",
		"[sig-network] Traffic Distribution should route traffic to an endpoint in the same zone when using PreferClose",
	}
	if strings.Join(tb.specs, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(tb.specs, "\n"), strings.Join(want, "\n"))
	}
	cells := map[string][2]string{
		want[0]: {`**fail** (130 s): service is not reachable within 2m0s timeout on endpoint nodeport-test:80 over TCP protocol \| a pipe`, "pass (20 s)"},
		want[1]: {"**fail** (300 s): timedout: [TIMEDOUT] A suite timeout occurred", "not run"},
		want[2]: {"pass (12 s)", "pass (12 s)"},
		want[3]: {"not selected (single-stack cluster)", "skipped: got 2 zones with schedulable nodes, need at least 3"},
	}
	for spec, w := range cells {
		if got := tb.cell(a, spec); got != w[0] {
			t.Errorf("crossproxy %s:\n got %s\nwant %s", spec, got, w[0])
		}
		if got := tb.cell(b, spec); got != w[1] {
			t.Errorf("kube-proxy %s:\n got %s\nwant %s", spec, got, w[1])
		}
	}
	if p, f, s, n := tb.counts(a); p != 1 || f != 2 || s != 0 || n != 0 {
		t.Errorf("crossproxy counts %d %d %d %d, want 1 2 0 0", p, f, s, n)
	}
	if p, f, s, n := tb.counts(b); p != 2 || f != 0 || s != 1 || n != 1 {
		t.Errorf("kube-proxy counts %d %d %d %d, want 2 0 1 1", p, f, s, n)
	}
	md := tb.markdown(sel, "make conformance at load 4", "## Exceptions\n\nNo DNS.\n")
	for _, line := range []string{
		"| # | spec | crossproxy | kube-proxy |",
		"| 3 | [sig-network] Services should serve a basic endpoint from pods [Conformance] | pass (12 s) | pass (12 s) |",
		"| fail | 2 | 0 |",
		"| not run | 0 | 1 |",
		"| not selected | 1 | 0 |",
		// Each skip line with its reason and the focused specs it left out.
		"| `\\[Disruptive\\]\\|\\[Serial\\]` | every cluster | They restart components the cluster runs as host daemons. | 1: [sig-network] Services should work after restarting kube-proxy [Disruptive] [Conformance] |",
		"| `PreferClose` | single-stack clusters | Needs a second pod CIDR. | 1 (\"not selected\" in the single-stack columns) |",
		// Each run's own steps sit where that run took them.
		"| cluster up | 30 s (3.10 → 4.20) | 20 s (1 → 2) |\n| start kube-proxy | - | 1 s (2 → 2) |\n| e2e specs | 600 s (4.20 → 5.00) | 500 s (2 → 3) |\n| stop kube-proxy | - | 0 s (3 → 3) |",
		"make conformance at load 4",
		"## Exceptions",
		// The closing lines: counts and times per run.
		"- crossproxy: 1 pass, 2 fail, 0 skipped; specs 600 s, the run 630 s (cluster up to down).",
		"- kube-proxy: 2 pass, 0 fail, 1 skipped, 1 not run; specs 500 s, the run 522 s (cluster up to down).",
	} {
		if !strings.Contains(md, line+"\n") && !strings.Contains(md, line) {
			t.Errorf("markdown lacks %q:\n%s", line, md)
		}
	}
}

func TestCheck(t *testing.T) {
	sel, err := readSelection(writeFocus(t, focusFile), "short")
	if err != nil {
		t.Fatal(err)
	}
	good, err := loadRun("crossproxy", writeRun(t, junitXML, ""))
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := buildTable(sel, []runResult{good}).check(); !ok || !strings.Contains(out, "1 pass, 0 fail") {
		t.Errorf("passing short run: ok=%v\n%s", ok, out)
	}
	failing := strings.Replace(junitXML, `serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="passed"`,
		`serve a basic endpoint from pods [Conformance]" classname="Kubernetes e2e suite" status="failed"`, 1)
	bad, err := loadRun("crossproxy", writeRun(t, failing, ""))
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := buildTable(sel, []runResult{bad}).check(); ok {
		t.Errorf("a failed spec passed the check:\n%s", out)
	}
	none, err := readSelection(writeFocus(t, "short nothing matches this\n"), "short")
	if err != nil {
		t.Fatal(err)
	}
	if out, ok := buildTable(none, []runResult{good}).check(); ok {
		t.Errorf("no selected spec passed the check:\n%s", out)
	}
}

func TestLoadRunErrors(t *testing.T) {
	if _, err := loadRun("x", t.TempDir()); err == nil {
		t.Error("a run without junit_01.xml was accepted")
	}
	if _, err := loadRun("x", writeRun(t, "<testsuites><testsuite>", "")); err == nil {
		t.Error("broken XML was accepted")
	}
	if _, err := loadRun("x", writeRun(t, junitXML, "cluster up\tnot-a-number\t1\t2\n")); err == nil {
		t.Error("a broken steps.tsv was accepted")
	}
}
