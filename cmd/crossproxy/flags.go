package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// addCoreOptionFlags adds the flags that make up core.Options to cmd (state,
// render, explain and run share them) and returns a function that builds and
// validates the Options once flags are parsed. Errors name the flag.
func addCoreOptionFlags(cmd *cobra.Command) func() (core.Options, error) {
	var (
		clusterCIDRs      []string
		detectLocalMode   string
		bridgeInterface   string
		interfacePrefix   string
		nodePortAddresses []string
		masqueradeAll     bool
		ipFamilies        []string
		proxyName         string
	)
	f := cmd.Flags()
	f.StringSliceVar(&clusterCIDRs, "cluster-cidr", nil, "pod CIDRs of the cluster (comma-separated or repeated), used by --detect-local-mode ClusterCIDR")
	f.StringVar(&detectLocalMode, "detect-local-mode", "", "how to tell pod traffic from outside traffic: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None (default ClusterCIDR when --cluster-cidr is set, else None)")
	f.StringVar(&bridgeInterface, "pod-bridge-interface", "", "bridge interface for --detect-local-mode BridgeInterface")
	f.StringVar(&interfacePrefix, "pod-interface-name-prefix", "", "interface name prefix for --detect-local-mode InterfaceNamePrefix")
	f.StringSliceVar(&nodePortAddresses, "nodeport-addresses", nil, `node addresses that answer NodePorts: CIDRs or "primary" (default "primary")`)
	f.BoolVar(&masqueradeAll, "masquerade-all", false, "masquerade every connection to a ClusterIP")
	f.StringSliceVar(&ipFamilies, "ip-families", []string{"IPv4", "IPv6"}, "IP families this node runs")
	f.StringVar(&proxyName, "proxy-name", core.DefaultProxyName, "service.kubernetes.io/service-proxy-name value this proxy serves (empty: only unlabelled Services)")

	return func() (core.Options, error) {
		opts := core.Options{
			ProxyName:         proxyName,
			NodePortAddresses: nodePortAddresses,
			MasqueradeAll:     masqueradeAll,
		}
		for _, fam := range ipFamilies {
			switch strings.ToLower(fam) {
			case "ipv4", "4", "v4":
				opts.IPFamilies = append(opts.IPFamilies, v1.IPv4Protocol)
			case "ipv6", "6", "v6":
				opts.IPFamilies = append(opts.IPFamilies, v1.IPv6Protocol)
			default:
				return opts, fmt.Errorf("flag --ip-families: %q is not IPv4 or IPv6", fam)
			}
		}
		for _, c := range clusterCIDRs {
			p, err := netip.ParsePrefix(strings.TrimSpace(c))
			if err != nil {
				return opts, fmt.Errorf("flag --cluster-cidr: %q is not a CIDR: %w", c, err)
			}
			opts.LocalDetect.CIDRs = append(opts.LocalDetect.CIDRs, p.Masked())
		}
		mode := core.LocalDetectMode(detectLocalMode)
		if mode == "" {
			mode = core.LocalDetectNone
			if len(opts.LocalDetect.CIDRs) > 0 {
				mode = core.LocalDetectClusterCIDR
			}
		}
		opts.LocalDetect.Mode = mode
		opts.LocalDetect.BridgeInterface = bridgeInterface
		opts.LocalDetect.InterfaceNamePrefix = interfacePrefix
		return opts, nil
	}
}

// computeFromManifests validates opts, loads the manifests and computes the
// named node's state: what state and render print.
func computeFromManifests(opts core.Options, paths []string, nodeName string) (*core.NodeState, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("core options: %w", err)
	}
	set, err := manifest.Load(paths...)
	if err != nil {
		return nil, err
	}
	node, err := set.Node(nodeName)
	if err != nil {
		return nil, err
	}
	st, err := core.Compute(opts, node, set.Services, set.Slices)
	if err != nil {
		return nil, fmt.Errorf("compute node state: %w", err)
	}
	return st, nil
}
