// Package testenv holds what tests need to know of the machine they run on.
package testenv

import (
	"os"
	"testing"
)

// RequireRoot skips a test that needs root (network namespaces, nftables)
// on a developer's machine without it, and fails it where CI is set: there
// a skip would pass a suite that proved nothing.
func RequireRoot(tb testing.TB, why string) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("needs root (%s), and CI is set: not skipping", why)
	}
	tb.Skipf("needs root (%s)", why)
}
