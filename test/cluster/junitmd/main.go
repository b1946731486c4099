// Command junitmd turns the JUnit reports of the conformance run
// (conformance.sh: Kubernetes' e2e network specs against crossproxy and
// kube-proxy) into the Markdown table of test/results/conformance.md: one
// row per selected spec, one column per run (a proxy on a single-stack or
// a dual-stack cluster), the counts, each step's wall time and load
// average, and the focus file's skip lines with their reasons. With -check it instead fails when a selected
// spec did not pass, for make test-conformance-short.
//
//	junitmd -focus conformance.focus -mode full \
//	  -run crossproxy=bin/conformance/crossproxy -run kube-proxy=bin/conformance/kube-proxy \
//	  [-notes conformance-notes.md] [-meta TEXT] -out test/results/conformance.md
//
// Each run directory holds junit_01.xml (e2e.test --report-dir),
// steps.tsv (step, seconds, load before, load after) and stack (single or
// dual: the skip-single lines apply to single).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

type runFlags []string

func (r *runFlags) String() string     { return strings.Join(*r, ",") }
func (r *runFlags) Set(v string) error { *r = append(*r, v); return nil }

func main() {
	var runs runFlags
	focusFile := flag.String("focus", "", "the focus file (conformance.focus)")
	mode := flag.String("mode", "full", "which focus lines select the specs: full (focus) or short (short)")
	notes := flag.String("notes", "", "Markdown appended under the table (the exceptions explained)")
	meta := flag.String("meta", "", "how the numbers were made: command, times, load")
	outFile := flag.String("out", "", "the Markdown file to write (default stdout)")
	check := flag.Bool("check", false, "print a summary and exit 1 unless every selected spec passed in every run")
	flag.Var(&runs, "run", "NAME=DIR, repeated: a run's result directory, in column order")
	flag.Parse()
	if *focusFile == "" || len(runs) == 0 {
		fmt.Fprintln(os.Stderr, "junitmd: need -focus and at least one -run")
		os.Exit(2)
	}
	if err := run(*focusFile, *mode, runs, *notes, *meta, *outFile, *check); err != nil {
		fmt.Fprintln(os.Stderr, "junitmd:", err)
		os.Exit(1)
	}
}

func run(focusFile, mode string, runs []string, notesFile, meta, outFile string, check bool) error {
	sel, err := readSelection(focusFile, mode)
	if err != nil {
		return err
	}
	var results []runResult
	for _, r := range runs {
		name, dir, ok := strings.Cut(r, "=")
		if !ok || name == "" || dir == "" {
			return fmt.Errorf("-run %q: want NAME=DIR", r)
		}
		rr, err := loadRun(name, dir)
		if err != nil {
			return err
		}
		results = append(results, rr)
	}
	t := buildTable(sel, results)
	if check {
		summary, ok := t.check()
		fmt.Print(summary)
		if !ok {
			return fmt.Errorf("not every selected spec passed")
		}
		return nil
	}
	var notes string
	if notesFile != "" {
		b, err := os.ReadFile(notesFile)
		if err != nil {
			return fmt.Errorf("notes: %w", err)
		}
		notes = string(b)
	}
	md := t.markdown(sel, meta, notes)
	if outFile == "" {
		_, err := os.Stdout.WriteString(md)
		return err
	}
	return os.WriteFile(outFile, []byte(md), 0o644)
}
