//go:build installer

package installer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// Nothing here runs PowerShell (Wine has none), so install.ps1 is checked in
// the two ways that need none: its syntax, parsed with tree-sitter's
// PowerShell grammar (Windows PowerShell 5.1 syntax), and its settings table,
// which must map each setting exactly as the MSI does, since both installers
// remember settings in the same registry values and build the same service
// command line.

func installPS1() string { return filepath.Join(RepoRoot(), "installer", "windows", "install.ps1") }

// parserDir is where test/installer/tree-sitter.sh installed tree-sitter and
// its PowerShell grammar (test/setup-host.sh runs it; the versions live
// there). The test installs nothing itself: it fails, saying how to install.
func parserDir(t *testing.T) string {
	t.Helper()
	script := filepath.Join(RepoRoot(), "test", "installer", "tree-sitter.sh")
	out, err := exec.Command("bash", script, "dir").Output()
	if err != nil {
		t.Fatalf("%s dir: %v", script, err)
	}
	dir := strings.TrimSpace(string(out))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		t.Fatalf("tree-sitter and its PowerShell grammar are not installed in %s: run `bash test/setup-host.sh` "+
			"(or `bash %s install`, which needs node and npm)", dir, script)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is not installed: run `bash test/setup-host.sh`")
	}
	// The script must sit next to node_modules for ES module resolution.
	src, err := os.ReadFile(filepath.Join(RepoRoot(), "test", "installer", "ps-parse.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ps-parse.mjs"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func parsePS(t *testing.T, dir string, files ...string) (string, error) {
	cmd := exec.Command("node", append([]string{"--no-deprecation", "ps-parse.mjs"}, files...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestInstallPS1Parses(t *testing.T) {
	dir := parserDir(t)
	out, err := parsePS(t, dir, installPS1())
	if err != nil {
		t.Fatalf("install.ps1 has syntax errors:\n%s", out)
	}
	t.Log(strings.TrimSpace(out))

	// The checker must catch a broken script, or it proves nothing.
	src, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(t.TempDir(), "broken.ps1")
	mutated := strings.Replace(string(src), "function Get-MsiArguments([string]$MsiPath,", "function Get-MsiArguments([string]$MsiPath", 1)
	mutated = strings.Replace(mutated, "if ($v -eq '') { continue }", "if ($v -eq '') { continue ", 1)
	if err := os.WriteFile(broken, []byte(mutated), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := parsePS(t, dir, broken); err == nil {
		t.Errorf("a script with an unclosed brace parsed cleanly:\n%s", out)
	}
}

type psSetting struct{ Param, Property, Value, Flag, Quote string }

var settingRow = regexp.MustCompile(`@\{ Param = '(\w+)';\s+Property = '(\w+)';\s+Value = '(\w+)';\s+Flag = '([-\w]*)';\s+Quote = \$(true|false) \}`)

func psSettings(t *testing.T) []psSetting {
	t.Helper()
	src, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	var out []psSetting
	for _, m := range settingRow.FindAllStringSubmatch(string(src), -1) {
		out = append(out, psSetting{m[1], m[2], m[3], m[4], m[5]})
	}
	if len(out) == 0 {
		t.Fatal("install.ps1: no $Settings rows found")
	}
	return out
}

// TestInstallPS1MatchesMSI checks the script and the MSI agree on every
// setting: MSI property, remembered registry value, and the service flag.
func TestInstallPS1MatchesMSI(t *testing.T) {
	dir := t.TempDir()
	msi := buildMSI(t, windowsExe(t, dir), "0.0.5", dir)
	settings := psSettings(t)

	var wantTargets, gotTargets, wantValues, gotValues, wantSecure []string
	for _, s := range settings {
		switch {
		case s.Property == "ENABLEDSR":
			wantTargets = append(wantTargets, "[SERVICEARGS] "+s.Flag)
		case s.Flag == "":
			wantTargets = append(wantTargets, fmt.Sprintf("[SERVICEARGS] [%s]", s.Property))
		case s.Quote == "true":
			wantTargets = append(wantTargets, fmt.Sprintf(`[SERVICEARGS] %s "[%s]"`, s.Flag, s.Property))
		default:
			wantTargets = append(wantTargets, fmt.Sprintf("[SERVICEARGS] %s [%s]", s.Flag, s.Property))
		}
		wantValues = append(wantValues, s.Value+"=["+s.Property+"]")
		wantSecure = append(wantSecure, s.Property)
	}
	for _, r := range msiTable(t, msi, "CustomAction") {
		if strings.HasPrefix(r[0], "Args") && r[0] != "ArgsBase" {
			gotTargets = append(gotTargets, r[3])
		}
		if r[0] == "ArgsBase" && !strings.Contains(r[3], `service run -- --config "`) {
			t.Errorf("MSI ArgsBase %q", r[3])
		}
	}
	// Registry: Registry, Root, Key, Name, Value, Component_.
	for _, r := range msiTable(t, msi, "Registry") {
		if strings.TrimSuffix(r[2], `\`) == `SOFTWARE\crossproxy` && strings.HasPrefix(r[4], "[") && r[3] != "InstallDir" {
			gotValues = append(gotValues, r[3]+"="+r[4])
		}
	}
	sort.Strings(wantTargets)
	sort.Strings(gotTargets)
	sort.Strings(wantValues)
	sort.Strings(gotValues)
	if strings.Join(wantTargets, "\n") != strings.Join(gotTargets, "\n") {
		t.Errorf("service flags differ:\ninstall.ps1 %q\nMSI         %q", wantTargets, gotTargets)
	}
	if strings.Join(wantValues, "\n") != strings.Join(gotValues, "\n") {
		t.Errorf("remembered registry values differ:\ninstall.ps1 %q\nMSI         %q", wantValues, gotValues)
	}
	props := keyed(msiTable(t, msi, "Property"))["SecureCustomProperties"]
	for _, p := range wantSecure {
		if props == nil || !strings.Contains(";"+props[1]+";", ";"+p+";") {
			t.Errorf("install.ps1 passes %s, which the MSI does not declare secure", p)
		}
	}

	src, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`$runArgs = @('--config', $ConfigPath)`, `@('service', 'install', '--name', $ServiceName, '--binary', $target, '--') + $runArgs`} {
		if !strings.Contains(string(src), want) {
			t.Errorf("install.ps1 does not register the service like the MSI (service run -- --config ...): %s missing", want)
		}
	}
}

// TestInstallPS1DefaultConfig checks the config a bare-binary install writes
// is the file the MSI ships.
func TestInstallPS1DefaultConfig(t *testing.T) {
	src, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\$DefaultConfig = @'\r?\n(.*?)\r?\n'@`).FindSubmatch(src)
	if m == nil {
		t.Fatal("install.ps1: no $DefaultConfig here-string")
	}
	want, err := os.ReadFile(filepath.Join(RepoRoot(), "installer", "windows", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(m[1])) != strings.TrimSpace(string(want)) {
		t.Errorf("install.ps1 $DefaultConfig differs from installer/windows/config.yaml")
	}
}

// psFunction returns the text of the install.ps1 function name, from its
// "function" line to the closing brace at the start of a line (the script's
// style for every function).
func psFunction(t *testing.T, src, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?ms)^function ` + regexp.QuoteMeta(name) + `\b.*?^\}`).FindString(src)
	if m == "" {
		t.Fatalf("install.ps1: no function %s", name)
	}
	return m
}

// psNetworkPattern compiles install.ps1's $NetworkFlagPattern, the .NET regex
// Get-ServiceNetwork reads the installed service's network with. It uses
// only syntax .NET and Go read alike (named groups, classes, alternation).
func psNetworkPattern(t *testing.T) *regexp.Regexp {
	t.Helper()
	src, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\$NetworkFlagPattern = '([^']*)'`).FindSubmatch(src)
	if m == nil {
		t.Fatal("install.ps1: no $NetworkFlagPattern = '...'")
	}
	re, err := regexp.Compile(string(m[1]))
	if err != nil {
		t.Fatalf("install.ps1 $NetworkFlagPattern: %v", err)
	}
	return re
}

// serviceNetwork does what Get-ServiceNetwork does with the pattern: the last
// match wins, its quoted or bare value.
func serviceNetwork(re *regexp.Regexp, commandLine string) string {
	network := ""
	quoted, bare := re.SubexpIndex("quoted"), re.SubexpIndex("bare")
	for _, m := range re.FindAllStringSubmatchIndex(commandLine, -1) {
		if g := quoted; m[2*g] >= 0 { // the group took part (.NET: Success)
			network = commandLine[m[2*g]:m[2*g+1]]
		} else if g := bare; m[2*g] >= 0 {
			network = commandLine[m[2*g]:m[2*g+1]]
		}
	}
	return network
}

// TestInstallPS1CleanupWithoutNetwork: `install.ps1 -Uninstall -Cleanup` on a
// default install (no -NetworkName then or now) runs `crossproxy cleanup`
// instead of refusing. The network it passes is the one the installed service
// runs with, read from its command line, and with none it passes no
// --network-name, so crossproxy cleanup takes the network its ledger recorded
// (platform_windows TestCleanupUsesRecordedNetwork). PowerShell cannot run
// here: the script's uninstall path is checked by its text, and the pattern
// that reads the network by running it on the command lines both installers
// write (TestMSIUnderWine runs it on the ImagePath the MSI wrote under Wine).
func TestInstallPS1CleanupWithoutNetwork(t *testing.T) {
	b, err := os.ReadFile(installPS1())
	if err != nil {
		t.Fatal(err)
	}
	src := strings.ReplaceAll(string(b), "\r\n", "\n")
	uninstall := psFunction(t, src, "Invoke-Uninstall")
	for _, refusal := range []string{"-NetworkName", "needs the HNS network"} {
		if strings.Contains(uninstall, refusal) {
			t.Errorf("Invoke-Uninstall still mentions %q: -Cleanup must not need a network given", refusal)
		}
	}
	for _, want := range []string{
		"$commandLine = Get-ServiceCommandLine",
		"$cleanupArgs = Get-CleanupArguments -Given $given -CommandLine $commandLine",
		"& $exe @cleanupArgs",
	} {
		if !strings.Contains(uninstall, want) {
			t.Errorf("Invoke-Uninstall lacks %q: cleanup must run with the arguments built from the service's command line", want)
		}
	}
	if stop, run := strings.Index(uninstall, "Stop-Service"), strings.Index(uninstall, "& $exe @cleanupArgs"); run >= 0 && (stop < 0 || stop > run) {
		t.Errorf("Invoke-Uninstall runs cleanup before stopping the service, which would put the load balancers back")
	}
	args := psFunction(t, src, "Get-CleanupArguments")
	for _, want := range []string{
		"$cleanupArgs = @('cleanup')",
		"if ($network -ne '') { $cleanupArgs += @('--network-name', $network) }",
		"$network = Get-ServiceNetwork -CommandLine $CommandLine",
	} {
		if !strings.Contains(args, want) {
			t.Errorf("Get-CleanupArguments lacks %q: --network-name only when a network is known, else the ledger's", want)
		}
	}

	re := psNetworkPattern(t)
	for _, c := range []struct{ name, commandLine, want string }{
		{"MSI, NETWORKNAME (quoted)", `"C:\Program Files\crossproxy\crossproxy.exe" service run -- --config "C:\ProgramData\crossproxy\config.yaml" --network-name "Calico" --hostname-override node-a`, "Calico"},
		{"MSI, default install", `"C:\Program Files\crossproxy\crossproxy.exe" service run -- --config "C:\ProgramData\crossproxy\config.yaml" --cluster-cidr 10.244.0.0/16`, ""},
		{"MSI, EXTRAARGS after NETWORKNAME (the last wins)", `"C:\Program Files\crossproxy\crossproxy.exe" service run -- --config "C:\ProgramData\crossproxy\config.yaml" --network-name "Calico" --network-name=vxlan0`, "vxlan0"},
		{"service install (install.ps1 -Binary)", `"C:\Program Files\crossproxy\crossproxy.exe" service run --name crossproxy -- --config C:\ProgramData\crossproxy\config.yaml --network-name flannel.4096 --source-vip 10.244.3.2`, "flannel.4096"},
		{"service install, name with a space", `"C:\Program Files\crossproxy\crossproxy.exe" service run --name crossproxy -- --network-name "pod net"`, "pod net"},
		{"service install, default", `"C:\Program Files\crossproxy\crossproxy.exe" service run --name crossproxy -- --config C:\ProgramData\crossproxy\config.yaml`, ""},
		{"no service", ``, ""},
	} {
		if got := serviceNetwork(re, c.commandLine); got != c.want {
			t.Errorf("%s: network %q from %s, want %q", c.name, got, c.commandLine, c.want)
		}
	}
}
