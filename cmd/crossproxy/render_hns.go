package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/core"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// windowsNode describes a Windows node for render: the options `run` takes
// on Windows and what `run` would read from HNS. It is the network
// description file's format (YAML or JSON); flags override its fields.
type windowsNode struct {
	// NetworkName is run's --network-name (shown only).
	NetworkName string `json:"networkName,omitempty"`
	// NetworkType is the HNS network type: L2Bridge (default) or Overlay.
	NetworkType string `json:"networkType,omitempty"`
	// SourceVIP is run's --source-vip (overlay networks need it).
	SourceVIP string `json:"sourceVIP,omitempty"`
	// EnableDSR is run's --enable-dsr.
	EnableDSR bool `json:"enableDSR,omitempty"`
	// NodeIP is this node's address; default: the Node's first address.
	NodeIP string `json:"nodeIP,omitempty"`
	// HostMAC is the MAC of the host interface with the node IP (overlay).
	HostMAC string `json:"hostMAC,omitempty"`
	// RemoteSubnets are the overlay network's RemoteSubnetRoute policies.
	RemoteSubnets []windowsRemoteSubnet `json:"remoteSubnets,omitempty"`
	// Features are the HNS features by name (DSR, IPv6DualStack,
	// ModifyLoadBalancer, SessionAffinity, RemoteSubnet); "all" or absent:
	// every one, "none": none.
	Features []string `json:"features,omitempty"`
}

type windowsRemoteSubnet struct {
	Prefix          string `json:"prefix"`
	ProviderAddress string `json:"providerAddress"`
}

// windowsRenderOptions are set by the Windows render flags.
var windowsRenderOptions struct {
	file          string
	node          windowsNode
	remoteSubnets []string
	features      string
	flags         *pflag.FlagSet
}

func addWindowsRenderFlags(f *pflag.FlagSet) {
	o := &windowsRenderOptions
	o.flags = f
	f.StringVar(&o.file, "hns-network-file", "", "Windows: a YAML or JSON file describing the node's HNS network and options (format: platform_windows/README.md)")
	f.StringVar(&o.node.NetworkName, "network-name", "", "Windows: the HNS network name (as run's flag)")
	f.StringVar(&o.node.NetworkType, "hns-network-type", "", "Windows: the HNS network type, L2Bridge or Overlay (default L2Bridge)")
	f.StringVar(&o.node.SourceVIP, "source-vip", "", "Windows: source VIP for overlay networks (as run's flag)")
	f.BoolVar(&o.node.EnableDSR, "enable-dsr", false, "Windows: DSR on ClusterIP load balancers (as run's flag)")
	f.StringVar(&o.node.NodeIP, "node-ip", "", "Windows: this node's address (default: the Node's first address)")
	f.StringVar(&o.node.HostMAC, "host-mac", "", "Windows: MAC of the host interface with the node IP (overlay)")
	f.StringSliceVar(&o.remoteSubnets, "hns-remote-subnet", nil, "Windows: an overlay remote subnet as PREFIX=PROVIDER-ADDRESS (repeatable)")
	f.StringVar(&o.features, "hns-features", "", "Windows: HNS features, comma-separated (DSR,IPv6DualStack,ModifyLoadBalancer,SessionAffinity,RemoteSubnet), all or none (default all)")
}

// windowsNodeFromFlags reads the network file, then applies the flags that
// were set.
func windowsNodeFromFlags() (windowsNode, error) {
	o := &windowsRenderOptions
	var n windowsNode
	if o.file != "" {
		b, err := os.ReadFile(o.file)
		if err != nil {
			return n, fmt.Errorf("flag --hns-network-file: %w", err)
		}
		if err := yaml.UnmarshalStrict(b, &n); err != nil {
			return n, fmt.Errorf("flag --hns-network-file %s: %w", o.file, err)
		}
	}
	set := func(name string) bool { return o.flags != nil && o.flags.Changed(name) }
	for name, apply := range map[string]func(){
		"network-name":     func() { n.NetworkName = o.node.NetworkName },
		"hns-network-type": func() { n.NetworkType = o.node.NetworkType },
		"source-vip":       func() { n.SourceVIP = o.node.SourceVIP },
		"enable-dsr":       func() { n.EnableDSR = o.node.EnableDSR },
		"node-ip":          func() { n.NodeIP = o.node.NodeIP },
		"host-mac":         func() { n.HostMAC = o.node.HostMAC },
		"hns-features":     func() { n.Features = strings.Split(o.features, ",") },
		"hns-remote-subnet": func() {
			n.RemoteSubnets = nil
			for _, s := range o.remoteSubnets {
				prefix, pa, _ := strings.Cut(s, "=")
				n.RemoteSubnets = append(n.RemoteSubnets, windowsRemoteSubnet{Prefix: prefix, ProviderAddress: pa})
			}
		},
	} {
		if set(name) {
			apply()
		}
	}
	return n, nil
}

// planOptions turns the node description into the planner's options,
// naming the field of anything invalid.
func (n windowsNode) planOptions() (hns.PlanOptions, error) {
	opts := hns.PlanOptions{EnableDSR: n.EnableDSR, HostMAC: n.HostMAC}
	name := n.NetworkName
	if name == "" {
		name = "render"
	}
	opts.Network = hns.Network{Name: name, Type: hns.NetworkL2Bridge}
	switch {
	case n.NetworkType == "" || strings.EqualFold(n.NetworkType, string(hns.NetworkL2Bridge)):
	case strings.EqualFold(n.NetworkType, string(hns.NetworkOverlay)):
		opts.Network.Type = hns.NetworkOverlay
	default:
		return opts, fmt.Errorf("networkType %q: want L2Bridge or Overlay", n.NetworkType)
	}
	var err error
	addr := func(field, s string) netip.Addr {
		if s == "" || err != nil {
			return netip.Addr{}
		}
		a, e := netip.ParseAddr(s)
		if e != nil {
			err = fmt.Errorf("%s: %w", field, e)
		}
		return a
	}
	opts.SourceVIP = addr("sourceVIP", n.SourceVIP)
	opts.NodeIP = addr("nodeIP", n.NodeIP)
	for i, s := range n.RemoteSubnets {
		p, e := netip.ParsePrefix(s.Prefix)
		if e != nil && err == nil {
			err = fmt.Errorf("remoteSubnets[%d].prefix: %w", i, e)
		}
		pa := addr(fmt.Sprintf("remoteSubnets[%d].providerAddress", i), s.ProviderAddress)
		opts.Network.RemoteSubnets = append(opts.Network.RemoteSubnets, hns.RemoteSubnet{Prefix: p.Masked(), ProviderAddress: pa})
	}
	if err != nil {
		return opts, err
	}
	opts.Features, err = featuresByName(n.Features)
	return opts, err
}

// featuresByName parses HNS feature names; none given means every feature.
func featuresByName(names []string) (hns.Features, error) {
	f := hns.Features{APIV2: true}
	if len(names) == 0 {
		return hns.AllFeatures(), nil
	}
	for _, n := range names {
		switch strings.ToLower(strings.TrimSpace(n)) {
		case "all":
			f = hns.AllFeatures()
		case "none", "":
		case "dsr":
			f.DSR = true
		case "ipv6dualstack":
			f.IPv6DualStack = true
		case "modifyloadbalancer":
			f.ModifyLoadBalancer = true
		case "sessionaffinity":
			f.SessionAffinity = true
		case "remotesubnet":
			f.RemoteSubnet = true
		default:
			return f, fmt.Errorf("features: unknown HNS feature %q (DSR, IPv6DualStack, ModifyLoadBalancer, SessionAffinity, RemoteSubnet, all, none)", n)
		}
	}
	return f, nil
}

// renderHNS prints the HNS load balancers and endpoints a Windows node
// described by the Windows render flags would program for state, and what
// HNS cannot express; as text, or as JSON with -o json. It refuses what run
// refuses (an overlay network without a source VIP or remote subnet support).
func renderHNS(state *core.NodeState) (string, error) {
	node, err := windowsNodeFromFlags()
	if err != nil {
		return "", err
	}
	opts, err := node.planOptions()
	if err != nil {
		return "", fmt.Errorf("windows node: %w", err)
	}
	if err := hns.OverlayPrerequisites(opts, state); err != nil {
		return "", err
	}
	if renderOutput == "json" {
		b, err := hns.RenderJSON(state, opts)
		if err != nil {
			return "", err
		}
		return string(b) + "\n", nil
	}
	return renderHNSHeader(opts) + hns.RenderText(state, opts), nil
}

// renderHNSHeader states the node render assumed.
func renderHNSHeader(o hns.PlanOptions) string {
	var subnets []string
	for _, s := range o.Network.RemoteSubnets {
		subnets = append(subnets, s.Prefix.String()+"="+s.ProviderAddress.String())
	}
	show := func(a netip.Addr) string {
		if !a.IsValid() {
			return "none"
		}
		return a.String()
	}
	nodeIP := show(o.NodeIP)
	if !o.NodeIP.IsValid() {
		nodeIP = "the Node's"
	}
	return fmt.Sprintf("# node: HNS network %q type %s, remote subnets [%s], source VIP %s, node IP %s, --enable-dsr=%v, HNS features [%s]; endpoints marked * are remote\n",
		o.Network.Name, o.Network.Type, strings.Join(subnets, " "), show(o.SourceVIP), nodeIP, o.EnableDSR, strings.Join(featureNames(o.Features), " "))
}

// featureNames names the features present.
func featureNames(f hns.Features) []string {
	var out []string
	for _, x := range []struct {
		name string
		on   bool
	}{{"DSR", f.DSR}, {"IPv6DualStack", f.IPv6DualStack}, {"ModifyLoadBalancer", f.ModifyLoadBalancer}, {"SessionAffinity", f.SessionAffinity}, {"RemoteSubnet", f.RemoteSubnet}} {
		if x.on {
			out = append(out, x.name)
		}
	}
	return out
}
