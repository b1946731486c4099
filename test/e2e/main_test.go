//go:build e2e && linux

// Package e2e proves crossproxy's Linux data plane with real packets: it builds
// network namespaces (a node running the real crossproxy binary in standalone
// mode, pod namespaces on a bridge behind it, an outside client), runs small
// echo servers in the pods and checks what clients get back.
package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// nsPrefix starts the name of every namespace these tests create, so a run can
// sweep what an interrupted run left behind.
const nsPrefix = "xpl-"

func TestMain(m *testing.M) {
	if os.Getenv(echoEnv) != "" {
		runEchoServer()
		return
	}
	if os.Geteuid() == 0 {
		sweepNamespaces()
	}
	os.Exit(m.Run())
}

// sweepNamespaces removes namespaces left by an earlier, interrupted run: those
// whose creating test process (its pid is in the name) is gone. A run going on
// at the same time keeps its namespaces.
func sweepNamespaces() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix+"e2e") {
			continue
		}
		pid, _, _ := strings.Cut(strings.TrimPrefix(f[0], nsPrefix+"e2e"), "-")
		if _, err := os.Stat("/proc/" + pid); err == nil && pid != "" {
			continue // its test process still runs
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}
