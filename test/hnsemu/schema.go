package hnsemu

import (
	"encoding/json"
	"fmt"
	"strings"
)

// The HNS V2 objects the emulator keeps, in the JSON shape hcsshim v0.15.0's
// hcn package marshals and unmarshals (hcn/hcnnetwork.go HostComputeNetwork,
// hcn/hcnendpoint.go HostComputeEndpoint, hcn/hcnloadbalancer.go
// HostComputeLoadBalancer, hcn/hcnnamespace.go HostComputeNamespace; field
// names and "ID" as those types' JSON tags give them). Defined here because
// hcn compiles to nothing on Linux; only the fields crossproxy, kube-proxy
// and the CNIs read or write are typed, the rest (Dns, Routes, MacPool,
// Health) are kept as sent.

// Version is HNS' version and an object's SchemaVersion (hcn Version).
type Version struct {
	Major int `json:"Major"`
	Minor int `json:"Minor"`
}

// Policy is a network or endpoint policy: {"Type":…,"Settings":{…}} (hcn
// NetworkPolicy, EndpointPolicy).
type Policy struct {
	Type     string          `json:"Type"`
	Settings json.RawMessage `json:"Settings,omitempty"`
}

// Subnet and Ipam are a network's address configuration (hcn Subnet, Ipam).
type Subnet struct {
	IpAddressPrefix string            `json:",omitempty"`
	Policies        []json.RawMessage `json:",omitempty"`
	Routes          []Route           `json:",omitempty"`
	Flags           uint32            `json:",omitempty"`
}

type Route struct {
	NextHop           string `json:",omitempty"`
	DestinationPrefix string `json:",omitempty"`
	Metric            uint16 `json:",omitempty"`
}

type Ipam struct {
	Type    string   `json:",omitempty"`
	Subnets []Subnet `json:",omitempty"`
}

// Network is hcn.HostComputeNetwork.
type Network struct {
	ID            string          `json:"ID,omitempty"`
	Name          string          `json:",omitempty"`
	Type          string          `json:",omitempty"`
	Policies      []Policy        `json:",omitempty"`
	MacPool       json.RawMessage `json:",omitempty"`
	Dns           json.RawMessage `json:",omitempty"`
	Ipams         []Ipam          `json:",omitempty"`
	Flags         uint32          `json:",omitempty"`
	Health        json.RawMessage `json:",omitempty"`
	SchemaVersion Version         `json:",omitempty"`
}

// IpConfig is an endpoint address (hcn IpConfig).
type IpConfig struct {
	IpAddress    string `json:",omitempty"`
	PrefixLength uint8  `json:",omitempty"`
}

// Endpoint is hcn.HostComputeEndpoint. Flags bit 1 is remote
// (hcn EndpointFlagsRemoteEndpoint).
type Endpoint struct {
	ID                   string          `json:"ID,omitempty"`
	Name                 string          `json:",omitempty"`
	HostComputeNetwork   string          `json:",omitempty"`
	HostComputeNamespace string          `json:",omitempty"`
	Policies             []Policy        `json:",omitempty"`
	IpConfigurations     []IpConfig      `json:",omitempty"`
	Dns                  json.RawMessage `json:",omitempty"`
	Routes               []Route         `json:",omitempty"`
	MacAddress           string          `json:",omitempty"`
	Flags                uint32          `json:",omitempty"`
	Health               json.RawMessage `json:",omitempty"`
	SchemaVersion        Version         `json:",omitempty"`
}

const endpointFlagRemote = 1

// PortMapping is hcn.LoadBalancerPortMapping: Protocol 6 TCP, 17 UDP;
// Flags 1 ILB, 2 LocalRoutedVIP, 4 UseMux, 8 PreserveDIP (hcn), 16
// VipExternalIP (kube-proxy's and crossproxy's constant, unnamed in hcn);
// DistributionType 2 source IP.
type PortMapping struct {
	Protocol         uint32 `json:",omitempty"`
	InternalPort     uint16 `json:",omitempty"`
	ExternalPort     uint16 `json:",omitempty"`
	DistributionType uint32 `json:",omitempty"`
	Flags            uint32 `json:",omitempty"`
}

// LoadBalancer is hcn.HostComputeLoadBalancer. Flags 1 DSR, 2 IPv6.
type LoadBalancer struct {
	ID                   string        `json:"ID,omitempty"`
	HostComputeEndpoints []string      `json:",omitempty"`
	SourceVIP            string        `json:",omitempty"`
	FrontendVIPs         []string      `json:",omitempty"`
	PortMappings         []PortMapping `json:",omitempty"`
	SchemaVersion        Version       `json:",omitempty"`
	Flags                uint32        `json:",omitempty"`
}

const (
	lbFlagDSR  = 1
	lbFlagIPv6 = 2
)

// Namespace is hcn.HostComputeNamespace, kept as sent plus its id.
type Namespace struct {
	ID   string `json:"ID,omitempty"`
	Rest map[string]json.RawMessage
}

// MarshalJSON writes the namespace as HNS would: its fields and ID.
func (n Namespace) MarshalJSON() ([]byte, error) {
	m := map[string]json.RawMessage{}
	for k, v := range n.Rest {
		m[k] = v
	}
	id, _ := json.Marshal(n.ID)
	m["ID"] = id
	return json.Marshal(m)
}

// Query is hcn.HostComputeQuery; Filter is itself JSON, a map of field to
// value (hcn GetNetworkByName {"Name":…}, ListEndpointsOfNetwork
// {"VirtualNetwork":…}, Get…ByID {"ID":…}).
type Query struct {
	SchemaVersion Version
	Flags         uint32 `json:",omitempty"`
	Filter        string `json:",omitempty"`
}

// The HNS versions at which features begin, as hcsshim v0.15.0
// hcn/hcnglobals.go tabulates them (DSRVersion, SessionAffinityVersion,
// IPv6DualStackVersion). The emulator refuses what its version lacks.
func (v Version) atLeast(major, minor int) bool {
	return v.Major > major || (v.Major == major && v.Minor >= minor)
}

func (v Version) dsr() bool {
	return (v.Major == 9 && v.Minor >= 3) || v.atLeast(10, 2)
}
func (v Version) sessionAffinity() bool { return v.atLeast(12, 0) }
func (v Version) ipv6DualStack() bool   { return v.atLeast(11, 10) }

// modifyLoadBalancer is hcn's ModifyLoadbalancerVersion (15.4 and later):
// the version from which HNS accepts HcnModifyLoadBalancer at all. Whether it
// then keeps the endpoints is the profile's ModifyKeepsEndpoints.
func (v Version) modifyLoadBalancer() bool { return v.atLeast(15, 4) }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

func sameID(a, b string) bool { return strings.EqualFold(a, b) }
