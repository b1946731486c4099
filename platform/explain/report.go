// Package explain shows one Service through the four layers in which it can
// fail — as declared, as published in EndpointSlices, as computed for this node
// by the core, and as programmed in the node's data plane — and names the first
// place where they disagree. It is pure data in, data out (no OS calls), so
// `crossproxy explain`, the running proxy's debug endpoint and the tests all
// share one model and one set of words.
package explain

import (
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// Layer numbers, in the order a Service is walked.
const (
	LayerDeclared   = 1
	LayerPublished  = 2
	LayerComputed   = 3
	LayerProgrammed = 4
)

// layerNames are the words used for each layer in text output.
var layerNames = map[int]string{
	LayerDeclared:   "declared",
	LayerPublished:  "published",
	LayerComputed:   "computed",
	LayerProgrammed: "programmed",
}

// Severity says whether a Finding breaks the Service or only explains it.
type Severity string

const (
	// SeverityMismatch is a disagreement that keeps traffic from working as
	// declared; explain exits non-zero on one.
	SeverityMismatch Severity = "mismatch"
	// SeverityNote explains behaviour that is intended (a Local policy that
	// drops on a node without local endpoints, a layer that could not be read).
	SeverityNote Severity = "note"
)

// Finding is one thing explain noticed, in plain words.
type Finding struct {
	Layer    int      `json:"layer"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
}

// Input is everything explain looks at. Nil or empty parts are shown as
// missing or unavailable rather than failing: explain must say what it can.
type Input struct {
	Service types.NamespacedName
	// NodeName is the node the computed and programmed layers belong to.
	NodeName string
	// Object is the Service as stored; nil when it does not exist.
	Object *v1.Service
	// Slices are the EndpointSlices labelled kubernetes.io/service-name with the Service's name.
	Slices []*discovery.EndpointSlice
	// State is the node's computed state (it may hold other Services too);
	// nil when it is unavailable, with StateUnavailable saying why.
	State            *core.NodeState
	StateUnavailable string
	// StateSource says where State came from ("computed by explain from the
	// API server", "the running proxy's sync 12"), so a reader knows whose
	// decisions layer 3 shows.
	StateSource string
	// Programmed is what the data plane holds; nil when it could not be read,
	// with ProgrammedUnavailable saying why. ProgrammedFailed marks a read
	// that failed on a platform that has a data plane (no table, no
	// privileges), as opposed to a platform without one: when the computed
	// state has ports for the Service, a failed read is a mismatch, since
	// nothing confirms the rules exist.
	Programmed            *platform.ProgrammedService
	ProgrammedUnavailable string
	ProgrammedFailed      bool
	// Backend names the data plane ("nftables", "hns").
	Backend string
	// OtherProxies are other Service proxies found programming this node
	// (platform.OtherProxyDetector).
	OtherProxies []platform.OtherProxy
}

// Report is the four layers of one Service and what explain found in them.
// It is the JSON document of `crossproxy explain --output json` and of the
// debug endpoint.
type Report struct {
	Service    string     `json:"service"`
	Node       string     `json:"node"`
	Declared   Declared   `json:"declared"`
	Published  Published  `json:"published"`
	Computed   Computed   `json:"computed"`
	Programmed Programmed `json:"programmed"`
	// Findings are in layer order; FirstMismatch is the first of severity mismatch.
	Findings      []Finding `json:"findings"`
	FirstMismatch *Finding  `json:"firstMismatch,omitempty"`
}

// OK reports whether the four layers agree.
func (r *Report) OK() bool { return r.FirstMismatch == nil }

// Declared is layer 1: the Service as its author wrote it.
type Declared struct {
	Found                    bool              `json:"found"`
	Type                     string            `json:"type,omitempty"`
	ClusterIPs               []string          `json:"clusterIPs,omitempty"`
	IPFamilies               []string          `json:"ipFamilies,omitempty"`
	IPFamilyPolicy           string            `json:"ipFamilyPolicy,omitempty"`
	Ports                    []DeclaredPort    `json:"ports,omitempty"`
	ExternalIPs              []string          `json:"externalIPs,omitempty"`
	LoadBalancerIPs          []string          `json:"loadBalancerIPs,omitempty"`
	ExternalTrafficPolicy    string            `json:"externalTrafficPolicy,omitempty"`
	InternalTrafficPolicy    string            `json:"internalTrafficPolicy,omitempty"`
	TrafficDistribution      string            `json:"trafficDistribution,omitempty"`
	SessionAffinity          string            `json:"sessionAffinity,omitempty"`
	AffinityTimeoutSeconds   int32             `json:"affinityTimeoutSeconds,omitempty"`
	HealthCheckNodePort      int32             `json:"healthCheckNodePort,omitempty"`
	PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses,omitempty"`
	Selector                 map[string]string `json:"selector,omitempty"`
	// Ignored is why crossproxy does not proxy the Service at all, if it does not.
	Ignored string `json:"ignored,omitempty"`
	// Problems are the core's complaints about the Service's fields.
	Problems []string `json:"problems,omitempty"`
}

// DeclaredPort is one entry of spec.ports.
type DeclaredPort struct {
	Name       string `json:"name,omitempty"`
	Protocol   string `json:"protocol"`
	Port       int32  `json:"port"`
	TargetPort string `json:"targetPort"`
	NodePort   int32  `json:"nodePort,omitempty"`
}

// Published is layer 2: the EndpointSlices of the Service.
type Published struct {
	Slices []Slice `json:"slices"`
	// Problems are the core's complaints about the slices' fields.
	Problems []string `json:"problems,omitempty"`
}

// Slice is one EndpointSlice.
type Slice struct {
	Name        string          `json:"name"`
	AddressType string          `json:"addressType"`
	Ports       []SlicePort     `json:"ports"`
	Endpoints   []SliceEndpoint `json:"endpoints"`
	// Ignored is why the core skips this slice on purpose (headless), if it does.
	Ignored string `json:"ignored,omitempty"`
}

// SlicePort is one port of a slice; Port is 0 when the slice leaves it unset.
type SlicePort struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	Port     int32  `json:"port"`
}

// SliceEndpoint is one endpoint of a slice, conditions resolved as Kubernetes
// defines them (an unset condition is true, except terminating).
type SliceEndpoint struct {
	Addresses   []string `json:"addresses"`
	Ready       bool     `json:"ready"`
	Serving     bool     `json:"serving"`
	Terminating bool     `json:"terminating"`
	Node        string   `json:"node,omitempty"`
	Zone        string   `json:"zone,omitempty"`
	HintZones   []string `json:"hintZones,omitempty"`
	HintNodes   []string `json:"hintNodes,omitempty"`
}

// Computed is layer 3: what crossproxy decided for this node.
type Computed struct {
	Available   bool           `json:"available"`
	Unavailable string         `json:"unavailable,omitempty"`
	Source      string         `json:"source,omitempty"`
	Node        string         `json:"node,omitempty"`
	Zone        string         `json:"zone,omitempty"`
	Families    []string       `json:"families,omitempty"`
	Ports       []ComputedPort `json:"ports,omitempty"`
}

// ComputedPort is one Service port in one family.
type ComputedPort struct {
	Key                   string             `json:"key"`
	Name                  string             `json:"name,omitempty"`
	Protocol              string             `json:"protocol"`
	Family                string             `json:"family"`
	InternalTrafficPolicy string             `json:"internalTrafficPolicy"`
	ExternalTrafficPolicy string             `json:"externalTrafficPolicy"`
	Affinity              string             `json:"affinity,omitempty"`
	TopologyMode          string             `json:"topologyMode,omitempty"`
	TopologyNote          string             `json:"topologyNote,omitempty"`
	Frontends             []ComputedFrontend `json:"frontends"`
	ClusterEndpoints      []ComputedEndpoint `json:"clusterEndpoints"`
	LocalEndpoints        []ComputedEndpoint `json:"localEndpoints"`
	Excluded              []Excluded         `json:"excluded,omitempty"`
}

// ComputedFrontend is one frontend with the endpoint set its traffic uses.
type ComputedFrontend struct {
	Kind      string   `json:"kind"`
	Address   string   `json:"address"`
	Protocol  string   `json:"protocol"`
	Set       string   `json:"set"`
	Endpoints []string `json:"endpoints"`
	// Verdict is "reject" or "drop" when Endpoints is empty.
	Verdict string `json:"verdict,omitempty"`
}

// ComputedEndpoint is one eligible endpoint.
type ComputedEndpoint struct {
	Address     string `json:"address"`
	Node        string `json:"node,omitempty"`
	Zone        string `json:"zone,omitempty"`
	Slice       string `json:"slice,omitempty"`
	Ready       bool   `json:"ready"`
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	Local       bool   `json:"local"`
}

// Excluded is an endpoint left out of a set, and why.
type Excluded struct {
	Address string `json:"address"`
	Port    uint16 `json:"port,omitempty"`
	Slice   string `json:"slice"`
	Set     string `json:"set"`
	Reason  string `json:"reason"`
	Detail  string `json:"detail"`
}

// Programmed is layer 4: what the data plane holds, read back from it.
type Programmed struct {
	Available   bool                 `json:"available"`
	Unavailable string               `json:"unavailable,omitempty"`
	Backend     string               `json:"backend,omitempty"`
	Frontends   []ProgrammedFrontend `json:"frontends,omitempty"`
	Connections []Connection         `json:"connections,omitempty"`
	Notes       []string             `json:"notes,omitempty"`
}

// ProgrammedFrontend is one frontend found in the data plane.
type ProgrammedFrontend struct {
	Kind      string   `json:"kind,omitempty"`
	Address   string   `json:"address"`
	Protocol  string   `json:"protocol"`
	Endpoints []string `json:"endpoints"`
	Verdict   string   `json:"verdict,omitempty"`
}

// Connection is one tracked connection to a frontend of the Service.
type Connection struct {
	Protocol string `json:"protocol"`
	Client   string `json:"client"`
	Frontend string `json:"frontend"`
	Endpoint string `json:"endpoint"`
	State    string `json:"state,omitempty"`
}
