package core

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// nodePortPrimary is the NodePortAddresses keyword that selects the Node's
// primary address of each family (its first InternalIP, else its first ExternalIP).
const nodePortPrimary = "primary"

// Validate checks the options before any state is computed, so a bad config
// file or flag fails at start-up with the field named instead of producing a
// half-working node. Every problem found is reported, joined.
func (o Options) Validate() error {
	var errs []error
	if o.ProxyName != "" {
		for _, msg := range validation.IsValidLabelValue(o.ProxyName) {
			errs = append(errs, fmt.Errorf("proxyName: %q is not a valid label value: %s", o.ProxyName, msg))
		}
	}
	if len(o.IPFamilies) > 2 {
		errs = append(errs, fmt.Errorf("ipFamilies: at most 2 families, got %d", len(o.IPFamilies)))
	}
	seen := map[v1.IPFamily]bool{}
	for i, f := range o.IPFamilies {
		switch f {
		case v1.IPv4Protocol, v1.IPv6Protocol:
		default:
			errs = append(errs, fmt.Errorf("ipFamilies[%d]: %q is not IPv4 or IPv6", i, f))
			continue
		}
		if seen[f] {
			errs = append(errs, fmt.Errorf("ipFamilies[%d]: %s is listed twice", i, f))
		}
		seen[f] = true
	}
	ld := o.LocalDetect
	for i, p := range ld.CIDRs {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("localDetect.cidrs[%d]: not a valid CIDR", i))
		}
	}
	switch ld.Mode {
	case "", LocalDetectNone, LocalDetectNodeCIDR:
	case LocalDetectClusterCIDR:
		if len(ld.CIDRs) == 0 {
			errs = append(errs, errors.New("localDetect.cidrs: mode ClusterCIDR needs at least one cluster CIDR"))
		}
	case LocalDetectBridgeInterface:
		if ld.BridgeInterface == "" {
			errs = append(errs, errors.New("localDetect.bridgeInterface: required by mode BridgeInterface"))
		}
	case LocalDetectInterfaceNamePrefix:
		if ld.InterfaceNamePrefix == "" {
			errs = append(errs, errors.New("localDetect.interfaceNamePrefix: required by mode InterfaceNamePrefix"))
		}
	default:
		errs = append(errs, fmt.Errorf("localDetect.mode: %q is not one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix, None", ld.Mode))
	}
	for i, s := range o.NodePortAddresses {
		if _, _, err := parseNodePortAddress(s); err != nil {
			errs = append(errs, fmt.Errorf("nodePortAddresses[%d]: %w", i, err))
		}
	}
	for i, a := range o.HostAddresses {
		if !a.IsValid() {
			errs = append(errs, fmt.Errorf("hostAddresses[%d]: not a valid IP address", i))
		}
	}
	return errors.Join(errs...)
}

// parseNodePortAddress reads one NodePortAddresses entry: the keyword or a CIDR.
func parseNodePortAddress(s string) (primary bool, p netip.Prefix, err error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, nodePortPrimary) {
		return true, netip.Prefix{}, nil
	}
	p, err = netip.ParsePrefix(t)
	if err != nil {
		return false, p, fmt.Errorf("%q is not a CIDR or %q", s, nodePortPrimary)
	}
	return false, p.Masked(), nil
}

// env is everything about this node and its options that is the same for every
// Service; it is rebuilt only when the Node or the options change.
type env struct {
	opts        Options
	node        NodeInfo
	families    []v1.IPFamily
	localDetect map[v1.IPFamily]FamilyLocalDetect
	nodePort    map[v1.IPFamily][]netip.Addr
	problems    []Problem
	// places are the endpoint places handed out while this env is in
	// force, one per node and zone (see EndpointPlace); a new env starts
	// afresh, which forgets the places of nodes gone meanwhile. Not part of
	// what an env is: setNode compares envs without it.
	places map[EndpointPlace]*EndpointPlace
}

// place returns the shared EndpointPlace of node and zone.
func (e *env) place(node, zone string) *EndpointPlace {
	k := EndpointPlace{NodeName: node, Zone: zone}
	if p, ok := e.places[k]; ok {
		return p
	}
	if e.places == nil {
		e.places = map[EndpointPlace]*EndpointPlace{}
	}
	p := &EndpointPlace{NodeName: node, Zone: zone}
	e.places[k] = p
	return p
}

// newEnv resolves opts against node (which may be nil while the Node is unknown).
func newEnv(opts Options, node *v1.Node) *env {
	e := &env{opts: opts}
	primary := map[v1.IPFamily]netip.Addr{}
	if node != nil {
		e.node, primary, e.problems = nodeInfo(node)
	}
	e.families = slices.Clone(opts.IPFamilies)
	if len(e.families) == 0 {
		for _, a := range e.node.Addresses {
			if f := familyOf(a); !slices.Contains(e.families, f) {
				e.families = append(e.families, f)
			}
		}
		if len(e.families) == 0 {
			e.families = []v1.IPFamily{v1.IPv4Protocol}
		}
	}
	e.localDetect = map[v1.IPFamily]FamilyLocalDetect{}
	e.nodePort = map[v1.IPFamily][]netip.Addr{}
	for _, f := range e.families {
		e.localDetect[f] = e.resolveLocalDetect(f)
		e.nodePort[f] = e.nodePortAddresses(f, primary[f])
	}
	return e
}

func (e *env) runs(f v1.IPFamily) bool { return slices.Contains(e.families, f) }

func (e *env) resolveLocalDetect(f v1.IPFamily) FamilyLocalDetect {
	ld := e.opts.LocalDetect
	mode := ld.Mode
	if mode == "" {
		mode = LocalDetectNone
		if len(ld.CIDRs) > 0 {
			mode = LocalDetectClusterCIDR
		}
	}
	out := FamilyLocalDetect{Mode: mode}
	switch mode {
	case LocalDetectClusterCIDR:
		for _, p := range ld.CIDRs {
			if p.IsValid() && familyOf(p.Addr()) == f {
				out.CIDRs = append(out.CIDRs, p.Masked())
			}
		}
	case LocalDetectNodeCIDR:
		for _, p := range e.node.PodCIDRs {
			if familyOf(p.Addr()) == f {
				out.CIDRs = append(out.CIDRs, p)
			}
		}
	case LocalDetectBridgeInterface:
		out.Interface = ld.BridgeInterface
	case LocalDetectInterfaceNamePrefix:
		out.Interface = ld.InterfaceNamePrefix
	}
	return out
}

// nodePortAddresses selects this family's NodePort addresses: those inside a
// configured CIDR of the family (from the Node's status and the host's
// interfaces), plus the primary address when asked for or when no CIDR of the
// family was given.
func (e *env) nodePortAddresses(f v1.IPFamily, primaryAddr netip.Addr) []netip.Addr {
	var cidrs []netip.Prefix
	usePrimary := false
	for _, s := range e.opts.NodePortAddresses {
		isPrimary, p, err := parseNodePortAddress(s)
		switch {
		case err != nil:
		case isPrimary:
			usePrimary = true
		case familyOf(p.Addr()) == f:
			cidrs = append(cidrs, p)
		}
	}
	if len(cidrs) == 0 {
		usePrimary = true
	}
	var out []netip.Addr
	if usePrimary && primaryAddr.IsValid() {
		out = append(out, primaryAddr)
	}
	candidates := append(slices.Clone(e.node.Addresses), e.opts.HostAddresses...)
	for _, a := range candidates {
		a = a.Unmap().WithZone("")
		if !a.IsValid() || familyOf(a) != f {
			continue
		}
		for _, p := range cidrs {
			if p.Contains(a) {
				out = append(out, a)
				break
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// nodeInfo extracts what the core uses from the Node; the primary address of
// each family is returned apart because only NodePort selection needs it.
func nodeInfo(node *v1.Node) (NodeInfo, map[v1.IPFamily]netip.Addr, []Problem) {
	info := NodeInfo{
		Name:     node.Name,
		Zone:     node.Labels[v1.LabelTopologyZone],
		Deleting: node.DeletionTimestamp != nil,
	}
	if len(node.Labels) > 0 {
		info.Labels = make(map[string]string, len(node.Labels))
		for k, v := range node.Labels {
			info.Labels[k] = v
		}
	}
	var probs []Problem
	bad := func(field, reason string) {
		probs = append(probs, Problem{Kind: "Node", Object: node.Name, Field: field, Reason: reason})
	}
	primary := map[v1.IPFamily]netip.Addr{}
	var internal, external []netip.Addr
	for i, a := range node.Status.Addresses {
		if a.Type != v1.NodeInternalIP && a.Type != v1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(strings.TrimSpace(a.Address))
		if err != nil {
			bad(fmt.Sprintf("status.addresses[%d].address", i), fmt.Sprintf("%q is not an IP address", a.Address))
			continue
		}
		ip = ip.Unmap().WithZone("")
		if a.Type == v1.NodeInternalIP {
			internal = append(internal, ip)
		} else {
			external = append(external, ip)
		}
	}
	for _, list := range [][]netip.Addr{internal, external} {
		for _, ip := range list {
			if _, ok := primary[familyOf(ip)]; !ok {
				primary[familyOf(ip)] = ip
			}
			if !slices.Contains(info.Addresses, ip) {
				info.Addresses = append(info.Addresses, ip)
			}
		}
	}
	cidrs := node.Spec.PodCIDRs
	field := "spec.podCIDRs[%d]"
	if len(cidrs) == 0 && node.Spec.PodCIDR != "" {
		cidrs, field = []string{node.Spec.PodCIDR}, "spec.podCIDR%.0d"
	}
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			bad(fmt.Sprintf(field, i), fmt.Sprintf("%q is not a CIDR", c))
			continue
		}
		info.PodCIDRs = append(info.PodCIDRs, p.Masked())
	}
	return info, primary, probs
}

// familyOf returns the IP family of an address.
func familyOf(a netip.Addr) v1.IPFamily {
	if a.Is4() || a.Is4In6() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

// famIndex maps a family to 0 (IPv4) or 1 (IPv6) for per-family arrays.
func famIndex(f v1.IPFamily) int {
	if f == v1.IPv6Protocol {
		return 1
	}
	return 0
}
