package installer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unitSettings reads a systemd unit or environment file into key -> values
// (a key may repeat); comments and section headers are skipped.
func unitSettings(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not key=value", path, line)
		}
		m[k] = append(m[k], v)
	}
	return m
}

// TestSystemdUnit pins the unit's promises: restarts, only CAP_NET_ADMIN,
// netlink allowed, the host network (no PrivateNetwork), and an ExecStart
// that runs the config file the environment file names, which is the shipped
// config's install path. systemd-analyze verify runs in installer/test.sh.
func TestSystemdUnit(t *testing.T) {
	dir := filepath.Join(RepoRoot(), "installer", "linux")
	unit := unitSettings(t, filepath.Join(dir, "crossproxy.service"))
	want := map[string]string{
		"Restart":                 "always",
		"CapabilityBoundingSet":   "CAP_NET_ADMIN",
		"AmbientCapabilities":     "CAP_NET_ADMIN",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"RestrictAddressFamilies": "AF_NETLINK AF_INET AF_INET6 AF_UNIX",
		"EnvironmentFile":         "-/etc/crossproxy/crossproxy.env",
		"ExecStart":               "/usr/local/bin/crossproxy run --config=${CROSSPROXY_CONFIG} $CROSSPROXY_ARGS",
	}
	for k, v := range want {
		if got := unit[k]; len(got) != 1 || got[0] != v {
			t.Errorf("crossproxy.service %s=%v, want %s", k, got, v)
		}
	}
	for _, k := range []string{"PrivateNetwork", "PrivateUsers", "IPAddressDeny"} {
		if _, ok := unit[k]; ok {
			t.Errorf("crossproxy.service sets %s: the proxy must program the host's network namespace", k)
		}
	}
	env := unitSettings(t, filepath.Join(dir, "crossproxy.env"))
	if got := env["CROSSPROXY_CONFIG"]; len(got) != 1 || got[0] != "/etc/crossproxy/config.yaml" {
		t.Errorf("crossproxy.env CROSSPROXY_CONFIG=%v, want /etc/crossproxy/config.yaml (where the README installs config.yaml)", got)
	}
	if got := env["CROSSPROXY_ARGS"]; len(got) != 1 || !strings.Contains(got[0], "--kubeconfig=/etc/crossproxy/kubeconfig") {
		t.Errorf("crossproxy.env CROSSPROXY_ARGS=%v, want the kubeconfig the README installs", got)
	}
}
