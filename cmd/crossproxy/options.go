package main

import (
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/config"
)

// option is one setting that a flag and the config file share: the flag's
// name and usage, and the config.Config field it sets. One table of them
// (coreOptionTable, runOptionTable) registers the flags, with the defaults
// config.Default has, so --help shows the value that applies; and merges the
// flags given explicitly over the config file, so neither list is written
// twice.
type option struct {
	name string
	// bind registers the flag on fs; its value is written into c.
	bind func(fs *pflag.FlagSet, c *config.Config)
	// merge copies the flag's value from src, the flags' Config, to dst.
	merge func(dst, src *config.Config)
	// always: the setting is the flag's whether given or not (there is no
	// config-file field for it).
	always bool
}

// setter is the shape of pflag's typed registration methods (StringVar,
// BoolVar, DurationVar, ...).
type setter[T any] func(fs *pflag.FlagSet, p *T, name string, value T, usage string)

// field is an option for the config field get returns, registered by set.
func field[T any](name, usage string, set setter[T], get func(*config.Config) *T) option {
	return option{
		name:  name,
		bind:  func(fs *pflag.FlagSet, c *config.Config) { p := get(c); set(fs, p, name, *p, usage) },
		merge: func(dst, src *config.Config) { *get(dst) = *get(src) },
	}
}

// valueField is an option whose flag parses into the field through a
// pflag.Value (IP families, CIDRs, the local-detection mode).
func valueField(name, usage string, value func(c *config.Config) pflag.Value, merge func(dst, src *config.Config)) option {
	return option{
		name:  name,
		bind:  func(fs *pflag.FlagSet, c *config.Config) { fs.Var(value(c), name, usage) },
		merge: merge,
	}
}

var (
	stringFlag   setter[string]        = (*pflag.FlagSet).StringVar
	boolFlag     setter[bool]          = (*pflag.FlagSet).BoolVar
	intFlag      setter[int]           = (*pflag.FlagSet).IntVar
	float32Flag  setter[float32]       = (*pflag.FlagSet).Float32Var
	durationFlag setter[time.Duration] = (*pflag.FlagSet).DurationVar
	stringsFlag  setter[[]string]      = (*pflag.FlagSet).StringSliceVar
)

// coreOptionTable is the options that make up core.Options: state, render,
// explain and run share them.
func coreOptionTable() []option {
	return []option{
		valueField("cluster-cidr", "pod CIDRs of the cluster (comma-separated or repeated), used by --detect-local-mode ClusterCIDR",
			func(c *config.Config) pflag.Value { return prefixesValue{&c.Core.LocalDetect.CIDRs} },
			func(dst, src *config.Config) { dst.Core.LocalDetect.CIDRs = src.Core.LocalDetect.CIDRs }),
		valueField("detect-local-mode", "how to tell pod traffic from outside traffic: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None (default ClusterCIDR when --cluster-cidr is set, else None)",
			func(c *config.Config) pflag.Value { return (*modeValue)(&c.Core.LocalDetect.Mode) },
			func(dst, src *config.Config) { dst.Core.LocalDetect.Mode = src.Core.LocalDetect.Mode }),
		field("pod-bridge-interface", "bridge interface for --detect-local-mode BridgeInterface", stringFlag,
			func(c *config.Config) *string { return &c.Core.LocalDetect.BridgeInterface }),
		field("pod-interface-name-prefix", "interface name prefix for --detect-local-mode InterfaceNamePrefix", stringFlag,
			func(c *config.Config) *string { return &c.Core.LocalDetect.InterfaceNamePrefix }),
		field("nodeport-addresses", `node addresses that answer NodePorts: CIDRs or "primary" (default "primary")`, stringsFlag,
			func(c *config.Config) *[]string { return &c.Core.NodePortAddresses }),
		field("masquerade-all", "masquerade every connection to a ClusterIP", boolFlag,
			func(c *config.Config) *bool { return &c.Core.MasqueradeAll }),
		valueField("ip-families", "IP families this node runs",
			func(c *config.Config) pflag.Value { return &familiesValue{p: &c.Core.IPFamilies} },
			func(dst, src *config.Config) { dst.Core.IPFamilies = src.Core.IPFamilies }),
		field("proxy-name", "service.kubernetes.io/service-proxy-name value this proxy serves (empty: only unlabelled Services)", stringFlag,
			func(c *config.Config) *string { return &c.Core.ProxyName }),
	}
}

// runOptionTable is the options of `crossproxy run` besides the core's, in
// the order --help lists them.
func runOptionTable() []option {
	nodeName := func(c *config.Config) *string { return &c.HostnameOverride }
	return []option{
		field("hostname-override", "name of this node's Node object (default: the host name)", stringFlag, nodeName),
		field("node", "alias of --hostname-override", stringFlag, nodeName),
		field("kubeconfig", "kubeconfig file of the API server (default: $KUBECONFIG, else in-cluster config)", stringFlag,
			func(c *config.Config) *string { return &c.Kubeconfig }),
		field("kube-api-qps", "API client queries per second (0: client-go default)", float32Flag,
			func(c *config.Config) *float32 { return &c.QPS }),
		field("kube-api-burst", "API client burst (0: client-go default)", intFlag,
			func(c *config.Config) *int { return &c.Burst }),
		field("healthz-bind-address", "host:port of /healthz and /livez (kube-proxy's meaning); empty disables", stringFlag,
			func(c *config.Config) *string { return &c.HealthzBindAddress }),
		field("metrics-bind-address", "host:port of /metrics (Prometheus); empty disables", stringFlag,
			func(c *config.Config) *string { return &c.MetricsBindAddress }),
		field("config-sync-period", "informer resync period", durationFlag,
			func(c *config.Config) *time.Duration { return &c.ConfigSyncPeriod }),
		field("sync-period", "longest time between two syncs when nothing changes; /healthz fails when an update waits 2 x this", durationFlag,
			func(c *config.Config) *time.Duration { return &c.Runner.SyncPeriod }),
		field("full-sync-period", "period of full syncs, which rewrite everything crossproxy owns and so repair rules changed behind its back", durationFlag,
			func(c *config.Config) *time.Duration { return &c.Runner.FullSyncPeriod }),
		field("min-sync-period", "shortest time between two syncs; changes arriving faster are coalesced", durationFlag,
			func(c *config.Config) *time.Duration { return &c.Runner.MinSyncPeriod }),
		field("log-level", "log level: debug, info, warn, error", stringFlag,
			func(c *config.Config) *string { return &c.LogLevel }),
		field("log-format", "log format: text or json", stringFlag,
			func(c *config.Config) *string { return &c.LogFormat }),
	}
}

// always makes o a flag-only setting, copied whether given or not.
func always(o option) option {
	o.always = true
	return o
}

// optionSet is a command's options registered on its flags: the flags'
// values live in flags, a Config that starts as config.Default.
type optionSet struct {
	table   []option
	flags   config.Config
	changed func(string) bool
}

// bindOptions registers the options of the tables on fs.
func bindOptions(fs *pflag.FlagSet, tables ...[]option) *optionSet {
	s := &optionSet{flags: config.Default(runtime.GOOS), changed: fs.Changed}
	for _, t := range tables {
		s.table = append(s.table, t...)
	}
	for _, o := range s.table {
		o.bind(fs, &s.flags)
	}
	return s
}

// merge copies into cfg (defaults or a config file) the options whose flags
// were given, and the flag-only ones; then the rule kube-proxy has for a
// cluster CIDR given without a mode: ClusterCIDR detection.
func (s *optionSet) merge(cfg *config.Config) {
	for _, o := range s.table {
		if o.always || s.changed(o.name) {
			o.merge(cfg, &s.flags)
		}
	}
	if s.changed("cluster-cidr") && !s.changed("detect-local-mode") && cfg.Core.LocalDetect.Mode == core.LocalDetectNone {
		cfg.Core.LocalDetect.Mode = core.LocalDetectClusterCIDR
	}
}

// core is the core options the flags alone say (state and render, which
// read no config file).
func (s *optionSet) core() core.Options {
	cfg := config.Default(runtime.GOOS)
	s.merge(&cfg)
	return cfg.Core
}

// familiesValue is --ip-families: IPv4 and IPv6 (also 4, v4, 6, v6),
// comma-separated or repeated; the first given replaces the default.
type familiesValue struct {
	p   *[]v1.IPFamily
	set bool
}

func (f *familiesValue) String() string {
	out := make([]string, len(*f.p))
	for i, fam := range *f.p {
		out[i] = string(fam)
	}
	return "[" + strings.Join(out, ",") + "]"
}

func (f *familiesValue) Set(s string) error {
	if !f.set {
		*f.p, f.set = nil, true
	}
	for _, fam := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(fam)) {
		case "ipv4", "4", "v4":
			*f.p = append(*f.p, v1.IPv4Protocol)
		case "ipv6", "6", "v6":
			*f.p = append(*f.p, v1.IPv6Protocol)
		default:
			return fmt.Errorf("%q is not IPv4 or IPv6", fam)
		}
	}
	return nil
}

func (*familiesValue) Type() string { return "strings" }

// prefixesValue is --cluster-cidr: CIDRs, comma-separated or repeated.
type prefixesValue struct{ p *[]netip.Prefix }

func (v prefixesValue) String() string {
	if len(*v.p) == 0 {
		return ""
	}
	out := make([]string, len(*v.p))
	for i, pr := range *v.p {
		out[i] = pr.String()
	}
	return "[" + strings.Join(out, ",") + "]"
}

func (v prefixesValue) Set(s string) error {
	for _, c := range strings.Split(s, ",") {
		pr, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return fmt.Errorf("%q is not a CIDR: %w", c, err)
		}
		*v.p = append(*v.p, pr.Masked())
	}
	return nil
}

func (prefixesValue) Type() string { return "strings" }

// modeValue is --detect-local-mode; the core's Validate names a mode it
// does not know.
type modeValue core.LocalDetectMode

func (m *modeValue) String() string { return "" }

func (m *modeValue) Set(s string) error {
	*m = modeValue(s)
	return nil
}

func (*modeValue) Type() string { return "string" }
