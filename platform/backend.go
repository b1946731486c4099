// Package platform is the contract between the shared core and the data planes:
// the Backend interface every OS implementation satisfies, the errors callers
// branch on, and the sync runner that drives a Backend from a core.Tracker. It
// has no build tags and no OS imports, so both backends and cmd/ share it.
package platform

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// ErrUnsupported is returned (wrapped) when a platform cannot do what was asked,
// for example running the nftables backend on Windows.
var ErrUnsupported = errors.New("not supported on this platform")

// ErrNodeUnfit is returned (wrapped) by a Backend's Sync when no retry can
// succeed on this node, for example when its kernel lacks what the data plane
// needs: the Runner stops and returns the error instead of failing every
// sync.
var ErrNodeUnfit = errors.New("this node cannot run the data plane")

// Backend makes one node's data plane match a core.NodeState. Each
// implementation diffs the desired state against what it finds on the node
// itself; the core never knows how rules are written.
type Backend interface {
	// Name is a short name for logs and metrics ("nftables", "hns").
	Name() string
	// Sync applies state. When changes.Full is false the backend may touch only
	// the ports in changes.Ports; when true (first sync, periodic resync, after a
	// failure) it must reconcile everything it owns. A failed Sync must leave the
	// previously applied rules in force. The conntrack cleanup in changes
	// (StaleUDP, ActivatedUDP) runs only after the new rules are in force;
	// the caller passes a failed sync's cleanup again with the next sync
	// (the Runner does), so the backend keeps none of it.
	Sync(ctx context.Context, state *core.NodeState, changes core.Changes) error
	// Cleanup removes everything the backend ever installed, and nothing else.
	Cleanup(ctx context.Context) error
	// Programmed reads back from the data plane (not from memory) what is in
	// force for one Service, so `crossproxy explain` can compare it with the
	// computed state.
	Programmed(ctx context.Context, svc types.NamespacedName) (*ProgrammedService, error)
	// Close releases what the backend holds open (sockets, namespace
	// handles); the programmed rules stay in force. Every call after Close
	// fails, and a second Close does nothing.
	Close() error
}

// DriftChecker is a Backend that can tell whether what it programmed is
// still in force, so a rule removed behind its back (a firewall reload
// flushing nftables, an HNS restart) is repaired within one SyncPeriod
// instead of at the next full sync, an hour later. The Runner decides when
// a check is due, for both backends alike: SyncPeriod after the last check,
// whatever syncs came between; a due check gets a sync of its own, which the
// check makes full when it found drift. A backend whose check costs nothing
// (nftables' ruleset generation) is checked before every sync as well; one
// whose check lists objects (ListingDriftChecker) only when due.
type DriftChecker interface {
	// CheckDrift names what others changed of what the backend programmed
	// since its last sync, or returns nil when nothing was.
	CheckDrift(ctx context.Context) ([]string, error)
}

// ListingDriftChecker is a DriftChecker whose check lists the data plane's
// objects (HNS has neither change notifications nor a generation counter):
// the Runner calls its CheckDrift only when a check is due, so a burst of
// changes costs no listing per sync.
type ListingDriftChecker interface {
	DriftChecker
	// DriftCheckLists marks the check as one that lists objects.
	DriftCheckLists()
}

// DriftWatcher is a Backend that hears of changes to its rules as others make
// them, so the Runner can repair them within MinSyncPeriod rather than
// waiting for the next periodic sync.
type DriftWatcher interface {
	// WatchDrift blocks until ctx ends. It calls changed with a description
	// of each change others made to what the backend programmed, or with ""
	// when it may have missed one (the next sync's CheckDrift then looks).
	// Changes the backend makes itself are never reported. It returns an
	// error only when it cannot watch at all.
	WatchDrift(ctx context.Context, changed func(what string)) error
}

// OtherProxyDetector is a Backend that can tell whether another Service
// proxy programs this node beside it: kube-proxy brought back by `kubeadm
// upgrade` after a migration, say. Two proxies translate the same Service
// addresses with different endpoint choices and masquerade rules, and
// neither notices on its own. The Runner asks at start and every SyncPeriod.
type OtherProxyDetector interface {
	// OtherProxies lists every other proxy found, with what gave it away;
	// nil when there is none.
	OtherProxies(ctx context.Context) ([]OtherProxy, error)
}

// OtherProxy is another Service proxy found programming this node.
type OtherProxy struct {
	// Name is the proxy ("kube-proxy"); metrics label it so.
	Name string
	// Evidence names what was found ("nftables table ip kube-proxy").
	Evidence []string
}

func (o OtherProxy) String() string {
	return fmt.Sprintf("%s (%s)", o.Name, strings.Join(o.Evidence, ", "))
}

// ProgrammedService is what a data plane really holds for one Service.
type ProgrammedService struct {
	Service   types.NamespacedName
	Frontends []ProgrammedFrontend
	// Connections are live tracked connections to the Service's frontends
	// (Linux conntrack); empty where the platform cannot list them.
	Connections []Connection
	// Notes are platform remarks, e.g. features HNS cannot express.
	Notes []string
}

// ProgrammedFrontend is one frontend as found in the data plane.
type ProgrammedFrontend struct {
	Kind     core.FrontendKind
	Addr     netip.Addr
	Port     uint16
	Protocol v1.Protocol
	// Endpoints are the destinations new connections are spread over.
	Endpoints []netip.AddrPort
	// Verdict is the empty-set action found ("reject", "drop") when no endpoint is programmed.
	Verdict core.Verdict
}

// Connection is one tracked connection.
type Connection struct {
	Protocol v1.Protocol
	Client   netip.AddrPort
	Frontend netip.AddrPort
	Endpoint netip.AddrPort
	State    string
}

// BackendConfig is what cmd/ knows about the data plane beyond the NodeState,
// on either OS. platform_linux.New takes it as it is; on Windows, cmd/'s
// newBackend turns it into platform_windows.Config, adding what only that OS
// has (the HNS handle, the ledger of owned load balancers). Fields only one OS
// reads are grouped and labelled, so cmd/ fills one type everywhere and stays
// free of build tags.
type BackendConfig struct {
	// NodeName is this node's name, for logs and events.
	NodeName string

	// Linux (nftables) only.

	// TableName is the nftables table crossproxy owns (default "crossproxy").
	TableName string
	// LocalhostNodePorts lets NodePorts answer on 127.0.0.1 (needs route_localnet).
	LocalhostNodePorts bool
	// NetNSPath, when set, programs the rules in that network namespace
	// instead of the current one (tests, labs).
	NetNSPath string

	// Windows (HNS) only.

	// NetworkName is the HNS network the load balancers attach to.
	NetworkName string
	// SourceVIP is the source address HNS uses for load-balanced traffic (overlay).
	SourceVIP string
	// EnableDSR asks for direct server return where HNS supports it.
	EnableDSR bool
	// ForwardHealthCheckVIP forwards the health-check port of every
	// LoadBalancer ingress IP to the host, as kube-proxy's
	// winkernel.forwardHealthCheckVip: cloud load balancers that probe the
	// Service VIP itself then reach the node's health server.
	ForwardHealthCheckVIP bool
	// RootHNSEndpointName is the host's HNS endpoint those probes go to
	// (kube-proxy's rootHnsEndpointName; empty means "cbr0", as kube-proxy).
	RootHNSEndpointName string
	// Cleanup says the backend is made to remove what crossproxy programmed
	// (cleanup, cleanup-on-delete), not to program: Windows skips the start
	// checks `run` refuses to start on (several candidate networks, an
	// Antrea node), so they cannot keep an uninstall from removing what a
	// former run made; the network comes from the flag or the ledger.
	Cleanup bool
	// HNSConcurrency bounds the HNS calls in flight (0: 1). kube-proxy has
	// only ever called HNS one call at a time, so how HNS behaves under
	// concurrent writes is unknown; more than 1 is for measuring.
	HNSConcurrency int
	// HealthzPort is the port of /healthz, where the health-check VIP of a
	// Service without a healthCheckNodePort leads (0: healthz disabled).
	HealthzPort uint16
	// SourceVIPOrigin says where SourceVIP came from ("flag", "config file",
	// "Node annotation"), for the log and explain.
	SourceVIPOrigin string
	// CNIConfDir is where the node's CNI configuration is (empty: the
	// directories flannel, Calico, sig-windows-tools and containerd use);
	// it names the HNS network when NetworkName is empty, and the IPAM.
	CNIConfDir string
	// CNIBinDir, CNINetwork and CNIDataDir override what the CNI
	// configuration says of the network's IPAM plugin (host-local) and its
	// store, where an overlay node without a source VIP reserves one
	// (empty: CNI_PATH and the usual bin directories, the configuration's
	// name and dataDir).
	CNIBinDir  string
	CNINetwork string
	CNIDataDir string
	// Repairs counts objects found changed or gone behind the proxy's back
	// and put back (a metric); nil when nothing counts them.
	Repairs RepairCounter
	// Conntrack is told when the node's connection tracking table fills
	// up and when it has room again (a metric); nil when nothing counts it.
	// Only the Linux backend has such a table to watch.
	Conntrack ConntrackReporter
	// Notifier receives the features HNS cannot express for a Service, for
	// Events on it (platform/events.Recorder); nil when no API server is
	// followed (standalone mode).
	Notifier Notifier
}

// RepairCounter is told how many objects of one kind ("load balancer",
// "remote endpoint") a backend found changed or missing and put back, so
// drift behind the proxy's back shows in its metrics.
type RepairCounter interface {
	Repaired(object string, n int)
}

// ConntrackReporter is told when the node's connection tracking table
// becomes full (true) and when it has room again (false), once per episode:
// while it is full the kernel drops new connections to every Service, with
// the rules intact, and only a metric makes that visible to an alert.
type ConntrackReporter interface {
	ConntrackFull(full bool)
}

// Notifier is told about Service features a data plane cannot express, so
// the Service's owner can be told (an Event). Implementations must not block.
type Notifier interface {
	Unsupported(svc types.NamespacedName, feature, detail string)
}

// ObjectSink receives the objects a source follows (the API server's
// informers, or manifest files in standalone mode). core.Tracker satisfies it;
// the debug endpoint wraps it to keep the raw objects for explain.
type ObjectSink interface {
	SetNode(node *v1.Node)
	UpsertService(svc *v1.Service)
	DeleteService(svc *v1.Service)
	UpsertSlice(s *discovery.EndpointSlice)
	DeleteSlice(s *discovery.EndpointSlice)
}
