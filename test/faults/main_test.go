//go:build faults && linux

// Package faults runs crossproxy, and kube-proxy v1.37.2 in nftables mode
// on the same node for reference, through the faults operators meet on a
// real node (issue 40): bad objects from the API server, a firewall that
// rewrites the ruleset every second, an API server outage with a compacted
// history. Each test drives the real kube-apiserver (test/harness), runs the
// proxy inside a lab node's network namespace (lab_test.go) and proves what
// it claims with connections from a client namespace; the figures it logs
// (lines starting "FIGURE") are what test/results/faults.md records.
// `go test -short` is the short form `make test` runs: crossproxy only,
// the faults shortened to seconds.
package faults

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/crossproxy/crossproxy/test/harness"
)

// binary is the crossproxy built for this run.
var binary string

func TestMain(m *testing.M) { harness.MainWithCrossproxy(m, "fault tests", "xpf-bin-", &binary) }

// loadavg is the host's load average, recorded with every figure.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// figure logs one measured figure in the form test/results/faults.md quotes.
func figure(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE %s (load %s)", fmt.Sprintf(format, args...), loadavg())
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
