package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// selection is the focus file's regexps for one mode: a spec is selected
// when it matches a focus and no skip, as Ginkgo selects it; on a
// single-stack cluster the skip-single lines leave out more.
type selection struct {
	focus      []*regexp.Regexp
	skip       []skipLine // never run
	skipSingle []skipLine // not run on a single-stack cluster
}

// skipLine is a skip or skip-single line with its reason: the comment
// lines right above it in the focus file.
type skipLine struct {
	re     *regexp.Regexp
	reason string
}

func (s selection) focused(name string) bool {
	for _, f := range s.focus {
		if f.MatchString(name) {
			return true
		}
	}
	return false
}

func matching(lines []skipLine, name string) *skipLine {
	for i := range lines {
		if lines[i].re.MatchString(name) {
			return &lines[i]
		}
	}
	return nil
}

// selects: the spec runs on some cluster (a row of the table).
func (s selection) selects(name string) bool {
	return s.focused(name) && matching(s.skip, name) == nil
}

// selectsOn: the spec runs on a cluster of this stack (single or dual).
func (s selection) selectsOn(name, stack string) bool {
	return s.selects(name) && (stack != "single" || matching(s.skipSingle, name) == nil)
}

// readSelection parses `focus|short|skip|skip-single REGEXP` lines; mode
// full takes the focus lines, short the short lines; skip lines apply to
// both. Every skip line needs its reason in the comment lines above it.
func readSelection(file, mode string) (selection, error) {
	var s selection
	f, err := os.Open(file)
	if err != nil {
		return s, fmt.Errorf("focus file: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var comment []string
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			comment = nil
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			comment = append(comment, strings.TrimSpace(c))
			continue
		}
		reason := strings.Join(comment, " ")
		comment = nil
		kind, re, _ := strings.Cut(line, " ")
		rx, err := regexp.Compile(strings.TrimSpace(re))
		if err != nil {
			return s, fmt.Errorf("%s:%d: %w", file, n, err)
		}
		switch {
		case kind == "skip" || kind == "skip-single":
			if reason == "" {
				return s, fmt.Errorf("%s:%d: a %s line needs its reason in a comment right above it", file, n, kind)
			}
			if kind == "skip" {
				s.skip = append(s.skip, skipLine{rx, reason})
			} else {
				s.skipSingle = append(s.skipSingle, skipLine{rx, reason})
			}
		case kind == "focus" && mode == "full", kind == "short" && mode == "short":
			s.focus = append(s.focus, rx)
		case kind == "focus", kind == "short":
		default:
			return s, fmt.Errorf("%s:%d: unknown kind %q (want focus, skip, skip-single or short)", file, n, kind)
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("focus file: %w", err)
	}
	if len(s.focus) == 0 {
		return s, fmt.Errorf("%s: no %s lines", file, map[string]string{"full": "focus", "short": "short"}[mode])
	}
	return s, nil
}

// The parts of Ginkgo's JUnit report (reporters.JUnitTestSuites) used here.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"`
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"failure"`
	Error *struct {
		Message string `xml:"message,attr"`
		Type    string `xml:"type,attr"`
		Text    string `xml:",chardata"`
	} `xml:"error"`
}

// outcome is one spec's result in one run.
type outcome struct {
	state   string // pass, fail, skipped
	seconds float64
	reason  string // why it failed or skipped, one line
}

type step struct {
	name                  string
	seconds               float64
	loadBefore, loadAfter string
}

type runResult struct {
	name  string
	stack string             // the cluster's: single (IPv4) or dual
	specs map[string]outcome // by spec name without the "[It] " prefix
	steps []step
}

// loadRun reads a run directory's junit_01.xml, steps.tsv and stack (the
// cluster's, "single" or "dual"; single when the file is missing). Only
// [It] specs count; the suite's setup nodes are not tests.
func loadRun(name, dir string) (runResult, error) {
	rr := runResult{name: name, stack: "single", specs: map[string]outcome{}}
	if b, err := os.ReadFile(filepath.Join(dir, "stack")); err == nil {
		rr.stack = strings.TrimSpace(string(b))
		if rr.stack != "single" && rr.stack != "dual" {
			return rr, fmt.Errorf("%s: stack %q: want single or dual", name, rr.stack)
		}
	} else if !os.IsNotExist(err) {
		return rr, fmt.Errorf("%s: %w", name, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "junit_01.xml"))
	if err != nil {
		return rr, fmt.Errorf("%s: %w", name, err)
	}
	var js junitSuites
	if err := xml.Unmarshal(b, &js); err != nil {
		return rr, fmt.Errorf("%s: junit_01.xml: %w", name, err)
	}
	for _, s := range js.Suites {
		for _, c := range s.Cases {
			spec, ok := strings.CutPrefix(c.Name, "[It] ")
			if !ok {
				continue
			}
			rr.specs[spec] = caseOutcome(c)
		}
	}
	rr.steps, err = readSteps(filepath.Join(dir, "steps.tsv"))
	if err != nil {
		return rr, fmt.Errorf("%s: %w", name, err)
	}
	return rr, nil
}

func caseOutcome(c junitCase) outcome {
	o := outcome{seconds: c.Time}
	switch {
	case c.Status == "passed":
		o.state = "pass"
	case c.Status == "skipped" || c.Status == "pending" || (c.Status == "" && c.Skipped != nil):
		o.state = "skipped"
		if c.Skipped != nil {
			o.reason = strings.TrimPrefix(strings.TrimPrefix(c.Skipped.Message, "skipped"), " - ")
		}
	default:
		o.state = "fail"
		switch {
		case c.Failure != nil:
			o.reason = firstLine(c.Failure.Message, c.Failure.Text)
		case c.Error != nil:
			o.reason = firstLine(c.Error.Message, c.Error.Text)
		}
		if c.Status != "" && c.Status != "failed" {
			o.reason = strings.TrimSpace(c.Status + ": " + o.reason)
		}
	}
	return o
}

// firstLine is a failure's headline: the message, else the first line of
// the text, without Ginkgo's [FAILED] marker, cut to 200 characters.
func firstLine(msg, text string) string {
	s := strings.TrimSpace(msg)
	if s == "" {
		s = strings.TrimSpace(text)
	}
	s, _, _ = strings.Cut(s, "\n")
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "[FAILED]"))
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "..."
	}
	return s
}

// readSteps reads conformance.sh's steps.tsv; a missing file is no steps.
func readSteps(file string) ([]step, error) {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var steps []step
	for i, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("steps.tsv:%d: want 4 tab-separated fields, got %q", i+1, line)
		}
		sec, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("steps.tsv:%d: %w", i+1, err)
		}
		steps = append(steps, step{f[0], sec, f[2], f[3]})
	}
	return steps, nil
}

type table struct {
	specs []string // selected specs seen in any run, sorted
	runs  []runResult
	sel   selection
	// left out: focused specs the reports list that a skip line leaves
	// out everywhere, by the line's index in sel.skip
	left map[int][]string
}

func buildTable(sel selection, runs []runResult) table {
	seen := map[string]bool{}
	var specs []string
	left := map[int][]string{}
	for _, r := range runs {
		for s := range r.specs {
			if seen[s] || !sel.focused(s) {
				continue
			}
			seen[s] = true
			if sel.selects(s) {
				specs = append(specs, s)
				continue
			}
			for i := range sel.skip {
				if sel.skip[i].re.MatchString(s) {
					left[i] = append(left[i], s)
					break
				}
			}
		}
	}
	sort.Strings(specs)
	for _, l := range left {
		sort.Strings(l)
	}
	return table{specs: specs, runs: runs, sel: sel, left: left}
}

// cell is a spec's result for the table; a spec a run did not report is
// "not run" (its e2e.test stopped early), one its cluster's stack leaves
// out is "not selected".
func (t table) cell(r runResult, spec string) string {
	if !t.sel.selectsOn(spec, r.stack) {
		return "not selected (" + r.stack + "-stack cluster)"
	}
	o, ok := r.specs[spec]
	if !ok {
		return "not run"
	}
	switch o.state {
	case "pass":
		return fmt.Sprintf("pass (%.0f s)", o.seconds)
	case "skipped":
		return "skipped: " + mdEscape(o.reason)
	default:
		return fmt.Sprintf("**fail** (%.0f s): %s", o.seconds, mdEscape(o.reason))
	}
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;").Replace(s)
}

// counts are a run's pass, fail, skipped and not-run numbers over the
// table's specs that its cluster's stack selects.
func (t table) counts(r runResult) (pass, fail, skipped, notRun int) {
	for _, s := range t.specs {
		o, ok := r.specs[s]
		switch {
		case !t.sel.selectsOn(s, r.stack):
		case !ok:
			notRun++
		case o.state == "pass":
			pass++
		case o.state == "skipped":
			skipped++
		default:
			fail++
		}
	}
	return
}

func (t table) markdown(sel selection, meta, notes string) string {
	var b strings.Builder
	b.WriteString("# Kubernetes e2e network specs: crossproxy and kube-proxy on the same cluster\n\n")
	b.WriteString("Generated by `make conformance` (test/cluster/conformance.sh, table by test/cluster/junitmd)")
	if meta != "" {
		b.WriteString(": " + meta)
	}
	b.WriteString(".\nThe specs are those of test/cluster/conformance.focus that ran; each run on a fresh three-node cluster, one node in each of zones a, b and c, IPv4 only (single) or dual-stack with IPv4 primary (dual) (test/cluster/README.md).\n\n")
	b.WriteString("| # | spec |")
	sep := "| --- | --- |"
	for _, r := range t.runs {
		b.WriteString(" " + r.name + " |")
		sep += " --- |"
	}
	b.WriteString("\n" + sep + "\n")
	for i, s := range t.specs {
		fmt.Fprintf(&b, "| %d | %s |", i+1, mdEscape(s))
		for _, r := range t.runs {
			b.WriteString(" " + t.cell(r, s) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n| counts |")
	for _, r := range t.runs {
		b.WriteString(" " + r.name + " |")
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(t.runs)) + "\n")
	for i, label := range []string{"pass", "fail", "skipped", "not run", "not selected"} {
		b.WriteString("| " + label + " |")
		for _, r := range t.runs {
			p, f, s, n := t.counts(r)
			fmt.Fprintf(&b, " %d |", []int{p, f, s, n, len(t.specs) - p - f - s - n}[i])
		}
		b.WriteString("\n")
	}
	b.WriteString(t.stepsTable())
	b.WriteString(t.leftOut())
	if notes != "" {
		b.WriteString("\n" + strings.TrimSpace(notes) + "\n")
	}
	b.WriteString(t.closing())
	return b.String()
}

// closing sums each run up in one line: its counts, the wall time of its
// specs and of the whole run (every step, cluster up to cluster down).
func (t table) closing() string {
	var b strings.Builder
	b.WriteString("\n## In short\n\n")
	for _, r := range t.runs {
		p, f, s, n := t.counts(r)
		var specs, all float64
		for _, st := range r.steps {
			all += st.seconds
			if st.name == "e2e specs" {
				specs = st.seconds
			}
		}
		fmt.Fprintf(&b, "- %s: %d pass, %d fail, %d skipped", r.name, p, f, s)
		if n > 0 {
			fmt.Fprintf(&b, ", %d not run", n)
		}
		if len(r.steps) > 0 {
			fmt.Fprintf(&b, "; specs %.0f s, the run %.0f s (cluster up to down)", specs, all)
		}
		b.WriteString(".\n")
	}
	return b.String()
}

// stepsTable lists each step's wall time and the 1-minute load average
// before and after it, per run, in the order the runs took them: a step
// only one run has comes right after the step that run took before it.
func (t table) stepsTable() string {
	var names []string
	for _, r := range t.runs {
		prev := -1
		for _, s := range r.steps {
			if i := slices.Index(names, s.name); i >= 0 {
				prev = i
				continue
			}
			prev++
			names = slices.Insert(names, prev, s.name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| step (wall time, load average before → after) |")
	for _, r := range t.runs {
		b.WriteString(" " + r.name + " |")
	}
	b.WriteString("\n| --- |" + strings.Repeat(" --- |", len(t.runs)) + "\n")
	for _, n := range names {
		b.WriteString("| " + n + " |")
		for _, r := range t.runs {
			cell := "-"
			for _, s := range r.steps {
				if s.name == n {
					cell = fmt.Sprintf("%.0f s (%s → %s)", s.seconds, s.loadBefore, s.loadAfter)
				}
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// leftOut lists the focus file's skip lines with their reasons and the
// focused specs each left out (as the reports list them: Ginkgo reports
// the specs its filters skip).
func (t table) leftOut() string {
	if len(t.sel.skip)+len(t.sel.skipSingle) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## Left out by the focus file\n\n")
	b.WriteString("| skip line (regexp) | where | reason | focused specs it leaves out |\n| --- | --- | --- | --- |\n")
	for i, l := range t.sel.skip {
		specs := "-"
		if len(t.left[i]) > 0 {
			specs = fmt.Sprintf("%d: %s", len(t.left[i]), mdEscape(strings.Join(t.left[i], "; ")))
		}
		fmt.Fprintf(&b, "| `%s` | every cluster | %s | %s |\n", mdEscape(l.re.String()), mdEscape(l.reason), specs)
	}
	for _, l := range t.sel.skipSingle {
		n := 0
		for _, s := range t.specs {
			if l.re.MatchString(s) {
				n++
			}
		}
		fmt.Fprintf(&b, "| `%s` | single-stack clusters | %s | %d (\"not selected\" in the single-stack columns) |\n", mdEscape(l.re.String()), mdEscape(l.reason), n)
	}
	return b.String()
}

// check summarizes the runs and reports whether every selected spec passed
// in every run (and there was at least one).
func (t table) check() (string, bool) {
	var b strings.Builder
	ok := len(t.specs) > 0
	for _, r := range t.runs {
		p, f, s, n := t.counts(r)
		fmt.Fprintf(&b, "%s: %d pass, %d fail, %d skipped, %d not run\n", r.name, p, f, s, n)
		if f+s+n > 0 {
			ok = false
		}
		for _, spec := range t.specs {
			if !t.sel.selectsOn(spec, r.stack) {
				continue
			}
			if o, found := r.specs[spec]; !found || o.state != "pass" {
				fmt.Fprintf(&b, "  %s: %s\n", spec, t.cell(r, spec))
			}
		}
	}
	if len(t.specs) == 0 {
		b.WriteString("no selected spec in any report\n")
	}
	return b.String(), ok
}
