package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/core"
)

func TestKubeadmKubeProxyConfigMapLoadsAsIs(t *testing.T) {
	c, err := Load("testdata/kubeadm-kube-proxy.yaml", "linux")
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != kubeProxyKind || c.Mode != modeNFTables {
		t.Fatalf("kind %q mode %q", c.Kind, c.Mode)
	}
	if c.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" {
		t.Errorf("kubeconfig %q", c.Kubeconfig)
	}
	// Zero values keep kube-proxy's defaults.
	if c.HealthzBindAddress != "0.0.0.0:10256" || c.MetricsBindAddress != "127.0.0.1:10249" {
		t.Errorf("bind addresses %q %q", c.HealthzBindAddress, c.MetricsBindAddress)
	}
	if c.ConfigSyncPeriod != 15*time.Minute {
		t.Errorf("configSyncPeriod %v", c.ConfigSyncPeriod)
	}
	// Mode nftables reads the nftables section.
	if c.Runner.SyncPeriod != 45*time.Second || c.Runner.MinSyncPeriod != 2*time.Second || !c.Core.MasqueradeAll {
		t.Errorf("nftables section: sync %v min %v masqueradeAll %v", c.Runner.SyncPeriod, c.Runner.MinSyncPeriod, c.Core.MasqueradeAll)
	}
	ld := c.Core.LocalDetect
	want := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/56")}
	if ld.Mode != core.LocalDetectClusterCIDR || len(ld.CIDRs) != 2 || ld.CIDRs[0] != want[0] || ld.CIDRs[1] != want[1] {
		t.Errorf("local detect %+v", ld)
	}
	if strings.Join(c.Core.NodePortAddresses, ",") != "primary,192.168.0.0/16" {
		t.Errorf("nodePortAddresses %v", c.Core.NodePortAddresses)
	}
	if c.Core.IPFamilies[0] != v1.IPv4Protocol {
		t.Errorf("families %v", c.Core.IPFamilies)
	}
	// kubeadm writes every field, as zeros: nothing to warn about.
	if len(c.Ignored) != 0 {
		t.Errorf("ignored: %v", c.Ignored)
	}
}

func TestWindowsKubeProxyConfig(t *testing.T) {
	c, err := Load("testdata/windows-kube-proxy.yaml", "windows")
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != modeKernelspace || c.HostnameOverride != "win-node-1" {
		t.Fatalf("mode %q host %q", c.Mode, c.HostnameOverride)
	}
	b := c.Backend
	if b.NetworkName != "vxlan0" || b.SourceVIP != "10.244.3.2" || !b.EnableDSR {
		t.Errorf("winkernel: %+v", b)
	}
	// Modes other than nftables read the iptables section, as kube-proxy.
	if c.Runner.SyncPeriod != 20*time.Second || c.Runner.MinSyncPeriod != 500*time.Millisecond {
		t.Errorf("iptables section: %+v", c.Runner)
	}
	if c.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("healthz IP without port: %q", c.HealthzBindAddress)
	}
	if c.LogFormat != "json" || c.LogLevel != "debug" {
		t.Errorf("logging %q %q", c.LogFormat, c.LogLevel)
	}
	var fields []string
	for _, i := range c.Ignored {
		fields = append(fields, i.Field)
	}
	if !b.ForwardHealthCheckVIP {
		t.Errorf("winkernel.forwardHealthCheckVip not taken: %+v", b)
	}
	if got := strings.Join(fields, ","); got != "featureGates" {
		t.Errorf("ignored fields %q (%v)", got, c.Ignored)
	}
	// The same file on Linux is refused by mode, with the field named.
	_, err = Load("testdata/windows-kube-proxy.yaml", "linux")
	var fe *fieldError
	if !errors.As(err, &fe) || fe.Field != "mode" {
		t.Fatalf("kernelspace on linux: %v", err)
	}
}

func TestInstallerConfigsLoad(t *testing.T) {
	for goos, path := range map[string]string{
		"linux":   "../../installer/linux/config.yaml",
		"windows": "../../installer/windows/config.yaml",
	} {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("shipped config %s: %v", path, err)
		}
		if _, err := Load(path, goos); err != nil {
			t.Errorf("shipped config %s does not load: %v", path, err)
		}
	}
}

func TestCrossproxyKind(t *testing.T) {
	c, err := Load("testdata/crossproxy.yaml", "linux")
	if err != nil {
		t.Fatal(err)
	}
	if c.Core.ProxyName != "crossproxy" || c.HostnameOverride != "node-a" || c.Kubeconfig != "/etc/crossproxy/kubeconfig" {
		t.Errorf("identity: %+v", c)
	}
	if c.Core.IPFamilies[0] != v1.IPv6Protocol || len(c.Core.IPFamilies) != 2 {
		t.Errorf("families %v", c.Core.IPFamilies)
	}
	if c.Runner.SyncPeriod != time.Minute || c.Runner.MinSyncPeriod != 250*time.Millisecond || c.ConfigSyncPeriod != 10*time.Minute {
		t.Errorf("periods %+v %v", c.Runner, c.ConfigSyncPeriod)
	}
	if c.Backend.TableName != "xp" || !c.Backend.LocalhostNodePorts {
		t.Errorf("nftables %+v", c.Backend)
	}
	if c.LogLevel != "debug" || c.LogFormat != "json" || c.HealthzBindAddress != "127.0.0.1:20256" {
		t.Errorf("logging/health %+v", c)
	}
}

func TestDefaults(t *testing.T) {
	c := Default("linux")
	if err := c.Validate("linux"); err != nil {
		t.Fatal(err)
	}
	if c.Mode != modeNFTables || c.Runner.SyncPeriod != 30*time.Second || c.Runner.MinSyncPeriod != time.Second {
		t.Errorf("defaults %+v", c)
	}
	if Default("windows").Mode != modeKernelspace {
		t.Errorf("windows default mode")
	}
}

func TestInvalidValuesNameTheField(t *testing.T) {
	base := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	for _, tc := range []struct{ doc, field string }{
		{"mode: ipvs", "mode"},
		{"mode: userspace", "mode"},
		{"clusterCIDR: 10.0.0.0/8,banana", "clusterCIDR[1]"},
		{"nftables:\n  syncPeriod: soon", "iptables.syncPeriod"}, // mode "" on linux reads iptables; nftables value unused
		{"mode: nftables\nnftables:\n  syncPeriod: soon", "nftables.syncPeriod"},
		{"mode: nftables\nnftables:\n  syncPeriod: 1s\n  minSyncPeriod: 5s", "minSyncPeriod"},
		{"healthzBindAddress: here:there", "healthzBindAddress"},
		{"metricsBindAddress: 127.0.0.1:99999", "metricsBindAddress"},
		{"detectLocalMode: Magic", "detectLocalMode"},
		{"detectLocalMode: BridgeInterface", "detectLocal.bridgeInterface"},
		{"detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: a-bridge-name-of-20", "detectLocal.bridgeInterface"},
		{"detectLocalMode: InterfaceNamePrefix\ndetectLocal:\n  interfaceNamePrefix: vethvethvethveth", "detectLocal.interfaceNamePrefix"},
		{"bindAddress: localhost", "bindAddress"},
		{"clientConnection:\n  qps: fast", "clientConnection.qps"},
		{"configSyncPeriod: -1s", "configSyncPeriod"},
		{"logging:\n  format: xml", "logging.format"},
		{"winkernel:\n  sourceVip: vip", "winkernel.sourceVip"},
		{"conntrack:\n  tcpEstablishedTimeout: long", "conntrack.tcpEstablishedTimeout"},
	} {
		_, err := Parse([]byte(base+tc.doc), "linux")
		if err == nil {
			if tc.field == "iptables.syncPeriod" {
				continue // documented: the unused section is not read
			}
			t.Errorf("%q: accepted", tc.doc)
			continue
		}
		var fe *fieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%q: error %v does not name field %s", tc.doc, err, tc.field)
		}
	}
	// windows.hnsConcurrency out of range is refused naming the field.
	own := "apiVersion: " + groupVersion + "\nkind: " + ownKind + "\nmode: kernelspace\n"
	for _, n := range []string{"-1", "17"} {
		var fe *fieldError
		if _, err := Parse([]byte(own+"windows:\n  hnsConcurrency: "+n+"\n"), "windows"); !errors.As(err, &fe) || fe.Field != "windows.hnsConcurrency" {
			t.Errorf("hnsConcurrency %s: %v", n, err)
		}
	}
	if c, err := Parse([]byte(own+"windows:\n  hnsConcurrency: 4\n"), "windows"); err != nil || c.Backend.HNSConcurrency != 4 {
		t.Errorf("hnsConcurrency 4: %v", err)
	}
	// Unknown fields and kinds are refused.
	if _, err := Parse([]byte(base+"masqueradeAl: true"), "linux"); err == nil || !strings.Contains(err.Error(), "masqueradeAl") {
		t.Errorf("misspelt field: %v", err)
	}
	if _, err := Parse([]byte("apiVersion: v1\nkind: ConfigMap\n"), "linux"); err == nil || !strings.Contains(err.Error(), "apiVersion/kind") {
		t.Errorf("wrong kind: %v", err)
	}
	// Core option errors come through, naming the core field.
	if _, err := Parse([]byte(base+"nodePortAddresses: [nonsense]"), "linux"); err == nil || !strings.Contains(err.Error(), "nodePortAddresses[0]") {
		t.Errorf("bad nodePortAddresses: %v", err)
	}
}

func TestClusterCIDRModeWithoutCIDRDowngrades(t *testing.T) {
	c, err := Parse([]byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\ndetectLocalMode: ClusterCIDR\n"), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if c.Core.LocalDetect.Mode != core.LocalDetectNone || len(c.Notes) != 1 {
		t.Fatalf("mode %q notes %v", c.Core.LocalDetect.Mode, c.Notes)
	}
}

func TestLoadNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p, "linux"); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "mode") {
		t.Fatalf("error %v", err)
	}
}

// TestInstallerConfigMapsLoad parses the config.yaml the DaemonSets mount
// from the shipped ConfigMaps.
func TestInstallerConfigMapsLoad(t *testing.T) {
	for goos, path := range map[string]string{
		"linux":   "../../installer/linux/configmap.yaml",
		"windows": "../../installer/windows/configmap.yaml",
	} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("shipped ConfigMap %s: %v", path, err)
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal(data, &cm); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		doc, ok := cm.Data["config.yaml"]
		if !ok {
			t.Fatalf("%s has no data.config.yaml", path)
		}
		c, err := Parse([]byte(doc), goos)
		if err != nil {
			t.Errorf("%s data.config.yaml does not load: %v", path, err)
			continue
		}
		if c.Kubeconfig != "" {
			t.Errorf("%s: a DaemonSet must use in-cluster credentials, kubeconfig is %q", path, c.Kubeconfig)
		}
	}
}

// TestLocalhostNodePortsOnlyInIptablesMode: kube-proxy reads
// iptables.localhostNodePorts in iptables mode only, so a defaulted file
// switched to mode nftables does not open NodePorts on 127.0.0.1.
func TestLocalhostNodePortsOnlyInIptablesMode(t *testing.T) {
	base := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\niptables:\n  localhostNodePorts: true\n"
	c, err := Parse([]byte(base), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Backend.LocalhostNodePorts {
		t.Error("mode \"\" (iptables in kube-proxy) should take localhostNodePorts")
	}
	c, err = Parse([]byte(base+"mode: nftables\n"), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if c.Backend.LocalhostNodePorts {
		t.Error("mode nftables took iptables.localhostNodePorts")
	}
	if len(c.Ignored) != 1 || c.Ignored[0].Field != "iptables.localhostNodePorts" {
		t.Errorf("ignored: %+v", c.Ignored)
	}
}

// TestKubeProxyFieldsOfCurrentRelease: files of the current kube-proxy
// release load: iptables.snatNodeInternalIP decodes (and is reported as not
// applied when set), the nodePortAddresses keywords "all" and "localhost"
// are understood, and an IPv6 bindAddress moves the default health and
// metrics addresses to IPv6, as kube-proxy's defaulting does.
func TestKubeProxyFieldsOfCurrentRelease(t *testing.T) {
	base := "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n"
	c, err := Parse([]byte(base+"iptables:\n  snatNodeInternalIP: true\nnodePortAddresses: [all, localhost]\n"), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Core.NodePortAddresses, ","); got != "0.0.0.0/0,::/0" {
		t.Errorf("nodePortAddresses %q", got)
	}
	fields := map[string]bool{}
	for _, ig := range c.Ignored {
		fields[ig.Field] = true
	}
	if !fields["iptables.snatNodeInternalIP"] || !fields["nodePortAddresses"] {
		t.Errorf("ignored: %+v", c.Ignored)
	}
	c, err = Parse([]byte(base+"bindAddress: \"fd00::10\"\nhealthzBindAddress: \"\"\n"), "linux")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzBindAddress != "[::]:10256" || c.MetricsBindAddress != "[::1]:10249" {
		t.Errorf("IPv6 bindAddress: healthz %q metrics %q", c.HealthzBindAddress, c.MetricsBindAddress)
	}
}
