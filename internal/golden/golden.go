// Package golden compares test output with files under testdata: one helper
// and one flag, -update, which rewrites the files instead of comparing. It
// is for tests only.
package golden

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files instead of comparing with them")

// Check compares got with the file at path (relative to the test's package
// directory), or with -update writes got there; a difference fails the test
// with the lines only in the file (-) and only in got (+).
func Check(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file %s (go test -update writes it): %v", path, err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (go test -update rewrites it if intended):\n%s", path, LineDiff(string(want), got))
	}
}

// LineDiff lists the lines only in want (-) and only in got (+), sorted;
// when both hold the same lines in another order, it names the first line
// that differs.
func LineDiff(want, got string) string {
	count := map[string]int{}
	for _, l := range strings.Split(want, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(got, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
		for ; n < 0; n++ {
			out = append(out, "+ "+l)
		}
	}
	if len(out) == 0 {
		w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
		for i := range min(len(w), len(g)) {
			if w[i] != g[i] {
				return fmt.Sprintf("the same lines in another order; line %d is %q, want %q", i+1, g[i], w[i])
			}
		}
		return "the same lines, other line endings or trailing text"
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}
