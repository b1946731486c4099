// Package config reads crossproxy's one configuration file. It accepts a
// kube-proxy KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) as it
// is, so a node's existing kube-proxy config carries over, and crossproxy's
// own CrossproxyConfiguration. Fields that apply are mapped to core.Options,
// platform.BackendConfig and the runner settings; kube-proxy fields that do
// not apply are listed in Config.Ignored so the start can say so; an invalid
// value stops the start with an error that names the field and says why.
// Kube-proxy's own types are mirrored here rather than imported, to keep
// k8s.io/kube-proxy (and its dependencies) out of the proxy.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

const (
	// kubeProxyGroupVersion is the kube-proxy config API crossproxy reads.
	kubeProxyGroupVersion = "kubeproxy.config.k8s.io/v1alpha1"
	// kubeProxyKind is kube-proxy's config kind.
	kubeProxyKind = "KubeProxyConfiguration"
	// groupVersion is crossproxy's own config API.
	groupVersion = "crossproxy.io/v1alpha1"
	// ownKind is crossproxy's own config kind.
	ownKind = "CrossproxyConfiguration"

	// modeNFTables is the Linux data plane (kube-proxy mode nftables).
	modeNFTables = "nftables"
	// modeKernelspace is the Windows data plane (kube-proxy mode kernelspace, HNS).
	modeKernelspace = "kernelspace"

	defaultHealthzPort = 10256
	defaultMetricsPort = 10249
)

// Config is everything the configuration file and flags decide.
type Config struct {
	// Source is the file read ("" when only defaults and flags apply).
	Source string
	// Kind is the kind of the file (KubeProxyConfiguration or CrossproxyConfiguration).
	Kind string

	// Kubeconfig is the client config file; empty means in-cluster (or $KUBECONFIG).
	Kubeconfig string
	// QPS and Burst limit the API client; 0 keeps client-go's defaults.
	QPS   float32
	Burst int
	// HostnameOverride names this node's Node object; empty means the host name.
	HostnameOverride string
	// Mode is the data plane: "nftables" on Linux, "kernelspace" on Windows.
	Mode string

	Core    core.Options
	Backend platform.BackendConfig
	Runner  platform.RunnerConfig
	// ConfigSyncPeriod is the informers' resync period.
	ConfigSyncPeriod time.Duration

	// HealthzBindAddress serves /healthz and /livez (host:port; empty disables).
	HealthzBindAddress string
	// MetricsBindAddress serves /metrics (host:port; empty disables).
	MetricsBindAddress string

	// LogFormat is "text" or "json"; LogLevel a logrus level name.
	LogFormat string
	LogLevel  string

	// Ignored lists fields that were set but do not apply to crossproxy.
	Ignored []Ignored
	// Notes are adjustments made to keep a kube-proxy file working (for example
	// detectLocalMode ClusterCIDR without a clusterCIDR, which kube-proxy also
	// treats as no detection).
	Notes []string
}

// Ignored is a field that was set but has no effect, and why.
type Ignored struct {
	Field  string
	Reason string
}

func (i Ignored) String() string { return i.Field + ": " + i.Reason }

// fieldError is an invalid value: the field's path and why it is invalid.
type fieldError struct {
	Field  string
	Value  string
	Reason string
}

func (e *fieldError) Error() string {
	if e.Value != "" {
		return fmt.Sprintf("config field %s: %q %s", e.Field, e.Value, e.Reason)
	}
	return fmt.Sprintf("config field %s: %s", e.Field, e.Reason)
}

// Default is the configuration without a file: kube-proxy's defaults where
// kube-proxy has one, the data plane of goos.
func Default(goos string) Config {
	c := Config{
		Kind:               "",
		Mode:               defaultMode(goos),
		ConfigSyncPeriod:   15 * time.Minute,
		HealthzBindAddress: "0.0.0.0:" + strconv.Itoa(defaultHealthzPort),
		MetricsBindAddress: "127.0.0.1:" + strconv.Itoa(defaultMetricsPort),
		LogFormat:          "text",
		LogLevel:           "info",
		Runner:             platform.RunnerConfig{SyncPeriod: 30 * time.Second, FullSyncPeriod: time.Hour, MinSyncPeriod: time.Second},
		Backend:            platform.BackendConfig{TableName: "crossproxy"},
	}
	c.Core.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	c.Core.LocalDetect.Mode = core.LocalDetectNone
	return c
}

func defaultMode(goos string) string {
	if goos == "windows" {
		return modeKernelspace
	}
	return modeNFTables
}

// Load reads and parses a file for a node running goos.
func Load(path, goos string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data, goos)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	c.Source = path
	return c, nil
}

// Parse reads a configuration document of either kind.
func Parse(data []byte, goos string) (Config, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return Config{}, fmt.Errorf("parse YAML: %w", err)
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(js, &tm); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	c := Default(goos)
	switch {
	case tm.Kind == kubeProxyKind && tm.APIVersion == kubeProxyGroupVersion:
		var kp kubeProxyConfiguration
		if err := decodeStrict(js, &kp); err != nil {
			return Config{}, err
		}
		err = kp.apply(&c, goos)
	case tm.Kind == ownKind && tm.APIVersion == groupVersion:
		var own crossproxyConfiguration
		if err := decodeStrict(js, &own); err != nil {
			return Config{}, err
		}
		err = own.apply(&c, goos)
	default:
		return Config{}, &fieldError{Field: "apiVersion/kind", Value: tm.APIVersion + "/" + tm.Kind,
			Reason: fmt.Sprintf("is not %s/%s or %s/%s", kubeProxyGroupVersion, kubeProxyKind, groupVersion, ownKind)}
	}
	if err != nil {
		return Config{}, err
	}
	c.Kind = tm.Kind
	sort.Slice(c.Ignored, func(i, j int) bool { return c.Ignored[i].Field < c.Ignored[j].Field })
	if err := c.Validate(goos); err != nil {
		return Config{}, err
	}
	return c, nil
}

// decodeStrict decodes JSON into v, rejecting fields v does not know, so a
// misspelt field stops the start instead of silently doing nothing.
func decodeStrict(js []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &fieldError{Field: te.Field, Reason: fmt.Sprintf("must be %s, not a %s", te.Type, te.Value)}
		}
		return fmt.Errorf("parse config: %w", err)
	}
	return nil
}

// MaxHNSConcurrency bounds windows.hnsConcurrency: HNS serialises much of
// its work, so more calls in flight only queue there.
const MaxHNSConcurrency = 16

// Validate checks the settings that are not checked while parsing (also after
// flags changed them); errors name the field.
func (c *Config) Validate(goos string) error {
	var errs []error
	switch c.Mode {
	case modeNFTables:
		if goos == "windows" {
			errs = append(errs, &fieldError{Field: "mode", Value: c.Mode, Reason: "is the Linux data plane; use kernelspace on Windows"})
		}
	case modeKernelspace:
		if goos != "windows" {
			errs = append(errs, &fieldError{Field: "mode", Value: c.Mode, Reason: "is the Windows (HNS) data plane; use nftables on Linux"})
		}
	default:
		errs = append(errs, &fieldError{Field: "mode", Value: c.Mode, Reason: "is not nftables (Linux) or kernelspace (Windows)"})
	}
	if c.Runner.MinSyncPeriod < 0 {
		errs = append(errs, &fieldError{Field: "minSyncPeriod", Value: c.Runner.MinSyncPeriod.String(), Reason: "must not be negative"})
	}
	if c.Runner.SyncPeriod <= 0 {
		errs = append(errs, &fieldError{Field: "syncPeriod", Value: c.Runner.SyncPeriod.String(), Reason: "must be greater than 0"})
	} else if c.Runner.MinSyncPeriod > c.Runner.SyncPeriod {
		errs = append(errs, &fieldError{Field: "minSyncPeriod", Value: c.Runner.MinSyncPeriod.String(), Reason: "must not be longer than syncPeriod " + c.Runner.SyncPeriod.String()})
	}
	if c.Runner.FullSyncPeriod < 0 {
		errs = append(errs, &fieldError{Field: "fullSyncPeriod", Value: c.Runner.FullSyncPeriod.String(), Reason: "must not be negative"})
	}
	if c.ConfigSyncPeriod < 0 {
		errs = append(errs, &fieldError{Field: "configSyncPeriod", Value: c.ConfigSyncPeriod.String(), Reason: "must not be negative"})
	}
	for field, addr := range map[string]string{"healthzBindAddress": c.HealthzBindAddress, "metricsBindAddress": c.MetricsBindAddress} {
		if addr == "" {
			continue
		}
		if err := checkHostPort(addr); err != nil {
			errs = append(errs, &fieldError{Field: field, Value: addr, Reason: err.Error()})
		}
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, &fieldError{Field: "logging.format", Value: c.LogFormat, Reason: "is not text or json"})
	}
	switch c.LogLevel {
	case "trace", "debug", "info", "warn", "warning", "error":
	default:
		errs = append(errs, &fieldError{Field: "logging.level", Value: c.LogLevel, Reason: "is not trace, debug, info, warn or error"})
	}
	if n := c.Backend.HNSConcurrency; n < 0 || n > MaxHNSConcurrency {
		errs = append(errs, &fieldError{Field: "windows.hnsConcurrency", Value: strconv.Itoa(n), Reason: fmt.Sprintf("must be 0 (serial) to %d", MaxHNSConcurrency)})
	}
	if c.QPS < 0 {
		errs = append(errs, &fieldError{Field: "clientConnection.qps", Reason: "must not be negative"})
	}
	if c.Burst < 0 {
		errs = append(errs, &fieldError{Field: "clientConnection.burst", Reason: "must not be negative"})
	}
	if c.Backend.SourceVIP != "" {
		if _, err := netip.ParseAddr(c.Backend.SourceVIP); err != nil {
			errs = append(errs, &fieldError{Field: "winkernel.sourceVip", Value: c.Backend.SourceVIP, Reason: "is not an IP address"})
		}
	}
	if err := c.Core.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("config: %w", err))
	}
	return errors.Join(errs...)
}

// checkHostPort accepts host:port with an IP (or empty) host and a port in
// range.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("is not host:port: %w", err)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return errors.New("host is not an IP address")
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return errors.New("port is not 0-65535")
	}
	return nil
}

// bindAddress reads kube-proxy's healthz/metrics bind address: host:port, or
// an IP alone (kube-proxy then uses the default port). "" keeps the default,
// as kube-proxy's defaulting does.
func bindAddress(field, v, def string, defPort int) (string, error) {
	if v == "" {
		return def, nil
	}
	if _, _, err := net.SplitHostPort(v); err == nil {
		return v, nil
	}
	if a, err := netip.ParseAddr(v); err == nil {
		return netip.AddrPortFrom(a, uint16(defPort)).String(), nil
	}
	return "", &fieldError{Field: field, Value: v, Reason: "is not an IP or host:port"}
}

// duration is a Go duration string ("30s") that reports its field when invalid.
type duration string

// parse returns the duration and whether it was set; 0 counts as unset, as
// kube-proxy's defaulting treats it.
func (d duration) parse(field string) (time.Duration, bool, error) {
	if d == "" {
		return 0, false, nil
	}
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0, false, &fieldError{Field: field, Value: string(d), Reason: "is not a duration such as 30s or 1m"}
	}
	return v, v != 0, nil
}

// into stores the duration in dst when one was written, and leaves dst (the
// default) alone when it was unset or zero.
func (d duration) into(field string, dst *time.Duration) error {
	v, ok, err := d.parse(field)
	if ok {
		*dst = v
	}
	return err
}

// setBindAddresses applies the healthz and metrics bind addresses both file
// kinds carry; nil keeps the default.
func setBindAddresses(c *Config, healthz, metrics *string) error {
	var err error
	if healthz != nil {
		if c.HealthzBindAddress, err = bindAddress("healthzBindAddress", *healthz, c.HealthzBindAddress, defaultHealthzPort); err != nil {
			return err
		}
	}
	if metrics != nil {
		if c.MetricsBindAddress, err = bindAddress("metricsBindAddress", *metrics, c.MetricsBindAddress, defaultMetricsPort); err != nil {
			return err
		}
	}
	return nil
}

// set reports whether a non-zero duration was written.
func (d duration) set() bool { return !isZero(string(d)) }

// isZero reports whether a decoded JSON value carries no setting: kubeadm
// writes every field, mostly as zeros, and those are not worth a warning.
func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == "" || x == "0" || x == "0s"
	case float64:
		return x == 0
	case bool:
		return !x
	case []any:
		for _, e := range x {
			if !isZero(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range x {
			if !isZero(e) {
				return false
			}
		}
		return true
	}
	return false
}

// parseCIDRs reads a comma-separated CIDR list (kube-proxy's clusterCIDR).
func parseCIDRs(field, v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, &fieldError{Field: fmt.Sprintf("%s[%d]", field, i), Value: s, Reason: "is not a CIDR"}
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// maxIfName is the longest Linux interface name.
const maxIfName = 15

// setLocalDetect applies detectLocalMode and its inputs, as kube-proxy reads
// them: an unset mode means ClusterCIDR, and ClusterCIDR without a cluster
// CIDR means no detection (kube-proxy logs the same downgrade).
func setLocalDetect(c *Config, mode string, cidrs []netip.Prefix, bridge, prefix string) error {
	m := core.LocalDetectMode(mode)
	switch m {
	case "":
		m = core.LocalDetectClusterCIDR
	case core.LocalDetectClusterCIDR, core.LocalDetectNodeCIDR, core.LocalDetectBridgeInterface, core.LocalDetectInterfaceNamePrefix, core.LocalDetectNone:
	default:
		return &fieldError{Field: "detectLocalMode", Value: mode, Reason: "is not ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None"}
	}
	if m == core.LocalDetectClusterCIDR && len(cidrs) == 0 {
		if mode != "" {
			c.Notes = append(c.Notes, "detectLocalMode ClusterCIDR without clusterCIDR: no local traffic detection (as kube-proxy)")
		}
		m = core.LocalDetectNone
	}
	if m == core.LocalDetectBridgeInterface && bridge == "" {
		return &fieldError{Field: "detectLocal.bridgeInterface", Reason: "is required by detectLocalMode BridgeInterface"}
	}
	if m == core.LocalDetectInterfaceNamePrefix && prefix == "" {
		return &fieldError{Field: "detectLocal.interfaceNamePrefix", Reason: "is required by detectLocalMode InterfaceNamePrefix"}
	}
	// Linux interface names have at most 15 bytes (IFNAMSIZ less its NUL): a
	// longer one can never match, so every packet would count as off-cluster.
	if m == core.LocalDetectBridgeInterface && len(bridge) > maxIfName {
		return &fieldError{Field: "detectLocal.bridgeInterface", Value: bridge, Reason: fmt.Sprintf("is longer than the %d bytes of an interface name", maxIfName)}
	}
	if m == core.LocalDetectInterfaceNamePrefix && len(prefix) > maxIfName {
		return &fieldError{Field: "detectLocal.interfaceNamePrefix", Value: prefix, Reason: fmt.Sprintf("is longer than the %d bytes of an interface name", maxIfName)}
	}
	c.Core.LocalDetect = core.LocalDetect{Mode: m, CIDRs: cidrs, BridgeInterface: bridge, InterfaceNamePrefix: prefix}
	return nil
}

// logLevelFromVerbosity maps klog verbosity to a logrus level: 0-3 info,
// 4 and more debug (kube-proxy logs per-sync detail at 4), 6 and more trace.
func logLevelFromVerbosity(v int) string {
	switch {
	case v >= 6:
		return "trace"
	case v >= 4:
		return "debug"
	}
	return "info"
}
