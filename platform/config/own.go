package config

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// crossproxyConfiguration is crossproxy's own config kind
// (crossproxy.io/v1alpha1 CrossproxyConfiguration): the same settings under
// crossproxy's names, plus the ones kube-proxy has no field for.
type crossproxyConfiguration struct {
	APIVersion       string   `json:"apiVersion"`
	Kind             string   `json:"kind"`
	Kubeconfig       string   `json:"kubeconfig"`
	QPS              float32  `json:"qps"`
	Burst            int      `json:"burst"`
	HostnameOverride string   `json:"hostnameOverride"`
	Mode             string   `json:"mode"`
	ProxyName        string   `json:"proxyName"`
	IPFamilies       []string `json:"ipFamilies"`
	ClusterCIDRs     []string `json:"clusterCIDRs"`
	DetectLocalMode  string   `json:"detectLocalMode"`
	DetectLocal      struct {
		BridgeInterface     string `json:"bridgeInterface"`
		InterfaceNamePrefix string `json:"interfaceNamePrefix"`
	} `json:"detectLocal"`
	NodePortAddresses  []string `json:"nodePortAddresses"`
	MasqueradeAll      bool     `json:"masqueradeAll"`
	SyncPeriod         duration `json:"syncPeriod"`
	FullSyncPeriod     duration `json:"fullSyncPeriod"`
	MinSyncPeriod      duration `json:"minSyncPeriod"`
	ConfigSyncPeriod   duration `json:"configSyncPeriod"`
	HealthzBindAddress *string  `json:"healthzBindAddress"`
	MetricsBindAddress *string  `json:"metricsBindAddress"`
	Logging            struct {
		Format string `json:"format"`
		Level  string `json:"level"`
	} `json:"logging"`
	NFTables struct {
		Table              string `json:"table"`
		LocalhostNodePorts bool   `json:"localhostNodePorts"`
	} `json:"nftables"`
	Windows struct {
		NetworkName string `json:"networkName"`
		SourceVIP   string `json:"sourceVip"`
		EnableDSR   bool   `json:"enableDSR"`
		// ForwardHealthCheckVIP and RootHNSEndpointName are kube-proxy's
		// winkernel fields of the same names.
		ForwardHealthCheckVIP bool   `json:"forwardHealthCheckVip"`
		RootHNSEndpointName   string `json:"rootHnsEndpointName"`
		// HNSConcurrency bounds the HNS calls in flight (0: 1).
		HNSConcurrency int `json:"hnsConcurrency"`
	} `json:"windows"`
}

func (o *crossproxyConfiguration) apply(c *Config, goos string) error {
	if o.Mode != "" {
		c.Mode = o.Mode
	}
	c.Kubeconfig, c.QPS, c.Burst = o.Kubeconfig, o.QPS, o.Burst
	c.HostnameOverride = o.HostnameOverride
	c.Core.ProxyName = o.ProxyName
	if len(o.IPFamilies) > 0 {
		c.Core.IPFamilies = nil
		for i, f := range o.IPFamilies {
			fam, err := parseFamily(f)
			if err != nil {
				return &fieldError{Field: fmt.Sprintf("ipFamilies[%d]", i), Value: f, Reason: err.Error()}
			}
			c.Core.IPFamilies = append(c.Core.IPFamilies, fam)
		}
	}
	cidrs, err := parseCIDRs("clusterCIDRs", strings.Join(o.ClusterCIDRs, ","))
	if err != nil {
		return err
	}
	if err := setLocalDetect(c, o.DetectLocalMode, cidrs, o.DetectLocal.BridgeInterface, o.DetectLocal.InterfaceNamePrefix); err != nil {
		return err
	}
	c.Core.NodePortAddresses = o.NodePortAddresses
	c.Core.MasqueradeAll = o.MasqueradeAll
	if err := o.SyncPeriod.into("syncPeriod", &c.Runner.SyncPeriod); err != nil {
		return err
	}
	if err := o.FullSyncPeriod.into("fullSyncPeriod", &c.Runner.FullSyncPeriod); err != nil {
		return err
	}
	if err := o.MinSyncPeriod.into("minSyncPeriod", &c.Runner.MinSyncPeriod); err != nil {
		return err
	}
	if err := o.ConfigSyncPeriod.into("configSyncPeriod", &c.ConfigSyncPeriod); err != nil {
		return err
	}
	if err := setBindAddresses(c, o.HealthzBindAddress, o.MetricsBindAddress); err != nil {
		return err
	}
	if o.Logging.Format != "" {
		c.LogFormat = o.Logging.Format
	}
	if o.Logging.Level != "" {
		c.LogLevel = o.Logging.Level
	}
	if o.NFTables.Table != "" {
		c.Backend.TableName = o.NFTables.Table
	}
	c.Backend.LocalhostNodePorts = o.NFTables.LocalhostNodePorts
	c.Backend.NetworkName = o.Windows.NetworkName
	c.Backend.SourceVIP = o.Windows.SourceVIP
	c.Backend.EnableDSR = o.Windows.EnableDSR
	c.Backend.ForwardHealthCheckVIP = o.Windows.ForwardHealthCheckVIP
	c.Backend.RootHNSEndpointName = o.Windows.RootHNSEndpointName
	c.Backend.HNSConcurrency = o.Windows.HNSConcurrency
	if goos != "windows" && (o.Windows.NetworkName != "" || o.Windows.SourceVIP != "" || o.Windows.EnableDSR ||
		o.Windows.ForwardHealthCheckVIP || o.Windows.RootHNSEndpointName != "" || o.Windows.HNSConcurrency != 0) {
		c.Ignored = append(c.Ignored, Ignored{Field: "windows", Reason: "Windows only; this node runs " + goos})
	}
	if goos == "windows" && (o.NFTables.Table != "" || o.NFTables.LocalhostNodePorts) {
		c.Ignored = append(c.Ignored, Ignored{Field: "nftables", Reason: "Linux only; this node runs windows"})
	}
	return nil
}

// parseFamily reads an IP family name.
func parseFamily(s string) (v1.IPFamily, error) {
	switch strings.ToLower(s) {
	case "ipv4", "v4", "4":
		return v1.IPv4Protocol, nil
	case "ipv6", "v6", "6":
		return v1.IPv6Protocol, nil
	}
	return "", fmt.Errorf("is not IPv4 or IPv6")
}
