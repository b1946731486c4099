// Package core decides, for one node, what every proxied Service port must do:
// which frontends exist, which endpoints are eligible for which traffic, when to
// masquerade, and what happens when no endpoint is left. It is pure data in, data
// out: Kubernetes objects and node facts go in, a NodeState comes out, and both
// data planes (nftables on Linux, HNS on Windows) only express what it decided.
// Keeping every Service-semantics decision here is what makes Linux and Windows
// nodes behave the same.
package core

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultProxyName is the value of the service.kubernetes.io/service-proxy-name
// label that crossproxy serves when no other name is configured. A Service with
// that label and another value belongs to another proxy and is left alone.
const DefaultProxyName = ""

// DefaultAffinityTimeoutSeconds is Kubernetes' default ClientIP affinity timeout
// (3 hours), used when a Service asks for ClientIP affinity without a timeout.
const DefaultAffinityTimeoutSeconds int32 = 10800

// LocalDetectMode names how a backend tells traffic that comes from a pod on
// this cluster from traffic that comes from outside, which decides masquerading.
// The names are kube-proxy's detectLocalMode values so its config files carry over.
type LocalDetectMode string

const (
	// LocalDetectClusterCIDR treats sources inside the cluster CIDRs as local.
	LocalDetectClusterCIDR LocalDetectMode = "ClusterCIDR"
	// LocalDetectNodeCIDR treats sources inside this node's pod CIDRs as local.
	LocalDetectNodeCIDR LocalDetectMode = "NodeCIDR"
	// LocalDetectBridgeInterface treats packets arriving on one bridge as local.
	LocalDetectBridgeInterface LocalDetectMode = "BridgeInterface"
	// LocalDetectInterfaceNamePrefix treats packets arriving on interfaces with a prefix as local.
	LocalDetectInterfaceNamePrefix LocalDetectMode = "InterfaceNamePrefix"
	// LocalDetectNone disables local detection: off-cluster masquerading is then impossible
	// to decide, so only masqueradeAll and ETP Cluster masquerade.
	LocalDetectNone LocalDetectMode = "None"
)

// Options are the node-wide settings the core needs. They come from the config
// file and flags; the core validates them with Validate.
type Options struct {
	// ProxyName is the service.kubernetes.io/service-proxy-name value this
	// instance serves. Empty means: only Services without the label.
	ProxyName string
	// IPFamilies are the families this node runs. A Service family not listed is ignored.
	IPFamilies []v1.IPFamily
	// LocalDetect decides which sources count as "inside the cluster".
	LocalDetect LocalDetect
	// NodePortAddresses selects the node addresses that get NodePort frontends:
	// CIDRs, or the keyword "primary" (the Node's primary address per family).
	// Empty means "primary", as kube-proxy's nftables mode does.
	NodePortAddresses []string
	// HostAddresses are the addresses configured on this host's interfaces, if the
	// caller knows them; NodePortAddresses CIDRs select from these and the Node's
	// status addresses.
	HostAddresses []netip.Addr
	// MasqueradeAll masquerades every connection to a ClusterIP.
	MasqueradeAll bool
}

// LocalDetect is the local-traffic detection configuration.
type LocalDetect struct {
	Mode LocalDetectMode
	// CIDRs are the cluster CIDRs (ClusterCIDR mode); in NodeCIDR mode the
	// Node's podCIDRs are used and these are ignored.
	CIDRs []netip.Prefix
	// BridgeInterface is the bridge name (BridgeInterface mode).
	BridgeInterface string
	// InterfaceNamePrefix is the interface prefix (InterfaceNamePrefix mode).
	InterfaceNamePrefix string
}

// FamilyLocalDetect is the local detection rule for one IP family, resolved
// against the Node (NodeCIDR mode uses the Node's podCIDRs).
type FamilyLocalDetect struct {
	Mode LocalDetectMode
	// CIDRs of this family (ClusterCIDR and NodeCIDR modes).
	CIDRs []netip.Prefix
	// Interface is a bridge name or an interface name prefix.
	Interface string
}

// Implemented reports whether this rule can tell local from off-cluster traffic.
func (d FamilyLocalDetect) Implemented() bool {
	switch d.Mode {
	case LocalDetectClusterCIDR, LocalDetectNodeCIDR:
		return len(d.CIDRs) > 0
	case LocalDetectBridgeInterface, LocalDetectInterfaceNamePrefix:
		return d.Interface != ""
	}
	return false
}

// NodeInfo is what the core knows of this node, taken from its Node object.
type NodeInfo struct {
	Name   string
	Zone   string
	Labels map[string]string
	// Addresses are the Node's status addresses (InternalIP first, then ExternalIP).
	Addresses []netip.Addr
	// PodCIDRs are the Node's spec.podCIDRs.
	PodCIDRs []netip.Prefix
	// Deleting is true when the Node has a deletion timestamp.
	Deleting bool
}

// FrontendKind says how traffic reaches a frontend, which decides the endpoint
// set it uses: ClusterIP traffic is internal, the others are external.
type FrontendKind string

const (
	FrontendClusterIP    FrontendKind = "ClusterIP"
	FrontendNodePort     FrontendKind = "NodePort"
	FrontendExternalIP   FrontendKind = "ExternalIP"
	FrontendLoadBalancer FrontendKind = "LoadBalancer"
)

// External reports whether traffic to this frontend follows externalTrafficPolicy.
func (k FrontendKind) External() bool { return k != FrontendClusterIP }

// Frontend is one address:port a Service port answers on for this node.
type Frontend struct {
	Kind FrontendKind
	Addr netip.Addr
	Port uint16
}

func (f Frontend) String() string {
	return fmt.Sprintf("%s %s", f.Kind, netip.AddrPortFrom(f.Addr, f.Port))
}

// Endpoint is one backend address:port for one Service port, with the facts the
// core used to choose it.
type Endpoint struct {
	Addr        netip.Addr
	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
	// Local is true when the endpoint runs on this node.
	Local bool
	// Slice is the EndpointSlice the endpoint came from.
	Slice string
	// Place is the node and zone the endpoint runs on (NodeName and Zone
	// read it); the core sets it on every endpoint it computes. It is
	// shared, never modified: see EndpointPlace.
	Place *EndpointPlace
}

// EndpointPlace is a node and zone endpoints run on. Every endpoint on one
// node and zone points to one EndpointPlace instead of copying the two
// strings: a NodeState holds an Endpoint per Service port and endpoint
// (100,000 at 10,000 Services), and at 56 bytes instead of 88 ten of them
// fit in 576 bytes instead of 896.
type EndpointPlace struct {
	NodeName string
	Zone     string
}

// NodeName is the node the endpoint runs on, "" when its slice did not say.
func (e Endpoint) NodeName() string {
	if e.Place == nil {
		return ""
	}
	return e.Place.NodeName
}

// Zone is the zone the endpoint runs in, "" when its slice did not say.
func (e Endpoint) Zone() string {
	if e.Place == nil {
		return ""
	}
	return e.Place.Zone
}

// endpointJSON is an Endpoint's JSON form: the place's fields inline, as
// they were before places were shared, so saved states still read.
type endpointJSON struct {
	Addr        netip.Addr
	Port        uint16
	NodeName    string
	Zone        string
	Ready       bool
	Serving     bool
	Terminating bool
	Local       bool
	Slice       string
}

// MarshalJSON writes the endpoint with its place's fields inline.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(endpointJSON{Addr: e.Addr, Port: e.Port, NodeName: e.NodeName(), Zone: e.Zone(), Ready: e.Ready, Serving: e.Serving,
		Terminating: e.Terminating, Local: e.Local, Slice: e.Slice})
}

// UnmarshalJSON reads what MarshalJSON writes; each endpoint read gets its
// own place.
func (e *Endpoint) UnmarshalJSON(data []byte) error {
	var v endpointJSON
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*e = Endpoint{Addr: v.Addr, Port: v.Port, Ready: v.Ready, Serving: v.Serving, Terminating: v.Terminating, Local: v.Local, Slice: v.Slice,
		Place: &EndpointPlace{NodeName: v.NodeName, Zone: v.Zone}}
	return nil
}

// AddrPort is the endpoint's destination.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.Addr, e.Port) }

// ExclusionReason is why an endpoint is not in a set.
type ExclusionReason string

const (
	ExcludedNotReady       ExclusionReason = "NotReady"
	ExcludedTerminating    ExclusionReason = "Terminating"
	ExcludedOtherZone      ExclusionReason = "OtherZone"
	ExcludedOtherNode      ExclusionReason = "OtherNode"
	ExcludedWrongFamily    ExclusionReason = "WrongFamily"
	ExcludedNoMatchingPort ExclusionReason = "NoMatchingPort"
	ExcludedDuplicate      ExclusionReason = "Duplicate"
	ExcludedInvalid        ExclusionReason = "Invalid"
)

// EndpointSet names which set an exclusion applies to.
type EndpointSet string

const (
	SetCluster EndpointSet = "cluster"
	SetLocal   EndpointSet = "local"
	// SetAll means the endpoint is in no set at all.
	SetAll EndpointSet = "all"
)

// Exclusion records an endpoint left out of a set and why, so a person can see
// what crossproxy did not use (crossproxy state, crossproxy explain).
type Exclusion struct {
	Addr   string // as written in the slice; may be invalid
	Port   uint16
	Slice  string
	Set    EndpointSet
	Reason ExclusionReason
	Detail string
}

// Verdict is what a frontend does with a new connection when its endpoint set is empty.
type Verdict string

const (
	// VerdictNone: the set is not empty, connections are load-balanced.
	VerdictNone Verdict = ""
	// VerdictReject answers at once (ICMP unreachable / TCP reset): the Service has no endpoint at all.
	VerdictReject Verdict = "reject"
	// VerdictDrop silently drops: endpoints exist, but none on this node for a Local policy.
	VerdictDrop Verdict = "drop"
)

// Affinity is the session affinity of a Service port.
type Affinity struct {
	ClientIP       bool
	TimeoutSeconds int32
}

// Masquerade says which connections to a port need their source rewritten to
// the node's address so replies come back through this node.
type Masquerade struct {
	// All: masquerade every connection (masqueradeAll).
	All bool
	// OffClusterInternal: masquerade ClusterIP connections whose source is not
	// local per the family's LocalDetect.
	OffClusterInternal bool
	// External: masquerade external connections (NodePort, ExternalIP,
	// LoadBalancer). True for externalTrafficPolicy Cluster. With Local, only
	// connections from the node itself are masqueraded and pod-originated ones
	// short-circuit to the cluster set; backends implement that split.
	External bool
}

// PortKey identifies one Service port in one IP family.
type PortKey struct {
	Service  types.NamespacedName
	PortName string
	Protocol v1.Protocol
	Family   v1.IPFamily
}

func (k PortKey) String() string {
	fam := "v4"
	if k.Family == v1.IPv6Protocol {
		fam = "v6"
	}
	return fmt.Sprintf("%s:%s/%s/%s", k.Service, k.PortName, k.Protocol, fam)
}

// Compare orders port keys by Service namespace, name, port name, protocol and
// family. It is the one order of port keys: NodeState.SortedPorts, the core's
// own lists and the backends' listings all use it.
func (k PortKey) Compare(o PortKey) int { return comparePortKey(k, o) }

// ServicePort is everything a backend needs for one Service port in one family.
// Backends must treat it as read-only: it may be shared between NodeStates.
//
// Whatever the input, the core guarantees (FuzzCompute checks it) that a
// ServicePort is family-pure, valid and sorted, so backends need no guard of
// their own: every address (ClusterIP, frontends, endpoints, source ranges)
// is valid, has no IPv6 zone, is not IPv4-mapped and is of Key.Family;
// Protocol equals Key.Protocol; ports are non-zero. The field comments say how
// each list is ordered; no list holds a repeat.
type ServicePort struct {
	Key       PortKey
	ClusterIP netip.Addr
	Port      uint16
	NodePort  uint16
	Protocol  v1.Protocol
	// Frontends are every address:port of this port on this node: the
	// ClusterIP first, then the NodePort frontends in the order of
	// NodeState.NodePortAddresses, then the external IPs and then the load
	// balancer IPs, each sorted by address. No address:port appears twice.
	Frontends []Frontend
	// SourceRanges restrict LoadBalancer frontends to these client prefixes
	// (this family only), masked, sorted by address then length. Nil means no
	// filtering (also when a /0 was given); a /0 never appears.
	SourceRanges []netip.Prefix
	Affinity     Affinity
	// InternalPolicyLocal and ExternalPolicyLocal are the resolved traffic policies.
	InternalPolicyLocal bool
	ExternalPolicyLocal bool
	// ClusterEndpoints serve Cluster-policy traffic, after topology filtering and
	// the serving-terminating fallback. Sorted by address:port, one entry per
	// address:port; nil when the set is empty or unused.
	ClusterEndpoints []Endpoint
	// LocalEndpoints serve Local-policy traffic: this node's endpoints, ready
	// ones or, when none is ready, serving-terminating ones. Sorted and
	// without repeats as ClusterEndpoints.
	LocalEndpoints []Endpoint
	// InternalEmpty and ExternalEmpty say what happens when InternalEndpoints or
	// ExternalEndpoints is empty.
	InternalEmpty Verdict
	ExternalEmpty Verdict
	Masquerade    Masquerade
	// HealthCheckNodePort is set for LoadBalancer Services with ETP Local.
	HealthCheckNodePort uint16
	// PreserveDestination is the Service's AnnotationPreserveDestination:
	// kube-proxy's Windows proxier then keeps the VIP as the packets'
	// destination (DSR, PreserveDIP). Only a backend that can say what it
	// does with it reads it; the Linux data plane has no such mode.
	PreserveDestination bool `json:",omitempty"`
	// TopologyMode is "", "PreferSameZone" or "PreferSameNode": the hints used for ClusterEndpoints.
	TopologyMode string
	// HintsUnused says why hints carried by the ready endpoints did not
	// narrow ClusterEndpoints, one entry per kind of hint. It is empty when
	// TopologyMode is set and when no ready endpoint carries a hint, so an
	// empty TopologyMode with empty HintsUnused means "no hints to use".
	HintsUnused []HintsUnused `json:",omitempty"`
	// TopologyNote says HintsUnused in words, e.g. "hints ignored: no
	// forZones hint names this node's zone "a"; all endpoints are used".
	TopologyNote string
	// Excluded lists endpoints left out of a set, with the reason.
	Excluded []Exclusion
}

// HintsUnused is why topology hints present on a port's ready endpoints did
// not narrow its cluster set, so explain and state can say it without
// re-deriving the hint rules.
type HintsUnused string

const (
	// HintsNodeIncomplete: some ready endpoints have forNodes hints, others none.
	HintsNodeIncomplete HintsUnused = "SomeReadyWithoutNodeHint"
	// HintsNodeNotHere: every ready endpoint has forNodes hints, none names this node.
	HintsNodeNotHere HintsUnused = "NoNodeHintForThisNode"
	// HintsZoneIncomplete: some ready endpoints have forZones hints, others none.
	HintsZoneIncomplete HintsUnused = "SomeReadyWithoutZoneHint"
	// HintsNodeWithoutZone: every ready endpoint has forZones hints, but this
	// node has no zone label to match them.
	HintsNodeWithoutZone HintsUnused = "NodeWithoutZone"
	// HintsZoneNotHere: every ready endpoint has forZones hints, none names
	// this node's zone, so no ready endpoint is in this zone.
	HintsZoneNotHere HintsUnused = "NoZoneHintForThisZone"
)

// InternalEndpoints is the set ClusterIP traffic uses.
func (p *ServicePort) InternalEndpoints() []Endpoint {
	if p.InternalPolicyLocal {
		return p.LocalEndpoints
	}
	return p.ClusterEndpoints
}

// ExternalEndpoints is the set external traffic (NodePort, ExternalIP, LB) from outside uses.
func (p *ServicePort) ExternalEndpoints() []Endpoint {
	if p.ExternalPolicyLocal {
		return p.LocalEndpoints
	}
	return p.ClusterEndpoints
}

// External reports whether the Service has external entry points (NodePort,
// LoadBalancer or external IPs): the traffic externalTrafficPolicy applies to,
// whether or not this node has a frontend for them in this family (kube-proxy's
// "externally accessible"). Such a port has an external verdict
// (ExternalEmpty), and either the Local policy or masqueraded external traffic.
func (p *ServicePort) External() bool { return p.ExternalPolicyLocal || p.Masquerade.External }

// InternalPolicy names the resolved internal traffic policy as the Service
// spells it: "Local" or "Cluster".
func (p *ServicePort) InternalPolicy() string { return policyName(p.InternalPolicyLocal) }

// ExternalPolicy names the resolved external traffic policy as the Service
// spells it: "Local" or "Cluster" (also for a port that is not External).
func (p *ServicePort) ExternalPolicy() string { return policyName(p.ExternalPolicyLocal) }

func policyName(local bool) string {
	if local {
		return string(v1.ServiceExternalTrafficPolicyLocal)
	}
	return string(v1.ServiceExternalTrafficPolicyCluster)
}

// HealthCheck is a health-check node port served for a LoadBalancer Service
// with externalTrafficPolicy Local.
type HealthCheck struct {
	Service        types.NamespacedName
	NodePort       uint16
	LocalEndpoints int
}

// Problem is an object, or part of one, the core rejected; the rest still works.
type Problem struct {
	// Kind is "Service", "EndpointSlice", "Node" or "Options".
	Kind string
	// Object is namespace/name.
	Object string
	// Field is the JSON path of the bad field, e.g. spec.ports[1].port.
	Field  string
	Reason string
	// Service is the Service the problem affects, when known (for events).
	Service types.NamespacedName
}

func (p Problem) String() string {
	return fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Object, p.Field, p.Reason)
}

// NodeState is the whole desired state of this node.
type NodeState struct {
	Node NodeInfo
	// Families are the IP families this node runs, in the order configured.
	Families []v1.IPFamily
	// LocalDetect per family.
	LocalDetect map[v1.IPFamily]FamilyLocalDetect
	// NodePortAddresses per family: the addresses that got NodePort frontends.
	NodePortAddresses map[v1.IPFamily][]netip.Addr
	// Ports holds every proxied Service port, keyed by PortKey. Every
	// ServicePort keeps the guarantees its type documents; SortedPorts lists
	// them in PortKey.Compare order.
	Ports map[PortKey]*ServicePort
	// HealthChecks, sorted by Service.
	HealthChecks []HealthCheck
	// Problems found in the input, sorted.
	Problems []Problem
	// Ignored lists the Services and EndpointSlices deliberately not proxied
	// (headless, ExternalName, another proxy's), sorted, so `state` can say why.
	Ignored []IgnoredObject
}

// IgnoredObject is an object the core skips on purpose; unlike a Problem
// nothing is wrong with it.
type IgnoredObject struct {
	// Kind is "Service" or "EndpointSlice".
	Kind string
	// Object is namespace/name.
	Object string
	Reason string
}

// Changes says what differs between the NodeState a backend last applied and
// the current one, so a backend can sync only that.
type Changes struct {
	// Full is set when everything must be reconciled: first state, node or
	// options changed.
	Full bool
	// Ports lists the PortKeys added, changed or removed (removed ones are
	// absent from the new NodeState).
	Ports map[PortKey]struct{}
	// StaleUDP lists, per UDP port, endpoints that went away (conntrack cleanup).
	StaleUDP []StaleEndpoint
	// ActivatedUDP lists the UDP ports that have endpoints now and had none
	// (or did not exist) before, sorted by key (conntrack cleanup).
	ActivatedUDP []ActivatedPort
	// ServiceChanges and EndpointChanges count object updates folded into this
	// change, for metrics.
	ServiceChanges  int
	EndpointChanges int
	// TriggerTimes are the endpoints.kubernetes.io/last-change-trigger-time
	// values of the EndpointSlice updates folded in, for the
	// network_programming_duration_seconds metric.
	TriggerTimes []time.Time
}

// ActivatedPort is a UDP Service port that got its first endpoints. A client
// that sent to one of its frontends while nothing translated them (no rule
// yet, so the packets were routed as they were) has a conntrack entry that
// never goes through DNAT, and keeps it as long as it keeps sending; such
// entries reply from none of Endpoints and should be deleted once the rules
// are in force, as kube-proxy does.
type ActivatedPort struct {
	Key       PortKey
	Frontends []Frontend
	// Endpoints are the addresses of every endpoint the port now uses.
	Endpoints []netip.Addr
}

// StaleEndpoint is a UDP endpoint that was removed from a Service port, whose
// conntrack entries should be deleted so clients move to live endpoints.
type StaleEndpoint struct {
	Key       PortKey
	Frontends []Frontend
	Endpoint  netip.AddrPort
}
