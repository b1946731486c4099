package testenv

import (
	"os"
	"testing"
)

// fakeTB records how RequireRoot ended the test.
type fakeTB struct {
	testing.TB
	failed, skipped bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true }
func (f *fakeTB) Skipf(string, ...any)  { f.skipped = true }

func TestRequireRoot(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		f := &fakeTB{}
		RequireRoot(f, "network namespaces")
		switch {
		case os.Geteuid() == 0:
			if f.failed || f.skipped {
				t.Errorf("CI=%q as root: failed=%v skipped=%v, want neither", ci, f.failed, f.skipped)
			}
		case ci == "":
			if !f.skipped || f.failed {
				t.Errorf("not root, no CI: want a skip")
			}
		default:
			if !f.failed {
				t.Errorf("not root, CI set: want a failure")
			}
		}
	}
}
