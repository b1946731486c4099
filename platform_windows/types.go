package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Protocol is an IP protocol number as HNS load balancers take it.
type Protocol uint32

// The protocols HNS load balancers accept.
const (
	ProtocolTCP Protocol = 6
	ProtocolUDP Protocol = 17
)

func (p Protocol) String() string {
	switch p {
	case ProtocolTCP:
		return "TCP"
	case ProtocolUDP:
		return "UDP"
	}
	return fmt.Sprintf("proto-%d", uint32(p))
}

// LBFlags are the load balancer flags and the port mapping flags crossproxy
// sets, as booleans so the planner and the fake need no HNS bit values. HNS
// keeps them in two sets: loadBalancerNames and portMappingNames name them.
type LBFlags struct {
	// DSR enables direct server return (load balancer flag 1).
	DSR bool
	// IPv6 marks an IPv6 load balancer (load balancer flag 2).
	IPv6 bool
	// LocalRoutedVIP lets the host itself reach the VIP (port mapping flag 2).
	LocalRoutedVIP bool
	// PreserveDIP delivers packets with the VIP as destination (port mapping flag 8).
	PreserveDIP bool
	// VipExternalIP marks a frontend reached from outside the node (port
	// mapping flag 16, kubernetes PR 113742): HNS then keeps established
	// connections when the endpoints of the load balancer change.
	VipExternalIP bool
}

// loadBalancerNames names the set load balancer flags, in bit order.
func (f LBFlags) loadBalancerNames() []string {
	s := []string{}
	if f.DSR {
		s = append(s, "DSR")
	}
	if f.IPv6 {
		s = append(s, "IPv6")
	}
	return s
}

// portMappingNames names the set port mapping flags, in bit order.
func (f LBFlags) portMappingNames() []string {
	s := []string{}
	if f.LocalRoutedVIP {
		s = append(s, "LocalRoutedVIP")
	}
	if f.PreserveDIP {
		s = append(s, "PreserveDIP")
	}
	if f.VipExternalIP {
		s = append(s, "VipExternalIP")
	}
	return s
}

func (f LBFlags) String() string {
	s := append(f.loadBalancerNames(), f.portMappingNames()...)
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}

// LoadBalancer is one HNS load balancer: one protocol, one external port on
// one or more frontend VIPs, spread over HNS endpoints.
type LoadBalancer struct {
	// ID is the HNS id; empty for a load balancer not yet created.
	ID           string
	Protocol     Protocol
	FrontendVIPs []netip.Addr
	ExternalPort uint16
	InternalPort uint16
	// SourceVIP is the address HNS uses as source towards endpoints (overlay).
	SourceVIP netip.Addr
	// EndpointIDs are HNS endpoint ids, sorted.
	EndpointIDs []string
	Flags       LBFlags
	// SourceIPAffinity selects HNS' per-client-IP distribution (session affinity).
	SourceIPAffinity bool
}

// frontend is the load balancer's identity as HNS checks it for duplicates:
// protocol, external port and VIPs. A load balancer without VIPs (NodePort:
// every host address) is "*" for IPv4 and "*6" for IPv6: the two families'
// wildcards are different HNS objects.
func (lb *LoadBalancer) frontend() string {
	vips := make([]string, len(lb.FrontendVIPs))
	for i, a := range lb.FrontendVIPs {
		vips[i] = a.String()
	}
	v := strings.Join(vips, ",")
	if len(vips) == 0 {
		v = "*"
		if lb.Flags.IPv6 {
			v = "*6"
		}
	}
	return fmt.Sprintf("%s/%s/%d", lb.Protocol, v, lb.ExternalPort)
}

// Endpoint is one HNS endpoint: a local one (a pod on this node, created by
// the CNI) or a remote one (a pod elsewhere, created by crossproxy so load
// balancers can point at it).
type Endpoint struct {
	ID   string
	Name string
	IP   netip.Addr
	// Remote is HNS' EndpointFlagsRemoteEndpoint.
	Remote bool
	// ProviderAddress is the remote node's address (overlay networks).
	ProviderAddress netip.Addr
	MAC             string
}

// RemoteSubnet maps a pod CIDR of another node to that node's provider address
// (HNS RemoteSubnetRoute policy on overlay networks).
type RemoteSubnet struct {
	Prefix          netip.Prefix
	ProviderAddress netip.Addr
}

// NetworkType is the HNS network type crossproxy cares about.
type NetworkType string

// The network types crossproxy plans for.
const (
	NetworkOverlay  NetworkType = "Overlay"
	NetworkL2Bridge NetworkType = "L2Bridge"
)

// Network is the HNS network the load balancers and remote endpoints belong to.
type Network struct {
	// ID is HNS' id, exactly as HNS reported it (HNS queries take it as is).
	ID            string
	Name          string
	Type          NetworkType
	RemoteSubnets []RemoteSubnet
	// Subnets are the network's own address ranges, as its IPAM
	// configuration reports them (hcsshim hcn.HostComputeNetwork.Ipams[].
	// Subnets[].IpAddressPrefix): the node's pod subnet for flannel's
	// vxlan0 and cbr0, Calico's IP block for its "Calico" network, which
	// usually lies outside the Node's spec.podCIDRs. The source VIP is
	// checked and reserved within them.
	Subnets []netip.Prefix
}

// isOverlay reports whether the network is an overlay (VXLAN) network. HNS
// reports the type in varying case ("Overlay", "overlay"); kube-proxy compares
// it case-insensitively, and so does crossproxy.
func (nw Network) isOverlay() bool { return strings.EqualFold(string(nw.Type), string(NetworkOverlay)) }

// providerAddress returns the provider address of the remote node that holds
// ip: the node whose remote subnet contains it, or the node whose own
// (provider) address it is, as kube-proxy's findRemoteSubnetProviderAddress.
func (nw Network) providerAddress(ip netip.Addr) (netip.Addr, bool) {
	for _, s := range nw.RemoteSubnets {
		if s.Prefix.Contains(ip) || s.ProviderAddress == ip {
			return s.ProviderAddress, true
		}
	}
	return netip.Addr{}, false
}

// isProviderAddress reports whether ip is a remote node's own address.
func (nw Network) isProviderAddress(ip netip.Addr) bool {
	for _, s := range nw.RemoteSubnets {
		if s.ProviderAddress == ip {
			return true
		}
	}
	return false
}

// Features are the HNS capabilities crossproxy adapts to.
type Features struct {
	// APIV2 is HNS' V2 API and schema (Windows Server 2019 and later); crossproxy needs it.
	APIV2              bool
	DSR                bool
	IPv6DualStack      bool
	ModifyLoadBalancer bool
	SessionAffinity    bool
	RemoteSubnet       bool
}

// AllFeatures is a current Windows Server's feature set (render's default).
func AllFeatures() Features {
	return Features{APIV2: true, DSR: true, IPv6DualStack: true, ModifyLoadBalancer: true, SessionAffinity: true, RemoteSubnet: true}
}

// HNS is the Host Networking Service as crossproxy uses it. Its methods take
// and return only this package's plain types so the fake runs on any OS and
// the hcn-calling layer stays thin. Every method is one HNS call.
type HNS interface {
	Features(ctx context.Context) (Features, error)
	GetNetwork(ctx context.Context, name string) (Network, error)
	// ListNetworks lists the node's networks (finding the network when
	// none is named).
	ListNetworks(ctx context.Context) ([]Network, error)
	ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error)
	// GetEndpointByName finds one endpoint of any network by its name,
	// including endpoints created through the V1 API that V2 listings may
	// not show (kubernetes #110591: Calico's Calico_ep, flannel host-gw's
	// cbr0_ep, the SDN scripts' cbr0); ErrNotFound (wrapped) when there is
	// none.
	GetEndpointByName(ctx context.Context, name string) (Endpoint, error)
	CreateRemoteEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error)
	// CreateLocalEndpoint creates an endpoint on this host (the overlay source
	// VIP endpoint, with the host's MAC and its provider address).
	CreateLocalEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error)
	DeleteEndpoint(ctx context.Context, id string) error
	ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error)
	CreateLoadBalancer(ctx context.Context, lb LoadBalancer) (LoadBalancer, error)
	// UpdateLoadBalancer modifies a load balancer in place (needs Features.ModifyLoadBalancer).
	UpdateLoadBalancer(ctx context.Context, id string, lb LoadBalancer) (LoadBalancer, error)
	DeleteLoadBalancer(ctx context.Context, id string) error
}

// Errors HNS implementations return (wrapped) so callers can branch on them.
var (
	ErrNotFound = errors.New("not found")
	// ErrDuplicateFrontend is HCN_E_PORT_ALREADY_EXISTS (0x803b0013): another
	// load balancer holds the frontend, or a host port reservation holds the port.
	ErrDuplicateFrontend = errors.New("the frontend's port is already in use (another load balancer or a host port reservation)")
	// ErrAlreadyExists is ERROR_ALREADY_EXISTS (0xb7): HNS already has this
	// object, typically restored by HNS itself after it restarted.
	ErrAlreadyExists = errors.New("object already exists")
	// ErrNotImplemented is E_NOTIMPL: this HNS lacks the call (in-place modify
	// of a load balancer on some builds that report the feature).
	ErrNotImplemented  = errors.New("not implemented by this HNS")
	ErrUnknownEndpoint = errors.New("unknown endpoint")
	ErrInvalid         = errors.New("invalid parameter")
)
