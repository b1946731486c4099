//go:build installer

package installer

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLinuxNeedsOnlyNetAdmin runs the real Linux binary the way the DaemonSet
// does (root with every capability dropped but NET_ADMIN, no new privileges,
// the shipped ConfigMap's config) in a network namespace of its own, in
// standalone mode, and checks it programs its nftables table; the same run
// without NET_ADMIN must program nothing. This is what the manifest's
// capability list claims.
func TestLinuxNeedsOnlyNetAdmin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (network namespaces, nftables)")
	}
	dir := t.TempDir()
	bin := os.Getenv("CROSSPROXY_LINUX_BIN") // installer/test.sh builds it once
	if bin == "" {
		bin = filepath.Join(dir, "crossproxy")
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/crossproxy")
		build.Dir = RepoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(loadBundle(t, "linux").configMap.Data["config.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	objects := strings.Replace(testServiceYAML, "kubernetes.io/os: windows", "kubernetes.io/os: linux", 1)
	if err := os.WriteFile(filepath.Join(manifests, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		bounding string
		wantRule bool
	}{
		{"NET_ADMIN only", "-all,+net_admin", true},
		{"without NET_ADMIN", "-all,+net_raw,+net_bind_service", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("cpinst-%d-%v", os.Getpid(), tc.wantRule)
			ipNetns(t, "add", ns)
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
			if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
				t.Fatalf("lo up: %v\n%s", err, out)
			}
			var log bytes.Buffer
			cmd := exec.Command("ip", "netns", "exec", ns,
				"setpriv", "--bounding-set="+tc.bounding, "--inh-caps=-all", "--no-new-privs",
				bin, "run", "--config="+cfg, "--manifests="+manifests, "--hostname-override=node-a")
			cmd.Stdout, cmd.Stderr = &log, &log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
			}()

			deadline := time.Now().Add(10 * time.Second)
			if !tc.wantRule {
				deadline = time.Now().Add(3 * time.Second)
			}
			var rules string
			for time.Now().Before(deadline) {
				rules = nftList(ns)
				if strings.Contains(rules, "10.96.0.10") {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			got := strings.Contains(rules, "10.96.0.10")
			if got != tc.wantRule {
				t.Errorf("ClusterIP 10.96.0.10 programmed: %v, want %v\nnft:\n%s\nlog:\n%s", got, tc.wantRule, rules, tail(log.String(), 20))
			}
		})
	}
}

func ipNetns(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"netns"}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip netns %v: %v\n%s", args, err, out)
	}
}

func nftList(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "nft", "list", "ruleset").CombinedOutput()
	return string(out)
}
