//go:build installer

package installer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/hnsemu"
)

// TestMSIOnEmulatedHNS is the MSI's lifecycle on a Windows node whose HNS is
// the emulator (test/hnsemu): the release binary's own path to HNS, hcsshim
// into computenetwork.dll, runs for real. The MSI installed with msiexec
// under Wine starts the service, which programs the node from its
// properties alone; an upgrade to a second version keeps one load balancer,
// never two; `msiexec /x` removes the service, and `crossproxy cleanup`
// then leaves HNS exactly as the CNI left it. The service gets no
// environment of the test's, so the emulator listens where the DLL
// stand-ins look by default (hnsemu.DefaultAddr, node "default").
func TestMSIOnEmulatedHNS(t *testing.T) {
	dir := t.TempDir()
	exe := windowsExe(t, dir)
	v1 := buildMSI(t, exe, "0.0.1", dir)
	v2 := buildMSI(t, exe, "0.0.2", dir)
	w := newWinePrefix(t, dir)
	win := func(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

	// The DLL stand-ins, from their cached build, into this prefix.
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "test", "hnsemu", "dll", "build.sh")).Output()
	if err != nil {
		t.Fatalf("test/hnsemu/dll/build.sh: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	emuSys := filepath.Join(lines[len(lines)-1], "drive_c", "windows", "system32")
	for _, d := range []string{"computenetwork.dll", "vmcompute.dll"} {
		b, err := os.ReadFile(filepath.Join(emuSys, d))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(w.path(`C:\windows\system32\`+d), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := hnsemu.Start(hnsemu.DefaultAddr, "127.0.0.1:0")
	if err != nil {
		t.Skipf("the emulator's default address is taken (another emulator runs?): %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	const node, network = "default", "cbr0"
	if _, err := srv.CreateCNINetwork(hnsemu.CNINetwork{Node: node, Layout: "flannel-host-gw", Name: network, Subnet: "10.244.2.0/24"}); err != nil {
		t.Fatal(err)
	}
	cniMade := srv.State(node)

	manifests := w.path(`C:\crossproxy-test`)
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "service.yaml"), []byte(testServiceYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	installDir := `C:\crossproxy-msitest\`
	extraArgs := fmt.Sprintf(`EXTRAARGS=--manifests=C:\crossproxy-test --healthz-bind-address=127.0.0.1:%d --metrics-bind-address=127.0.0.1:%d --sync-period=2s`, freePort(t), freePort(t))
	// lbs are the emulated node's load balancers on the Service's ClusterIP.
	lbs := func() int {
		n := 0
		for _, lb := range srv.State(node).LoadBalancers {
			if len(lb.FrontendVIPs) == 1 && lb.FrontendVIPs[0] == "10.96.0.10" {
				n++
			}
		}
		return n
	}
	waitOne := func(what string) time.Duration {
		start := time.Now()
		for time.Since(start) < 60*time.Second {
			if lbs() == 1 {
				return time.Since(start)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: %d load balancers on 10.96.0.10 after 60 s, want 1; HNS calls %v", what, lbs(), srv.State(node).Calls)
		return 0
	}

	w.msiexec(0, "/i", win(v1), "INSTALLDIR="+installDir, "NETWORKNAME="+network, "NODENAME=node-a", extraArgs)
	t.Logf("msiexec /i %s: the Service's load balancer in HNS %s after msiexec returned", filepath.Base(v1), waitOne("install").Round(time.Millisecond))

	w.msiexec(0, "/i", win(v2)) // the major upgrade: service stopped, files replaced, started
	waitOne("upgrade")
	time.Sleep(5 * time.Second) // two sync periods of the new version
	if n := lbs(); n != 1 {
		t.Fatalf("after the upgrade: %d load balancers on 10.96.0.10, want exactly 1", n)
	}
	if v := w.regQuery(`HKLM\SOFTWARE\crossproxy`, "Version"); v != "0.0.2" {
		t.Fatalf("after the upgrade the installed version is %q", v)
	}

	w.msiexec(0, "/x", win(v2))
	if s := w.serviceState(); s != "" {
		t.Fatalf("after msiexec /x the service is still there: %s", s)
	}
	if lbs() != 1 {
		t.Fatalf("msiexec /x alone removed crossproxy's load balancer: the MSI runs no cleanup (installer/README.md says to run crossproxy cleanup)")
	}
	// The service wrote its ledger where its %ProgramData% is: under Wine's
	// service manager that is C:\users\Public (Wine gives services the
	// Public profile's), while a program started from a shell gets
	// C:\ProgramData, whatever its environment says; on Windows both are
	// C:\ProgramData. The ledger is put where cleanup looks, as it is on a
	// node.
	ledger, err := os.ReadFile(w.path(`C:\users\Public\crossproxy\hns-owned.json`))
	if err != nil {
		t.Fatalf("the service's ledger: %v", err)
	}
	if err := os.MkdirAll(w.path(`C:\ProgramData\crossproxy`), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w.path(`C:\ProgramData\crossproxy\hns-owned.json`), ledger, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, code := w.run(win(exe), "cleanup", "--network-name", network); code != 0 {
		t.Fatalf("crossproxy cleanup: exit %d\n%s", code, o)
	}
	after := srv.State(node)
	if len(after.LoadBalancers) != 0 || len(after.Endpoints) != len(cniMade.Endpoints) || len(after.Networks) != len(cniMade.Networks) {
		t.Fatalf("after msiexec /x and cleanup HNS holds %d load balancers, %d endpoints, %d networks; the CNI left %d, %d, %d",
			len(after.LoadBalancers), len(after.Endpoints), len(after.Networks), len(cniMade.LoadBalancers), len(cniMade.Endpoints), len(cniMade.Networks))
	}
}
