//go:build cluster

package cluster

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// statusRow is the part of `crossproxy status -o json` the test reads.
type statusRow struct {
	Node    string   `json:"node"`
	Healthy bool     `json:"healthy"`
	Reasons []string `json:"reasons"`
	Status  *struct {
		Version string `json:"version"`
	} `json:"status"`
}

// operator runs the crossproxy CLI as an operator does from their own
// machine: in xpc-cp, outside every node, with the cluster admin's
// kubeconfig, no pod environment, reaching the proxies only through the API
// server.
func (c *cluster) operator(args ...string) (string, int) {
	c.t.Helper()
	kc := filepath.Join(stateDir(), "pki", "admin.kubeconfig")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=/run/netns/xpc-cp", env(c.t, "XP_CROSSPROXY_BIN")}, append(args, "--kubeconfig", kc)...)...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	c.t.Fatalf("crossproxy %v: %v\n%s", args, err, out)
	return "", -1
}

func (c *cluster) statusRows() ([]statusRow, int, string) {
	c.t.Helper()
	out, code := c.operator("status", "-o", "json")
	var rows []statusRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		// The JSON comes first on stdout; the exit message after it.
		if i := strings.LastIndex(out, "]"); i < 0 || json.Unmarshal([]byte(out[:i+1]), &rows) != nil {
			c.t.Fatalf("status -o json (exit %d): %v\n%s", code, err, out)
		}
	}
	return rows, code, out
}

// proxyPID is the pid of node n's `crossproxy run` (its pod's container,
// found by the node's cgroup as cluster.sh's reboot finds it).
func proxyPID(t *testing.T, n string) int {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cg, err := os.ReadFile(p + "/cgroup")
		if err != nil || !strings.Contains(string(cg), ":/xpc-"+n+"/") {
			continue
		}
		cmd, _ := os.ReadFile(p + "/cmdline")
		if strings.HasPrefix(strings.ReplaceAll(string(cmd), "\x00", " "), "/usr/local/bin/crossproxy run ") {
			pid, _ := strconv.Atoi(filepath.Base(p))
			return pid
		}
	}
	t.Fatalf("no crossproxy run process of node xpc-%s", n)
	return 0
}

// TestStatus runs `crossproxy status`, `explain` and `bundle` from outside
// every node against the shipped DaemonSet: all healthy; then kube-proxy's
// nftables table appears on xpc-a (the leftover of a takeover gone wrong)
// and xpc-b's proxy stops (SIGSTOP: a hung process, its pod still Running),
// and status names both nodes and why, explain names the mismatch on xpc-a,
// the bundle holds each node's files and says why xpc-b's are missing.
func TestStatus(t *testing.T) {
	c := newCluster(t)
	if _, err := sh(context.Background(), "bash", c.script, "load", env(t, "XP_IMAGE_ARCHIVE")); err != nil {
		t.Fatal(err)
	}
	c.resetCrossproxy()
	c.deployCrossproxy(env(t, "XP_MANIFEST"), true)
	c.kubectlIn(workloads, "apply", "-f", "-")
	c.kubectl("-n", ns, "rollout", "status", "deployment/echo", "--timeout=3m")

	c.eventually("status: every node healthy", 60*time.Second, func() error {
		rows, code, out := c.statusRows()
		if code != 0 || len(rows) != 2 {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
	table, _ := c.operator("status")
	t.Logf("crossproxy status, healthy:\n%s", table)

	// The faults.
	if _, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-a", "nft", "add", "table", "ip", "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	defer sh(context.Background(), "nsenter", "--net=/run/netns/xpc-a", "nft", "delete", "table", "ip", "kube-proxy") //nolint:errcheck // best effort
	pid := proxyPID(t, "b")
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	defer cont()

	var rows []statusRow
	c.eventually("status names xpc-a's other proxy and xpc-b's silence", 90*time.Second, func() error {
		var code int
		var out string
		rows, code, out = c.statusRows()
		reasons := map[string]string{}
		for _, r := range rows {
			if !r.Healthy {
				reasons[r.Node] = strings.Join(r.Reasons, "; ")
			}
		}
		if code != 1 || !strings.Contains(reasons["xpc-a"], "kube-proxy") || reasons["xpc-b"] == "" {
			return fmt.Errorf("exit %d, unhealthy %v:\n%s", code, reasons, out)
		}
		return nil
	})
	table, code := c.operator("status")
	t.Logf("crossproxy status, kube-proxy's table on xpc-a and xpc-b's proxy stopped (exit %d):\n%s", code, table)
	if lines := strings.Split(table, "\n"); code != 1 || len(lines) < 3 || !strings.Contains(lines[1], " NO ") || !strings.Contains(lines[2], " NO ") {
		t.Errorf("status table exit %d, want 1 with both nodes unhealthy", code)
	}

	// explain of one node and of every node, from outside them.
	out, code := c.operator("explain", ns+"/echo", "--node", "xpc-a")
	if code != 1 || !strings.Contains(out, "kube-proxy") {
		t.Errorf("explain --node xpc-a: exit %d, want 1 naming kube-proxy:\n%s", code, out)
	}
	out, code = c.operator("explain", ns+"/echo", "--node-timeout", "10s")
	if code != 1 || !strings.Contains(out, "nodes that differ: xpc-a, xpc-b") {
		t.Errorf("explain on every node: exit %d, want 1 naming xpc-a and xpc-b:\n%s", code, out)
	}
	t.Logf("crossproxy explain %s/echo (every node):\n%.3000s", ns, out)

	// The bundle: xpc-a's files, xpc-b's errors.
	dir := t.TempDir()
	tgz := filepath.Join(dir, "bundle.tar.gz")
	if out, code := c.operator("bundle", "-f", tgz, "--node-timeout", "15s"); code != 0 {
		t.Fatalf("bundle: exit %d:\n%s", code, out)
	}
	files := untarGz(t, tgz)
	for _, want := range []string{"status.json", "versions.txt", "nodes/xpc-a/status.json", "nodes/xpc-a/explain-mismatch.json", "nodes/xpc-a/reports.json",
		"nodes/xpc-a/state.json", "nodes/xpc-a/logs.txt", "nodes/xpc-a/metrics.txt", "nodes/xpc-a/config.json", "nodes/xpc-b/errors.txt"} {
		if _, ok := files[want]; !ok {
			t.Errorf("bundle lacks %s", want)
		}
	}
	if !strings.Contains(files["nodes/xpc-a/explain-mismatch.json"], ns+"/echo") || !strings.Contains(files["nodes/xpc-a/explain-mismatch.json"], "kube-proxy") {
		t.Errorf("xpc-a's explain-mismatch.json does not explain %s/echo's mismatch:\n%.2000s", ns, files["nodes/xpc-a/explain-mismatch.json"])
	}
	if !strings.Contains(files["nodes/xpc-a/logs.txt"], "rules in sync") || !strings.Contains(files["nodes/xpc-a/metrics.txt"], "sync_proxy_rules") {
		t.Errorf("xpc-a's logs or metrics are not the proxy's")
	}

	// Healed: healthy again.
	cont()
	if _, err := sh(context.Background(), "nsenter", "--net=/run/netns/xpc-a", "nft", "delete", "table", "ip", "kube-proxy"); err != nil {
		t.Fatal(err)
	}
	c.eventually("status healthy again", 90*time.Second, func() error {
		_, code, out := c.statusRows()
		if code != 0 {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
}

// untarGz returns the files of a gzipped tarball by their path below its
// top directory.
func untarGz(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		_, rest, _ := strings.Cut(h.Name, "/")
		out[rest] = string(b)
	}
}
