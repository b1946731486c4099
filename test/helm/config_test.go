package helm

import (
	"fmt"
	"strings"
	"sync"
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
	// The interface-based modes with their interface, and the log verbosity.
	b := load(mustTemplate(t, "--set", "linux.config.detectLocalMode=BridgeInterface,linux.config.detectLocal.bridgeInterface=cni0,logVerbosity=4"), "linux")
	if b.Core.LocalDetect.Mode != "BridgeInterface" || b.Core.LocalDetect.BridgeInterface != "cni0" || b.LogLevel != "debug" {
		t.Errorf("BridgeInterface cni0, verbosity 4 loaded as %v %q %s", b.Core.LocalDetect.Mode, b.Core.LocalDetect.BridgeInterface, b.LogLevel)
	}
	p := load(mustTemplate(t, "--set", "linux.config.detectLocalMode=InterfaceNamePrefix,linux.config.detectLocal.interfaceNamePrefix=cali"), "linux")
	if p.Core.LocalDetect.Mode != "InterfaceNamePrefix" || p.Core.LocalDetect.InterfaceNamePrefix != "cali" {
		t.Errorf("InterfaceNamePrefix cali loaded as %v %q", p.Core.LocalDetect.Mode, p.Core.LocalDetect.InterfaceNamePrefix)
	}
	if w := load(mustTemplate(t, "--set", "logVerbosity=6"), "windows"); w.LogLevel != "trace" {
		t.Errorf("windows logVerbosity 6 loaded as log level %s", w.LogLevel)
	}
}

// acceptCase is one combination of values: JSON values by key, for
// `helm template --set-json`.
type acceptCase []string

// TestChartAcceptsOnlyWhatLoads: every value combination the chart renders
// is a config crossproxy loads at start. The combinations vary each config
// value through good values and the ones the proxy refuses (CIDRs out of
// range, detectLocalMode without its interface, minSyncPeriod above
// syncPeriod, ...), one value or one dependent pair at a time; each is either
// refused by helm, naming the value, or rendered into ConfigMaps that load
// with platform/config (the proxy's own loader) and flags that parse. A
// chart that lets a broken config through fails here, before a release
// installs pods that crash at start.
func TestChartAcceptsOnlyWhatLoads(t *testing.T) {
	var cases []acceptCase
	one := func(key string, vals ...string) {
		for _, v := range vals {
			cases = append(cases, acceptCase{key + "=" + v})
		}
	}
	one("linux.config.clusterCIDR", `"10.244.0.0/16"`, `"10.244.0.0/33"`, `"300.1.0.0/16"`, `"10.244.0.0"`,
		`"fd00:10:244::/56"`, `"fd00::/129"`, `"1:2:3:4:5:6:7:8:9/64"`, `"10.244.0.0/16,fd00:10:244::/56"`,
		`"::ffff:10.0.0.0/104"`, `"010.244.0.0/16"`, `"10.244.0.0/16,"`, `"fd00:::1/64"`, `"1::2::3/64"`)
	one("windows.config.clusterCIDR", `"10.245.0.0/16"`, `"10.245.0.0/40"`, `"fe80::/10"`)
	one("linux.config.nodePortAddresses", `["primary"]`, `["10.0.0.0/8"]`, `["10.0.0.0/40"]`, `["fd00::/64"]`,
		`["all"]`, `["10.0.0.1"]`, `["primary","192.168.0.0/16"]`)
	one("windows.config.sourceVip", `""`, `"10.244.3.2"`, `"999.1.1.1"`, `"fd00::1"`, `"10.244.3"`)
	one("logVerbosity", `0`, `4`, `10`, `11`, `-1`, `"2"`)
	one("fullSyncPeriod", `"1h"`, `"30m"`, `"90s"`, `"0s"`, `"1d"`, `"1h30m"`)
	one("ports.healthz", `10356`, `0`, `65536`)
	for _, mode := range []string{`"ClusterCIDR"`, `"NodeCIDR"`, `"BridgeInterface"`, `"InterfaceNamePrefix"`, `"None"`, `""`} {
		for _, bridge := range []string{`""`, `"cni0"`, `"averyveryverylong0"`, `"br 0"`} {
			for _, prefix := range []string{`""`, `"cali"`, `"prefixlongerthan15"`} {
				cases = append(cases, acceptCase{"linux.config.detectLocalMode=" + mode,
					"linux.config.detectLocal.bridgeInterface=" + bridge, "linux.config.detectLocal.interfaceNamePrefix=" + prefix,
					"linux.config.clusterCIDR=\"10.244.0.0/16\""})
			}
		}
	}
	for _, os_ := range []string{"linux", "windows"} {
		for _, sync := range []string{`"1s"`, `"30s"`, `"1m"`, `"999999m"`, `"0s"`} {
			for _, min := range []string{`"0s"`, `"500ms"`, `"1s"`, `"2s"`, `"31s"`, `"2m"`, `"0ms"`} {
				cases = append(cases, acceptCase{os_ + ".config.syncPeriod=" + sync, os_ + ".config.minSyncPeriod=" + min})
			}
		}
	}

	// Rendered four at a time (each is a helm process); checked in order.
	type result struct {
		out string
		err error
	}
	results := make([]result, len(cases))
	helmBin := tool(t, "HELM")
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i, c := range cases {
		args := []string{"template", "crossproxy", chart, "--namespace", "kube-system",
			"--set", "image.repository=" + repo, "--set", "image.tag=" + version}
		for _, kv := range c {
			args = append(args, "--set-json", kv)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out, err := run(helmBin, args...)
			results[i] = result{out, err}
		}()
	}
	wg.Wait()
	accepted, refused := 0, 0
	for i, c := range cases {
		out, err := results[i].out, results[i].err
		if err != nil {
			refused++
			named := false
			for _, kv := range c {
				key, _, _ := strings.Cut(kv, "=")
				leaf := key[strings.LastIndex(key, ".")+1:]
				if strings.Contains(err.Error(), leaf) {
					named = true
				}
			}
			if !named {
				t.Errorf("%v: refused without naming the value: %v", c, err)
			}
			continue
		}
		accepted++
		for _, os_ := range []string{"linux", "windows"} {
			cm, ok := objects(t, out)["ConfigMap/kube-system/crossproxy-"+os_]
			if !ok {
				t.Fatalf("%v: no %s ConfigMap", c, os_)
			}
			data := cm["data"].(map[string]any)["config.yaml"].(string)
			cfg, err := config.Parse([]byte(data), os_)
			if err != nil {
				t.Errorf("%v: the chart accepted it, but crossproxy refuses the %s config at start: %v", c, os_, err)
				continue
			}
			if len(cfg.Ignored) > 0 {
				t.Errorf("%v: %s config: fields crossproxy ignores: %v", c, os_, cfg.Ignored)
			}
			for _, a := range container(daemonSet(t, out, os_))["args"].([]any) {
				if v, ok := strings.CutPrefix(a.(string), "--full-sync-period="); ok {
					if d, err := time.ParseDuration(v); err != nil || d <= 0 {
						t.Errorf("%v: %s flag --full-sync-period=%s does not parse as a positive duration (%v)", c, os_, v, err)
					}
				}
			}
		}
	}
	t.Logf("%d combinations: %d refused by the chart naming the value, %d rendered and loaded", len(cases), refused, accepted)
	// Both outcomes must occur, or the cases test nothing.
	if accepted < 40 || refused < 40 {
		t.Errorf("accepted %d, refused %d: the cases no longer cover both sides", accepted, refused)
	}
}
