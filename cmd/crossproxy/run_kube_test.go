package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// newTestRun is the run command's options after parsing args.
func newTestRun(t *testing.T, args ...string) (*runOptions, *cobra.Command) {
	t.Helper()
	cmd, ro := newRunCommandWith()
	if err := cmd.Flags().Parse(args); err != nil {
		t.Fatal(err)
	}
	return ro, cmd
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const kubeProxyFile = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: from-file
clusterCIDR: 10.244.0.0/16
metricsBindAddress: 127.0.0.1:1111
featureGates: {X: true}
nftables:
  syncPeriod: 40s
  minSyncPeriod: 2s
  masqueradeAll: true
logging:
  format: json
`

func TestRunConfigFileAndFlagPrecedence(t *testing.T) {
	path := writeConfig(t, kubeProxyFile)
	ro, _ := newTestRun(t, "--config", path, "--min-sync-period", "300ms", "--hostname-override", "from-flag", "--masquerade-all=false", "--ip-families", "IPv4")
	notes, err := ro.kube.apply(ro)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "featureGates") {
		t.Errorf("notes %q", notes)
	}
	opts := ro.resolvedCore
	switch {
	case ro.nodeName != "from-flag":
		t.Errorf("node %q: the flag must win", ro.nodeName)
	case ro.runner.SyncPeriod != 40*time.Second:
		t.Errorf("sync period %v: the file's value must stay", ro.runner.SyncPeriod)
	case ro.runner.MinSyncPeriod != 300*time.Millisecond:
		t.Errorf("min sync period %v: the flag must win", ro.runner.MinSyncPeriod)
	case ro.logFormat != "json":
		t.Errorf("log format %q: the file's value must stay", ro.logFormat)
	case ro.kube.cfg.MetricsBindAddress != "127.0.0.1:1111":
		t.Errorf("metrics %q", ro.kube.cfg.MetricsBindAddress)
	case opts.MasqueradeAll:
		t.Errorf("masqueradeAll: the flag (false) must win over the file (true)")
	case len(opts.IPFamilies) != 1 || opts.IPFamilies[0] != v1.IPv4Protocol:
		t.Errorf("families %v", opts.IPFamilies)
	case opts.LocalDetect.Mode != core.LocalDetectClusterCIDR || len(opts.LocalDetect.CIDRs) != 1:
		t.Errorf("local detect from the file lost: %+v", opts.LocalDetect)
	}
}

func TestRunWithoutConfigUsesFlagsAndDefaults(t *testing.T) {
	ro, _ := newTestRun(t, "--cluster-cidr", "10.0.0.0/8", "--sync-period", "5s")
	if _, err := ro.kube.apply(ro); err != nil {
		t.Fatal(err)
	}
	opts := ro.resolvedCore
	if ro.runner.SyncPeriod != 5*time.Second || ro.runner.MinSyncPeriod != time.Second {
		t.Errorf("runner %+v", ro.runner)
	}
	if opts.LocalDetect.Mode != core.LocalDetectClusterCIDR || ro.kube.cfg.HealthzBindAddress != "0.0.0.0:10256" {
		t.Errorf("opts %+v healthz %q", opts.LocalDetect, ro.kube.cfg.HealthzBindAddress)
	}

	// Standalone mode serves health and metrics only when asked.
	ro, _ = newTestRun(t, "--manifests", "x.yaml", "--metrics-bind-address", "127.0.0.1:2222")
	if _, err := ro.kube.apply(ro); err != nil {
		t.Fatal(err)
	}
	if ro.kube.cfg.HealthzBindAddress != "" || ro.kube.cfg.MetricsBindAddress != "127.0.0.1:2222" {
		t.Errorf("standalone: healthz %q metrics %q", ro.kube.cfg.HealthzBindAddress, ro.kube.cfg.MetricsBindAddress)
	}
}

func TestRunInvalidConfigNamesField(t *testing.T) {
	path := writeConfig(t, "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nclusterCIDR: nonsense\n")
	err := runMain([]string{"run", "--config", path})
	if err == nil || !strings.Contains(err.Error(), "clusterCIDR") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v", err)
	}
	ro, _ := newTestRun(t, "--sync-period", "1s", "--min-sync-period", "5s")
	if _, err := ro.kube.apply(ro); err == nil || !strings.Contains(err.Error(), "minSyncPeriod") {
		t.Fatalf("min > sync: %v", err)
	}
}
