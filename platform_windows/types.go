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

// LBFlags are the load balancer and port mapping flags crossproxy sets, as
// booleans so the planner and the fake need no HNS bit values.
type LBFlags struct {
	// DSR enables direct server return (HNS LoadBalancerFlagsDSR).
	DSR bool
	// IPv6 marks an IPv6 load balancer (HNS LoadBalancerFlagsIPv6).
	IPv6 bool
	// LocalRoutedVIP lets the host itself reach the VIP (port mapping flag).
	LocalRoutedVIP bool
	// PreserveDIP delivers packets with the VIP as destination (port mapping flag).
	PreserveDIP bool
}

func (f LBFlags) String() string {
	var s []string
	if f.DSR {
		s = append(s, "DSR")
	}
	if f.IPv6 {
		s = append(s, "IPv6")
	}
	if f.LocalRoutedVIP {
		s = append(s, "LocalRoutedVIP")
	}
	if f.PreserveDIP {
		s = append(s, "PreserveDIP")
	}
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

// Frontend is the load balancer's identity as HNS checks it for duplicates:
// protocol, external port and VIPs.
func (lb *LoadBalancer) Frontend() string {
	vips := make([]string, len(lb.FrontendVIPs))
	for i, a := range lb.FrontendVIPs {
		vips[i] = a.String()
	}
	return fmt.Sprintf("%s/%s/%d", lb.Protocol, strings.Join(vips, ","), lb.ExternalPort)
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
	ID            string
	Name          string
	Type          NetworkType
	RemoteSubnets []RemoteSubnet
}

// Features are the HNS capabilities crossproxy adapts to.
type Features struct {
	DSR                bool
	IPv6DualStack      bool
	ModifyLoadBalancer bool
	SessionAffinity    bool
	RemoteSubnet       bool
}

// AllFeatures is a current Windows Server's feature set (used by render).
var AllFeatures = Features{DSR: true, IPv6DualStack: true, ModifyLoadBalancer: true, SessionAffinity: true, RemoteSubnet: true}

// HNS is the Host Networking Service as crossproxy uses it. Its methods take
// and return only this package's plain types so the fake runs on any OS and
// the hcn-calling layer stays thin. Every method is one HNS call.
type HNS interface {
	Features(ctx context.Context) (Features, error)
	GetNetwork(ctx context.Context, name string) (Network, error)
	ListEndpoints(ctx context.Context, networkID string) ([]Endpoint, error)
	CreateRemoteEndpoint(ctx context.Context, networkID string, ep Endpoint) (Endpoint, error)
	DeleteEndpoint(ctx context.Context, id string) error
	ListLoadBalancers(ctx context.Context) ([]LoadBalancer, error)
	CreateLoadBalancer(ctx context.Context, lb LoadBalancer) (LoadBalancer, error)
	// UpdateLoadBalancer modifies a load balancer in place (needs Features.ModifyLoadBalancer).
	UpdateLoadBalancer(ctx context.Context, id string, lb LoadBalancer) (LoadBalancer, error)
	DeleteLoadBalancer(ctx context.Context, id string) error
}

// Errors HNS implementations return (wrapped) so callers can branch on them.
var (
	ErrNotFound          = errors.New("not found")
	ErrDuplicateFrontend = errors.New("a load balancer with this frontend already exists")
	ErrUnknownEndpoint   = errors.New("unknown endpoint")
	ErrInvalid           = errors.New("invalid parameter")
)
