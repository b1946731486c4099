package config

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// kubeProxyConfiguration mirrors kube-proxy's KubeProxyConfiguration
// (kubeproxy.config.k8s.io/v1alpha1, Kubernetes 1.37) field for field, so any
// valid kube-proxy file decodes. A few top-level fields of kube-proxy's newer
// layout (syncPeriod, minSyncPeriod, masqueradeAll) are accepted too.
type kubeProxyConfiguration struct {
	APIVersion       string          `json:"apiVersion"`
	Kind             string          `json:"kind"`
	FeatureGates     map[string]bool `json:"featureGates,omitempty"`
	ClientConnection struct {
		Kubeconfig         string  `json:"kubeconfig"`
		AcceptContentTypes string  `json:"acceptContentTypes"`
		ContentType        string  `json:"contentType"`
		QPS                float32 `json:"qps"`
		Burst              int32   `json:"burst"`
	} `json:"clientConnection"`
	Logging struct {
		Format         string `json:"format"`
		FlushFrequency any    `json:"flushFrequency"`
		Verbosity      *int   `json:"verbosity"`
		VModule        any    `json:"vmodule"`
		Options        any    `json:"options"`
	} `json:"logging"`
	HostnameOverride            string  `json:"hostnameOverride"`
	BindAddress                 string  `json:"bindAddress"`
	HealthzBindAddress          *string `json:"healthzBindAddress"`
	MetricsBindAddress          *string `json:"metricsBindAddress"`
	BindAddressHardFail         bool    `json:"bindAddressHardFail"`
	EnableProfiling             bool    `json:"enableProfiling"`
	ShowHiddenMetricsForVersion string  `json:"showHiddenMetricsForVersion"`
	Mode                        string  `json:"mode"`
	IPTables                    struct {
		MasqueradeBit      *int32   `json:"masqueradeBit"`
		MasqueradeAll      bool     `json:"masqueradeAll"`
		LocalhostNodePorts *bool    `json:"localhostNodePorts"`
		SNATNodeInternalIP *bool    `json:"snatNodeInternalIP"`
		SyncPeriod         duration `json:"syncPeriod"`
		MinSyncPeriod      duration `json:"minSyncPeriod"`
	} `json:"iptables"`
	IPVS struct {
		SyncPeriod    duration `json:"syncPeriod"`
		MinSyncPeriod duration `json:"minSyncPeriod"`
		Scheduler     string   `json:"scheduler"`
		ExcludeCIDRs  []string `json:"excludeCIDRs"`
		StrictARP     bool     `json:"strictARP"`
		TCPTimeout    duration `json:"tcpTimeout"`
		TCPFinTimeout duration `json:"tcpFinTimeout"`
		UDPTimeout    duration `json:"udpTimeout"`
	} `json:"ipvs"`
	NFTables struct {
		MasqueradeBit *int32   `json:"masqueradeBit"`
		MasqueradeAll bool     `json:"masqueradeAll"`
		SyncPeriod    duration `json:"syncPeriod"`
		MinSyncPeriod duration `json:"minSyncPeriod"`
	} `json:"nftables"`
	Winkernel struct {
		NetworkName           string `json:"networkName"`
		SourceVip             string `json:"sourceVip"`
		EnableDSR             bool   `json:"enableDSR"`
		RootHnsEndpointName   string `json:"rootHnsEndpointName"`
		ForwardHealthCheckVip bool   `json:"forwardHealthCheckVip"`
	} `json:"winkernel"`
	DetectLocalMode string `json:"detectLocalMode"`
	DetectLocal     struct {
		BridgeInterface     string `json:"bridgeInterface"`
		InterfaceNamePrefix string `json:"interfaceNamePrefix"`
	} `json:"detectLocal"`
	ClusterCIDR       string   `json:"clusterCIDR"`
	NodePortAddresses []string `json:"nodePortAddresses"`
	OOMScoreAdj       *int32   `json:"oomScoreAdj"`
	Conntrack         struct {
		MaxPerCore            *int32    `json:"maxPerCore"`
		Min                   *int32    `json:"min"`
		TCPEstablishedTimeout *duration `json:"tcpEstablishedTimeout"`
		TCPCloseWaitTimeout   *duration `json:"tcpCloseWaitTimeout"`
		TCPBeLiberal          bool      `json:"tcpBeLiberal"`
		UDPTimeout            duration  `json:"udpTimeout"`
		UDPStreamTimeout      duration  `json:"udpStreamTimeout"`
	} `json:"conntrack"`
	ConfigSyncPeriod    duration `json:"configSyncPeriod"`
	PortRange           string   `json:"portRange"`
	WindowsRunAsService bool     `json:"windowsRunAsService,omitempty"`

	// Newer layout, accepted for convenience.
	SyncPeriod    duration `json:"syncPeriod"`
	MinSyncPeriod duration `json:"minSyncPeriod"`
	MasqueradeAll *bool    `json:"masqueradeAll"`
}

// apply maps the fields that apply onto c and records the ones that do not
// (Config.Ignored), section by section in the order of kube-proxy's
// reference, so errors and notes come in a stable order.
func (k *kubeProxyConfiguration) apply(c *Config, goos string) error {
	if err := k.applyMode(c); err != nil {
		return err
	}
	k.applyClient(c)
	if err := k.applyServers(c); err != nil {
		return err
	}
	if err := k.applySync(c, goos); err != nil {
		return err
	}
	k.applyWindows(c, goos)
	if err := k.applyNetwork(c); err != nil {
		return err
	}
	return k.applyRest(c)
}

// ignore records a field that is set but does nothing in crossproxy.
func (c *Config) ignore(set bool, field, reason string) {
	if set {
		c.Ignored = append(c.Ignored, Ignored{Field: field, Reason: reason})
	}
}

// applyMode takes the data plane; modes crossproxy does not have stop the start.
func (k *kubeProxyConfiguration) applyMode(c *Config) error {
	switch k.Mode {
	case "":
	case modeNFTables, modeKernelspace:
		c.Mode = k.Mode
	case "iptables", "ipvs":
		return &fieldError{Field: "mode", Value: k.Mode, Reason: "is not a crossproxy data plane; crossproxy programs nftables on Linux (mode nftables) and HNS on Windows (mode kernelspace)"}
	default:
		return &fieldError{Field: "mode", Value: k.Mode, Reason: "is not nftables (Linux) or kernelspace (Windows)"}
	}
	return nil
}

// applyClient takes the API client and logging settings.
func (k *kubeProxyConfiguration) applyClient(c *Config) {
	cc := k.ClientConnection
	c.Kubeconfig = cc.Kubeconfig
	c.QPS = cc.QPS
	c.Burst = int(cc.Burst)
	c.ignore(cc.AcceptContentTypes != "", "clientConnection.acceptContentTypes", "crossproxy always asks for protobuf, then JSON")
	c.ignore(cc.ContentType != "", "clientConnection.contentType", "crossproxy always sends protobuf")

	if f := k.Logging.Format; f != "" {
		c.LogFormat = f
	}
	if v := k.Logging.Verbosity; v != nil {
		c.LogLevel = logLevelFromVerbosity(*v)
	}
	c.ignore(!isZero(k.Logging.FlushFrequency), "logging.flushFrequency", "logs are written unbuffered")
	c.ignore(!isZero(k.Logging.VModule), "logging.vmodule", "crossproxy has one log level")
	c.ignore(!isZero(k.Logging.Options), "logging.options", "no klog options apply")
}

// applyServers takes the node name and the health and metrics addresses, which an IPv6
// bindAddress moves to IPv6 (and makes IPv6 the primary family), as kube-proxy.
func (k *kubeProxyConfiguration) applyServers(c *Config) error {
	c.HostnameOverride = k.HostnameOverride
	if k.BindAddress != "" {
		a, err := netip.ParseAddr(k.BindAddress)
		if err != nil {
			return &fieldError{Field: "bindAddress", Value: k.BindAddress, Reason: "is not an IP address"}
		}
		// As kube-proxy: an IPv6 bindAddress makes IPv6 the primary family,
		// and the health and metrics servers listen on IPv6 by default.
		if a.Is6() && !a.Is4In6() {
			c.Core.IPFamilies = []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol}
			c.HealthzBindAddress = netip.AddrPortFrom(netip.IPv6Unspecified(), defaultHealthzPort).String()
			c.MetricsBindAddress = netip.AddrPortFrom(netip.IPv6Loopback(), defaultMetricsPort).String()
		}
	}
	if err := setBindAddresses(c, k.HealthzBindAddress, k.MetricsBindAddress); err != nil {
		return err
	}
	c.ignore(k.BindAddressHardFail, "bindAddressHardFail", "a server that cannot bind always stops the start")
	c.ignore(k.EnableProfiling, "enableProfiling", "crossproxy serves no pprof endpoint")
	c.ignore(k.ShowHiddenMetricsForVersion != "", "showHiddenMetricsForVersion", "crossproxy has no hidden metrics")
	if len(k.FeatureGates) > 0 {
		names := make([]string, 0, len(k.FeatureGates))
		for n := range k.FeatureGates {
			names = append(names, n)
		}
		sort.Strings(names)
		c.ignore(true, "featureGates", fmt.Sprintf("kube-proxy feature gates %v do not apply; crossproxy implements the GA behaviour", names))
	}
	return nil
}

// applySync takes the sync periods, masqueradeAll and localhostNodePorts from the
// section of the mode as written, and notes the per-mode options that do nothing here.
func (k *kubeProxyConfiguration) applySync(c *Config, goos string) error {
	// Sync periods and masqueradeAll live in the section of the mode as
	// written, as kube-proxy reads them: nftables for mode nftables, iptables
	// otherwise (also for an empty mode, which kube-proxy runs as iptables).
	sec := "iptables"
	syncP, minSyncP, masq := k.IPTables.SyncPeriod, k.IPTables.MinSyncPeriod, k.IPTables.MasqueradeAll
	if k.Mode == modeNFTables {
		sec = "nftables"
		syncP, minSyncP, masq = k.NFTables.SyncPeriod, k.NFTables.MinSyncPeriod, k.NFTables.MasqueradeAll
	}
	if k.SyncPeriod != "" {
		sec, syncP = "", k.SyncPeriod
	}
	if k.MinSyncPeriod != "" {
		minSyncP = k.MinSyncPeriod
	}
	field := func(name string) string {
		if sec == "" {
			return name
		}
		return sec + "." + name
	}
	if err := syncP.into(field("syncPeriod"), &c.Runner.SyncPeriod); err != nil {
		return err
	}
	if err := minSyncP.into(field("minSyncPeriod"), &c.Runner.MinSyncPeriod); err != nil {
		return err
	}
	c.Core.MasqueradeAll = masq
	if k.MasqueradeAll != nil {
		c.Core.MasqueradeAll = *k.MasqueradeAll
	}
	// kube-proxy honours localhostNodePorts in iptables mode only (an empty
	// mode on Linux); nftables and kernelspace never answer NodePorts on
	// 127.0.0.1. A defaulted file switched to mode nftables still carries
	// "true", which must not open NodePorts on localhost (route_localnet).
	if lnp := k.IPTables.LocalhostNodePorts; lnp != nil {
		if k.Mode == "" && goos != "windows" {
			c.Backend.LocalhostNodePorts = *lnp
		} else {
			c.ignore(*lnp, "iptables.localhostNodePorts", "kube-proxy applies it in iptables mode only; mode "+c.Mode+" never answers NodePorts on 127.0.0.1")
		}
	}
	c.ignore(k.IPTables.SNATNodeInternalIP != nil && *k.IPTables.SNATNodeInternalIP, "iptables.snatNodeInternalIP",
		"crossproxy masquerades to the address of the interface a packet leaves by")
	c.ignore(k.IPTables.MasqueradeBit != nil, "iptables.masqueradeBit", "crossproxy marks packets in its own nftables table")
	c.ignore(k.NFTables.MasqueradeBit != nil, "nftables.masqueradeBit", "crossproxy marks packets in its own nftables table")
	ipvsSet := k.IPVS.SyncPeriod.set() || k.IPVS.MinSyncPeriod.set() || k.IPVS.Scheduler != "" || len(k.IPVS.ExcludeCIDRs) > 0 ||
		k.IPVS.StrictARP || k.IPVS.TCPTimeout.set() || k.IPVS.TCPFinTimeout.set() || k.IPVS.UDPTimeout.set()
	c.ignore(ipvsSet, "ipvs", "crossproxy has no IPVS mode")
	return nil
}

// applyWindows takes the HNS settings (reported ignored on other OSes).
func (k *kubeProxyConfiguration) applyWindows(c *Config, goos string) {
	c.Backend.NetworkName = k.Winkernel.NetworkName
	c.Backend.SourceVIP = k.Winkernel.SourceVip
	c.Backend.EnableDSR = k.Winkernel.EnableDSR
	c.Backend.ForwardHealthCheckVIP = k.Winkernel.ForwardHealthCheckVip
	c.Backend.RootHNSEndpointName = k.Winkernel.RootHnsEndpointName
	if goos != "windows" {
		c.ignore(k.Winkernel.NetworkName != "" || k.Winkernel.SourceVip != "" || k.Winkernel.EnableDSR ||
			k.Winkernel.ForwardHealthCheckVip || k.Winkernel.RootHnsEndpointName != "", "winkernel", "Windows only; this node runs "+goos)
	}
}

// applyNetwork takes local-traffic detection and the NodePort addresses.
func (k *kubeProxyConfiguration) applyNetwork(c *Config) error {
	cidrs, err := parseCIDRs("clusterCIDR", k.ClusterCIDR)
	if err != nil {
		return err
	}
	if err := setLocalDetect(c, k.DetectLocalMode, cidrs, k.DetectLocal.BridgeInterface, k.DetectLocal.InterfaceNamePrefix); err != nil {
		return err
	}
	var localhost bool
	c.Core.NodePortAddresses, localhost = nodePortAddresses(k.NodePortAddresses)
	c.ignore(localhost, "nodePortAddresses", `keyword "localhost": crossproxy answers NodePorts on 127.0.0.1 only with iptables.localhostNodePorts (flag --localhost-nodeports)`)
	return nil
}

// applyRest takes configSyncPeriod and notes the process and conntrack options
// that crossproxy leaves to the service manager and sysctl.
func (k *kubeProxyConfiguration) applyRest(c *Config) error {
	c.ignore(k.OOMScoreAdj != nil, "oomScoreAdj", "set the OOM score with the service manager (systemd OOMScoreAdjust=, pod spec)")
	ct := k.Conntrack
	for name, d := range map[string]*duration{"conntrack.tcpEstablishedTimeout": ct.TCPEstablishedTimeout, "conntrack.tcpCloseWaitTimeout": ct.TCPCloseWaitTimeout} {
		if d == nil {
			continue
		}
		if v, _, err := d.parse(name); err != nil {
			return err
		} else {
			c.ignore(v != 0, name, "crossproxy does not tune conntrack sysctls; set them in /etc/sysctl.d")
		}
	}
	c.ignore(ct.MaxPerCore != nil && *ct.MaxPerCore != 0, "conntrack.maxPerCore", "crossproxy does not tune conntrack sysctls; set nf_conntrack_max in /etc/sysctl.d")
	c.ignore(ct.Min != nil && *ct.Min != 0, "conntrack.min", "crossproxy does not tune conntrack sysctls; set nf_conntrack_max in /etc/sysctl.d")
	c.ignore(ct.TCPBeLiberal, "conntrack.tcpBeLiberal", "crossproxy does not tune conntrack sysctls; set nf_conntrack_tcp_be_liberal in /etc/sysctl.d")
	c.ignore(ct.UDPTimeout.set(), "conntrack.udpTimeout", "crossproxy does not tune conntrack sysctls")
	c.ignore(ct.UDPStreamTimeout.set(), "conntrack.udpStreamTimeout", "crossproxy does not tune conntrack sysctls")

	if err := k.ConfigSyncPeriod.into("configSyncPeriod", &c.ConfigSyncPeriod); err != nil {
		return err
	}
	c.ignore(k.PortRange != "", "portRange", "kube-proxy's userspace mode option; no effect")
	c.ignore(k.WindowsRunAsService, "windowsRunAsService", "the crossproxy MSI installs the Windows service itself")
	return nil
}

// nodePortAddresses translates kube-proxy's nodePortAddresses keywords the
// core does not take: "all" becomes 0.0.0.0/0 and ::/0 (every address of the
// Node), and "localhost" is left out (reported by the caller), since loopback
// NodePorts are the localhostNodePorts setting's to open. "primary" and CIDRs
// pass through.
func nodePortAddresses(in []string) (out []string, localhost bool) {
	for _, s := range in {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "all":
			out = append(out, "0.0.0.0/0", "::/0")
		case "localhost":
			localhost = true
		default:
			out = append(out, s)
		}
	}
	return out, localhost
}
