package helm

import (
	"fmt"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/platform/config"
)

// TestRenderedConfigsLoad: the config files the chart renders, with the
// defaults and with every config value changed, load with crossproxy's own
// loader (platform/config, as `crossproxy run --config` reads them) for the
// OS they are for, with no field ignored, and each value arrives: no value
// the chart offers is silently dropped by the binary.
func TestRenderedConfigsLoad(t *testing.T) {
	load := func(out, os_ string) config.Config {
		t.Helper()
		cm := objects(t, out)["ConfigMap/kube-system/crossproxy-"+os_]
		data := cm["data"].(map[string]any)["config.yaml"].(string)
		c, err := config.Parse([]byte(data), os_)
		if err != nil {
			t.Fatalf("%s config does not load: %v\n%s", os_, err, data)
		}
		if len(c.Ignored) > 0 {
			t.Errorf("%s config: fields ignored by crossproxy: %v", os_, c.Ignored)
		}
		return c
	}
	for _, os_ := range []string{"linux", "windows"} {
		load(mustTemplate(t), os_)
	}
	out := mustTemplate(t,
		"--set", "linux.config.clusterCIDR=10.244.0.0/16,linux.config.detectLocalMode=ClusterCIDR,linux.config.masqueradeAll=true",
		"--set", "linux.config.syncPeriod=1m,linux.config.minSyncPeriod=500ms,linux.config.nodePortAddresses={10.0.0.0/8}",
		"--set", "ports.healthz=10356,ports.metrics=10349",
		"--set", "windows.config.clusterCIDR=10.245.0.0/16,windows.config.syncPeriod=45s,windows.config.minSyncPeriod=2s",
		"--set", "windows.config.networkName=vxlan0,windows.config.sourceVip=10.245.3.2,windows.config.enableDSR=true,windows.config.forwardHealthCheckVip=true")
	l := load(out, "linux")
	got := fmt.Sprintf("%v %v %v %v %v %v %s %s", l.Core.LocalDetect.Mode, l.Core.LocalDetect.CIDRs, l.Core.MasqueradeAll,
		l.Runner.SyncPeriod, l.Runner.MinSyncPeriod, l.Core.NodePortAddresses, l.HealthzBindAddress, l.MetricsBindAddress)
	if want := fmt.Sprintf("ClusterCIDR [10.244.0.0/16] true %v %v [10.0.0.0/8] 0.0.0.0:10356 0.0.0.0:10349", time.Minute, 500*time.Millisecond); got != want {
		t.Errorf("linux config loaded as\n%s, want\n%s", got, want)
	}
	w := load(out, "windows")
	got = fmt.Sprintf("%v %v %v %s %s %v %v", w.Core.LocalDetect.CIDRs, w.Runner.SyncPeriod, w.Runner.MinSyncPeriod,
		w.Backend.NetworkName, w.Backend.SourceVIP, w.Backend.EnableDSR, w.Backend.ForwardHealthCheckVIP)
	if want := fmt.Sprintf("[10.245.0.0/16] %v %v vxlan0 10.245.3.2 true true", 45*time.Second, 2*time.Second); got != want {
		t.Errorf("windows config loaded as\n%s, want\n%s", got, want)
	}
	// detectLocalMode NodeCIDR arrives too (it ignores clusterCIDR's CIDRs).
	n := load(mustTemplate(t, "--set", "linux.config.detectLocalMode=NodeCIDR"), "linux")
	if n.Core.LocalDetect.Mode != "NodeCIDR" {
		t.Errorf("detectLocalMode NodeCIDR loaded as %v", n.Core.LocalDetect.Mode)
	}
}
