//go:build installer

package installer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The MSI suite needs wixl, msitools, Wine and mingw (test/setup-host.sh
// installs them); `make test-installer` runs it with -tags installer.

// windowsExe returns the crossproxy windows/amd64 binary to pack: the one
// `make msi` built (CROSSPROXY_WINDOWS_EXE), or a fresh build.
func windowsExe(t *testing.T, dir string) string {
	t.Helper()
	if exe := os.Getenv("CROSSPROXY_WINDOWS_EXE"); exe != "" {
		return exe
	}
	exe := filepath.Join(dir, "crossproxy.exe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", exe, "./cmd/crossproxy")
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build windows binary: %v\n%s", err, out)
	}
	return exe
}

// buildMSI runs installer/msi.sh, as `make msi` does.
func buildMSI(t *testing.T, exe, version, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "crossproxy-"+version+".msi")
	cmd := exec.Command("bash", filepath.Join(RepoRoot(), "installer", "msi.sh"), exe,
		filepath.Join(RepoRoot(), "installer", "windows", "config.yaml"), version,
		filepath.Join(dir, "stage-"+version), out)
	cmd.Env = append(os.Environ(), "CERT=", "KEY=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("msi.sh %s: %v\n%s", version, err, b)
	}
	return out
}

// msiTable exports one table with msiinfo: rows of columns, headers dropped.
func msiTable(t *testing.T, msi, table string) [][]string {
	t.Helper()
	out, err := exec.Command("msiinfo", "export", msi, table).Output()
	if err != nil {
		t.Fatalf("msiinfo export %s: %v", table, err)
	}
	var rows [][]string
	for i, line := range strings.Split(strings.ReplaceAll(string(out), "\r", ""), "\n") {
		if i < 3 || line == "" {
			continue
		}
		rows = append(rows, strings.Split(line, "\t"))
	}
	return rows
}

// keyed indexes rows by their first column.
func keyed(rows [][]string) map[string][]string {
	m := map[string][]string{}
	for _, r := range rows {
		m[r[0]] = r
	}
	return m
}

func TestMSITables(t *testing.T) {
	dir := t.TempDir()
	msi := buildMSI(t, windowsExe(t, dir), "1.2.3", dir)

	files := keyed(msiTable(t, msi, "File"))
	for id, want := range map[string][2]string{"CrossproxyExe": {"CrossproxyExe", "crossproxy.exe"}, "ConfigYaml": {"ConfigFile", "config.yaml"}} {
		if r := files[id]; r == nil || r[1] != want[0] || r[2] != want[1] {
			t.Errorf("File %s: %v, want component %s file %s", id, r, want[0], want[1])
		}
	}

	comps := keyed(msiTable(t, msi, "Component"))
	wantComp := map[string][2]string{ // directory, attributes
		"CrossproxyExe": {"INSTALLDIR", "256"}, // 64-bit
		"Settings":      {"INSTALLDIR", "260"}, // 64-bit, registry key path
		"EventSource":   {"INSTALLDIR", "260"}, // 64-bit, registry key path
		"ConfigFile":    {"CONFIGDIR", "400"},  // 64-bit, NeverOverwrite, Permanent
	}
	if len(comps) != len(wantComp) {
		t.Errorf("components %v, want %v", comps, wantComp)
	}
	for id, want := range wantComp {
		if r := comps[id]; r == nil || r[2] != want[0] || r[3] != want[1] {
			t.Errorf("Component %s: %v, want directory %s attributes %s", id, r, want[0], want[1])
		}
	}

	dirs := keyed(msiTable(t, msi, "Directory"))
	if r := dirs["INSTALLDIR"]; r == nil || r[1] != "ProgramFiles64Folder" || r[2] != "crossproxy" {
		t.Errorf("Directory INSTALLDIR: %v, want ProgramFiles64Folder\\crossproxy", r)
	}
	if r := dirs["CONFIGDIR"]; r == nil || r[1] != "CommonAppDataFolder" || r[2] != "crossproxy" {
		t.Errorf("Directory CONFIGDIR: %v, want CommonAppDataFolder\\crossproxy", r)
	}

	// Name, DisplayName, ServiceType, StartType, ErrorControl, LoadOrderGroup,
	// Dependencies, StartName, Password, Arguments, Component_.
	si := keyed(msiTable(t, msi, "ServiceInstall"))["CrossproxyService"]
	if si == nil || si[1] != "crossproxy" || si[3] != "16" || si[4] != "2" || si[8] != "LocalSystem" ||
		si[10] != "[SERVICEARGS]" || si[11] != "CrossproxyExe" {
		t.Errorf("ServiceInstall: %q, want crossproxy, own process (16), automatic (2), LocalSystem, [SERVICEARGS], on CrossproxyExe", si)
	}
	// Event 163: start on install (1), stop on install (2) and uninstall (32), delete on uninstall (128).
	// Restart on failure (5 s, 10 s, 30 s; reset after a day), as `crossproxy
	// service install` sets it, on install and reinstall (Event 1 + 4).
	fa := keyed(msiTable(t, msi, "MsiServiceConfigFailureActions"))["CrossproxyRestart"]
	if want := []string{"CrossproxyRestart", "crossproxy", "5", "86400", "", "", "1[~]1[~]1", "5000[~]10000[~]30000", "CrossproxyExe"}; !slices.Equal(fa, want) {
		t.Errorf("MsiServiceConfigFailureActions: %q, want %q", fa, want)
	}
	// Those restarts cover a crash only unless the failure actions flag is set:
	// a failing sync loop stops the service with a service-specific exit code
	// (SERVICE_STOPPED), which Windows restarts only with
	// fFailureActionsOnNonCrashFailures. MsiServiceConfig, Name, Event
	// (install + reinstall), ConfigType 4 (SERVICE_CONFIG_FAILURE_ACTIONS_FLAG),
	// Argument 1, Component_; `crossproxy service install` sets the same.
	cfg := msiTable(t, msi, "MsiServiceConfig")
	if want := [][]string{{"CrossproxyRestartNonCrash", "crossproxy", "5", "4", "1", "CrossproxyExe"}}; !slices.EqualFunc(cfg, want, slices.Equal) {
		t.Errorf("MsiServiceConfig: %q, want only %q (restart also on a stop with a non-zero exit code)", cfg, want)
	}
	sc := keyed(msiTable(t, msi, "ServiceControl"))["CrossproxyService"]
	if sc == nil || sc[1] != "crossproxy" || sc[2] != "163" || sc[4] != "1" || sc[5] != "CrossproxyExe" {
		t.Errorf("ServiceControl: %q, want crossproxy, event 163, wait, on CrossproxyExe", sc)
	}

	// UpgradeCode, VersionMin, VersionMax, Language, Attributes, Remove, ActionProperty.
	up := msiTable(t, msi, "Upgrade")
	const upgradeCode = "{E608443E-1D58-46AE-88E2-F2B64A709E6D}"
	var sawUpgrade, sawDowngrade bool
	for _, r := range up {
		if r[0] != upgradeCode {
			t.Errorf("Upgrade row %q: UpgradeCode changed; every release must keep %s", r, upgradeCode)
		}
		switch r[6] {
		case "WIX_UPGRADE_DETECTED":
			sawUpgrade = r[2] == "1.2.3" && r[4] == "513" // up to and including this version
		case "WIX_DOWNGRADE_DETECTED":
			sawDowngrade = r[1] == "1.2.3" && r[4] == "2" // only detect newer ones
		}
	}
	if !sawUpgrade || !sawDowngrade {
		t.Errorf("Upgrade table %q: want an upgrade row to 1.2.3 inclusive (513) and a downgrade detection row", up)
	}

	props := keyed(msiTable(t, msi, "Property"))
	if r := props["ProductVersion"]; r == nil || r[1] != "1.2.3" {
		t.Errorf("ProductVersion %v, want 1.2.3", r)
	}
	secure := props["SecureCustomProperties"]
	for _, p := range []string{"KUBECONFIG", "NETWORKNAME", "SOURCEVIP", "NODENAME", "CLUSTERCIDR", "ENABLEDSR", "EXTRAARGS"} {
		if secure == nil || !strings.Contains(";"+secure[1]+";", ";"+p+";") {
			t.Errorf("SecureCustomProperties %v lacks %s", secure, p)
		}
	}

	// Sequencing: wixl honours explicit numbers, so check the order that matters.
	seq := map[string]int{}
	for _, r := range msiTable(t, msi, "InstallExecuteSequence") {
		n, err := strconv.Atoi(r[2])
		if err != nil {
			t.Fatalf("InstallExecuteSequence %q: %v", r, err)
		}
		seq[r[0]] = n
	}
	before := func(a, b string) {
		if seq[a] == 0 || seq[b] == 0 || seq[a] >= seq[b] {
			t.Errorf("InstallExecuteSequence: %s (%d) must come before %s (%d)", a, seq[a], b, seq[b])
		}
	}
	for _, p := range []string{"Kubeconfig", "NetworkName", "SourceVip", "NodeName", "ClusterCidr", "EnableDsr", "ExtraArgs"} {
		before("AppSearch", "Recall"+p)
		before("Recall"+p, "CostFinalize")
	}
	before("CostFinalize", "ArgsBase")
	prev := "ArgsBase"
	for _, a := range []string{"ArgsKubeconfig", "ArgsNetworkName", "ArgsSourceVip", "ArgsNodeName", "ArgsClusterCidr", "ArgsEnableDsr", "ArgsExtra"} {
		before(prev, a)
		prev = a
	}
	before(prev, "InstallValidate")
	before("InstallValidate", "RemoveExistingProducts")
	before("RemoveExistingProducts", "InstallInitialize")
	before("InstallFiles", "InstallServices")
	before("InstallServices", "MsiConfigureServices")
	before("MsiConfigureServices", "StartServices")
	before("StopServices", "DeleteServices")

	ca := keyed(msiTable(t, msi, "CustomAction"))
	if r := ca["ArgsBase"]; r == nil || !strings.HasPrefix(r[3], `service run -- --config "[CommonAppDataFolder]crossproxy\config.yaml"`) {
		t.Errorf("ArgsBase %q: the service must run: service run -- --config <ProgramData config>", r)
	}
}

// winePrefix is a private Wine prefix with the Go shim; cleanup stops every
// process Wine started in it.
type winePrefix struct {
	t   *testing.T
	dir string
}

func newWinePrefix(t *testing.T, dir string) *winePrefix {
	t.Helper()
	w := &winePrefix{t: t, dir: filepath.Join(dir, "wine")}
	// test/wine/wine-exec (the Windows suite's runner) creates the prefix and
	// installs the bcryptprimitives.dll shim Go binaries need under Wine 8.
	for _, args := range [][]string{
		{filepath.Join(RepoRoot(), "test", "wine", "wine-exec"), "cmd", "/c", "exit", "0"},
		{"wineserver", "-w"}, // let that server end before the persistent one starts
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = w.env()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("wine prefix: %v: %v\n%s", args, err, out)
		}
	}
	// A persistent wineserver: otherwise Wine shuts the prefix down, services
	// included, a moment after the last ordinary process (msiexec) exits.
	// It stays in the foreground, so it is started and stopped with the test.
	server := exec.Command("wineserver", "-f", "-p")
	server.Env = w.env()
	if err := server.Start(); err != nil {
		t.Fatalf("wineserver -p: %v", err)
	}
	t.Cleanup(func() {
		k := exec.Command("wineserver", "-k")
		k.Env = w.env()
		_ = k.Run()
		done := make(chan struct{})
		go func() { _ = server.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = server.Process.Kill()
			<-done
		}
	})
	return w
}

func (w *winePrefix) env() []string {
	return append(os.Environ(), "WINEPREFIX="+w.dir, "WINEDEBUG=-all", "WINEARCH=win64")
}

// run runs a Windows program in the prefix and returns its output and exit
// status (Linux keeps the low 8 bits: 1603 reads as 67).
func (w *winePrefix) run(args ...string) (string, int) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wine", args...)
	cmd.Env = w.env()
	// A file, not a pipe: Wine's services started on the way inherit the
	// output handle and keep a pipe open long after the command ended.
	out, err := os.CreateTemp(filepath.Dir(w.dir), "wine-out-*")
	if err != nil {
		w.t.Fatal(err)
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			w.t.Fatalf("wine %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	b, _ := os.ReadFile(out.Name())
	return string(b), code
}

// path maps a Windows path under C:\ into the prefix.
func (w *winePrefix) path(win string) string {
	rel := strings.ReplaceAll(strings.TrimPrefix(win, `C:\`), `\`, "/")
	return filepath.Join(w.dir, "drive_c", rel)
}

// msiexec runs msiexec with a verbose log and prints the log on failure.
func (w *winePrefix) msiexec(wantCode int, args ...string) {
	w.t.Helper()
	log := filepath.Join(filepath.Dir(w.dir), fmt.Sprintf("msiexec-%d.log", time.Now().UnixNano()))
	out, code := w.run(append(append([]string{"msiexec"}, args...), "/qn", "/l*v", "Z:"+strings.ReplaceAll(log, "/", `\`))...)
	if code != wantCode {
		b, _ := os.ReadFile(log)
		w.t.Fatalf("msiexec %v: exit %d, want %d\n%s\n--- log (tail) ---\n%s", args, code, wantCode, out, tail(string(b), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// serviceState asks Wine's service manager for the state word (RUNNING, ...)
// of the crossproxy service, or "" when it does not exist.
func (w *winePrefix) serviceState() string {
	out, _ := w.run("sc", "query", "crossproxy")
	m := regexp.MustCompile(`STATE\s*:\s*\d+\s+(\w+)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// servicePID finds the live crossproxy service process of this prefix (Wine
// shows the Windows command line in /proc), or 0.
func (w *winePrefix) servicePID() int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		env, err := os.ReadFile(filepath.Join(p, "environ"))
		if err != nil || !bytes.Contains(env, []byte("WINEPREFIX="+w.dir+"\x00")) {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		stat, _ := os.ReadFile(filepath.Join(p, "stat"))
		if !bytes.Contains(cmd, []byte("crossproxy.exe")) || !bytes.Contains(cmd, []byte("service")) {
			continue
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) == 0 || f[0] == "Z" {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		return pid
	}
	return 0
}

// serviceLog is the service's own log file: crossproxy service run's default,
// %ProgramData%\crossproxy\crossproxy.log, where Wine's service manager sets
// ProgramData to C:\users\Public.
func (w *winePrefix) serviceLog() string {
	for _, p := range []string{`C:\users\Public\crossproxy\crossproxy.log`, `C:\ProgramData\crossproxy\crossproxy.log`} {
		if b, err := os.ReadFile(w.path(p)); err == nil {
			return string(b)
		}
	}
	return ""
}

// waitRunning waits until the service manager reports the service running, its
// process is alive and has logged its start (the starts-th one in the log),
// then checks the same process still runs two seconds later: a service that
// starts and dies fails here. Wine's service manager alone is not enough: it
// can report RUNNING for a process that already exited.
func (w *winePrefix) waitRunning(starts int) int {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var pid int
	for {
		pid = w.servicePID()
		if pid != 0 && w.serviceState() == "RUNNING" && strings.Count(w.serviceLog(), "started as service") >= starts {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("service crossproxy: state %q, process %d, want RUNNING with a live process and start #%d logged\nlog:\n%s",
				w.serviceState(), pid, starts, tail(w.serviceLog(), 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if now := w.servicePID(); now != pid {
		w.t.Fatalf("service process %d gone two seconds after it started (now %d)\nlog:\n%s", pid, now, tail(w.serviceLog(), 30))
	}
	return pid
}

// waitNoService waits until no service process is left, for at most
// timeout, and returns the one still running then (0 when none): msiexec /x
// returns once the service is deleted, and Wine may still be ending its
// process.
func (w *winePrefix) waitNoService(timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		pid := w.servicePID()
		if pid == 0 || time.Now().After(deadline) {
			return pid
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *winePrefix) regQuery(key, value string) string {
	out, code := w.run("reg", "query", key, "/v", value)
	if code != 0 {
		return ""
	}
	m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(value) + `\s+REG_\w+\s+(.*?)\r?$`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

const serviceKey = `HKLM\System\CurrentControlSet\Services\crossproxy`

// TestMSIUnderWine installs the MSI, upgrades it in place with a newer one,
// refuses a downgrade and uninstalls it, each time with the real crossproxy
// service started or stopped by Wine's service manager. The service runs in
// standalone mode (a manifest directory, no API server); HNS is absent under
// Wine, so its syncs fail and are retried while the service keeps running.
func TestMSIUnderWine(t *testing.T) {
	dir := t.TempDir()
	exe := windowsExe(t, dir)
	v1 := buildMSI(t, exe, "0.0.1", dir)
	v2 := buildMSI(t, exe, "0.0.2", dir)
	w := newWinePrefix(t, dir)
	win := func(p string) string { return "Z:" + strings.ReplaceAll(p, "/", `\`) }

	// Standalone mode's input: one Service with one endpoint.
	manifests := w.path(`C:\crossproxy-test`)
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manifests, "service.yaml"), []byte(testServiceYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	// Wine's msi writes the service's ImagePath unquoted (Windows Installer
	// quotes it), and an unquoted path with a space splits the command line
	// before the binary sees it; so under Wine the binary goes to a directory
	// without spaces, through the public INSTALLDIR property. The table test
	// checks the default, Program Files\crossproxy.
	installDir := `C:\crossproxy-msitest\`
	exePath := w.path(installDir + "crossproxy.exe")
	configPath := w.path(`C:\ProgramData\crossproxy\config.yaml`)

	// Free loopback ports for the service's health and metrics servers, so it
	// cannot collide with anything else on the host.
	healthz, metrics := freePort(t), freePort(t)
	extraArgs := fmt.Sprintf(`EXTRAARGS=--manifests=C:\crossproxy-test --healthz-bind-address=127.0.0.1:%d --metrics-bind-address=127.0.0.1:%d`, healthz, metrics)
	livez := func(t *testing.T) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/livez", healthz))
		if err != nil {
			t.Errorf("the service does not answer /livez: %v", err)
			return
		}
		resp.Body.Close()
		t.Logf("/livez: %s (HNS is absent under Wine, so syncs fail and retry)", resp.Status)
	}
	var pid int
	t.Run("install", func(t *testing.T) {
		w.t = t
		w.msiexec(0, "/i", win(v1), "INSTALLDIR="+installDir, "NETWORKNAME=crossproxy-test", "NODENAME=node-a",
			"CLUSTERCIDR=10.244.0.0/16", extraArgs)
		for _, f := range []string{exePath, configPath} {
			if _, err := os.Stat(f); err != nil {
				t.Errorf("installed file: %v", err)
			}
		}
		img := w.regQuery(serviceKey, "ImagePath")
		for _, want := range []string{`crossproxy.exe service run -- --config "C:\ProgramData\crossproxy\config.yaml"`,
			`--network-name "crossproxy-test"`, "--hostname-override node-a", "--cluster-cidr 10.244.0.0/16", `--manifests=C:\crossproxy-test`} {
			if !strings.Contains(img, want) {
				t.Errorf("service ImagePath %q lacks %q", img, want)
			}
		}
		// install.ps1 -Uninstall -Cleanup reads the network from this command line.
		if got := serviceNetwork(psNetworkPattern(t), img); got != "crossproxy-test" {
			t.Errorf("install.ps1's network pattern reads %q from the MSI's ImagePath %q, want crossproxy-test", got, img)
		}
		if strings.Contains(img, "--kubeconfig") || strings.Contains(img, "--source-vip") || strings.Contains(img, "--enable-dsr") {
			t.Errorf("service ImagePath %q has flags for properties that were not given", img)
		}
		if v := w.regQuery(serviceKey, "Start"); v != "0x2" {
			t.Errorf("service start type %q, want automatic (0x2)", v)
		}
		// Restart on failure, crash or not, is MsiConfigureServices' work
		// (MsiServiceConfigFailureActions, MsiServiceConfig). Wine's msi reports
		// VersionMsi 4.5, so the action's condition (VersionMsi >= 5.00) skips
		// it and its service manager keeps neither value; TestMSITables checks
		// the rows. A Wine that applies them must write the flag as 1.
		if v := w.regQuery(serviceKey, "FailureActionsOnNonCrashFailures"); v != "" && v != "0x1" {
			t.Errorf("FailureActionsOnNonCrashFailures %q, want 0x1 (restart also on a stop with a non-zero exit code)", v)
		} else if v == "" {
			t.Logf("no FailureActionsOnNonCrashFailures value: this msi did not run MsiConfigureServices (Wine's: VersionMsi 4.5)")
		}
		pid = w.waitRunning(1)
		livez(t)
	})
	if t.Failed() {
		return
	}

	t.Run("upgrade keeps the edited config and the settings", func(t *testing.T) {
		w.t = t
		edited := "\n# edited by the admin\n"
		f, err := os.OpenFile(configPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(edited)
		_ = f.Close()

		w.msiexec(0, "/i", win(v2)) // no properties: the remembered ones apply
		if v := w.regQuery(`HKLM\SOFTWARE\crossproxy`, "Version"); v != "0.0.2" {
			t.Errorf("installed version %q, want 0.0.2", v)
		}
		b, err := os.ReadFile(configPath)
		if err != nil || !strings.HasSuffix(string(b), edited) {
			t.Errorf("config.yaml after upgrade lost the admin's edit (err %v):\n%s", err, b)
		}
		img := w.regQuery(serviceKey, "ImagePath")
		for _, want := range []string{`--network-name "crossproxy-test"`, "--hostname-override node-a", `--manifests=C:\crossproxy-test`, fmt.Sprintf("--healthz-bind-address=127.0.0.1:%d", healthz)} {
			if !strings.Contains(img, want) {
				t.Errorf("service ImagePath after upgrade %q lacks remembered %q", img, want)
			}
		}
		if next := w.waitRunning(2); next == pid {
			t.Errorf("service process %d survived the upgrade: the old binary was not stopped and restarted", pid)
		} else {
			pid = next
		}
		if _, err := os.Stat(exePath); err != nil {
			t.Errorf("upgrade did not keep the install directory given at the first install: %v", err)
		}
		livez(t)
	})
	if t.Failed() {
		return
	}

	t.Run("downgrade is refused", func(t *testing.T) {
		w.t = t
		w.msiexec(1603&0xff, "/i", win(v1))
		if v := w.regQuery(`HKLM\SOFTWARE\crossproxy`, "Version"); v != "0.0.2" {
			t.Errorf("version after a refused downgrade %q, want 0.0.2", v)
		}
		if now := w.servicePID(); now != pid {
			t.Errorf("service process changed from %d to %d by a refused downgrade", pid, now)
		}
	})

	t.Run("uninstall", func(t *testing.T) {
		w.t = t
		w.msiexec(0, "/x", win(v2))
		if s := w.serviceState(); s != "" {
			t.Errorf("service still registered after uninstall: %s", s)
		}
		if now := w.waitNoService(15 * time.Second); now != 0 {
			t.Errorf("service process %d still running 15 s after uninstall", now)
		}
		// Wine's msiexec sometimes ends the service process without
		// delivering SERVICE_CONTROL_STOP (neither the "stopping" nor the
		// "stopped" line is written, yet the process is gone and the service
		// deleted; seen in about half the runs on 2026-12-02). The clean stop
		// itself is proven by test/wine/service-test.sh, which stops the
		// service through the service manager and checks both entries; here
		// its absence is only reported.
		if !strings.Contains(w.serviceLog(), "stopped; load balancers left in place") {
			t.Logf("no clean-stop line in the service log (Wine ended the process without a stop control):\n%s", tail(w.serviceLog(), 20))
		}
		if _, err := os.Stat(exePath); !os.IsNotExist(err) {
			t.Errorf("%s after uninstall: %v, want it gone", exePath, err)
		}
		if v := w.regQuery(`HKLM\SOFTWARE\crossproxy`, "Version"); v != "" {
			t.Errorf("HKLM\\SOFTWARE\\crossproxy still there after uninstall (Version %q)", v)
		}
		if _, err := os.Stat(configPath); err != nil {
			t.Errorf("config.yaml must survive uninstall (it is the admin's): %v", err)
		}
	})
}

// testServiceYAML is standalone mode's input: this node (it must be there) and
// one Service with one endpoint on another node.
const testServiceYAML = `apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels: {kubernetes.io/os: windows}
status:
  addresses:
  - {type: InternalIP, address: 10.0.0.11}
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  ports:
  - name: http
    port: 80
    protocol: TCP
    targetPort: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: ["10.244.1.5"]
  conditions: {ready: true}
  nodeName: node-b
`
