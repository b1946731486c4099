package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// defaultRootEndpointName is the host's HNS endpoint on the network, as
// kube-proxy's --root-hnsendpoint-name defaults it.
const defaultRootEndpointName = "cbr0"

// defaultConcurrency bounds the HNS calls in flight. kube-proxy has only
// ever called HNS one call at a time, and no public source shows how HNS
// behaves under concurrent writes (vSwitch port contention, "The
// switch-port was not found" in hcsshim#1043), so the default is serial
// until measured on Windows (--hns-concurrency).
const defaultConcurrency = 1

// Config configures a Backend.
type Config struct {
	// NetworkName is the HNS network (from the CNI) the load balancers use.
	// Empty: the CNI configuration's network, else the only Overlay or
	// L2Bridge network on the node (findNetwork). Cleanup falls back to the
	// ledger's.
	NetworkName string
	// CNI is the node's CNI configuration as read at start (nil: none
	// found): the network's name, and what explain shows.
	CNI *CNIConfig
	// CNISource reads the node's CNI configuration again and gives the
	// IPAM it implies (nil: CNI and IPAM stay as given). The backend asks
	// it until a network is settled from a configuration and at every full
	// sync after, so a CNI installed after crossproxy (HostProcess CNIs
	// usually are) is read without a restart.
	CNISource func() (*CNIConfig, IPAM)
	// SourceVIP is the overlay source VIP given explicitly (flag, config
	// file or the Node annotation; SourceVIPOrigin says which). Invalid: the
	// backend finds one per node (chooseSourceVIP).
	SourceVIP       netip.Addr
	SourceVIPOrigin string
	// IPAM reserves a source VIP from the node's pod CIDR when neither an
	// explicit one nor an existing source-VIP endpoint gives one (nil: none
	// is reserved, and an overlay node without a source VIP is refused).
	IPAM IPAM
	// EnableDSR asks for direct server return on ClusterIP load balancers.
	EnableDSR bool
	// NodeIP overrides the Node's own address (overlay provider address).
	NodeIP netip.Addr
	// HostMAC returns the MAC of the host interface that holds the node
	// address; overlay networks need it for the source VIP endpoint and the
	// ClusterIP remote endpoints (kube-proxy reads it the same way).
	HostMAC func(netip.Addr) (string, error)
	// ForwardHealthCheckVIP forwards each LoadBalancer ingress IP's
	// health-check port to the host endpoint named RootEndpointName, as
	// kube-proxy's winkernel.forwardHealthCheckVip.
	ForwardHealthCheckVIP bool
	// RootEndpointName is the host's HNS endpoint ("cbr0" if empty, as kube-proxy).
	RootEndpointName string
	// HealthzPort is the health-check VIP's port for Services without a
	// healthCheckNodePort (the proxy's /healthz port).
	HealthzPort uint16
	// Concurrency bounds the HNS calls in flight (defaultConcurrency, 1, if 0).
	Concurrency int
	// Ledger records which load balancers crossproxy owns (required).
	Ledger Ledger
	// Notifier receives the core decisions HNS cannot express (optional).
	// The Backend calls it once per Service and feature (again only when the
	// detail changes); cmd passes platform/events.Recorder through
	// BackendConfig.Notifier, which turns each call into an Event on the Service.
	Notifier platform.Notifier
	// Repairs counts the objects drift repair put back (optional;
	// platform/metrics.Metrics in `crossproxy run`).
	Repairs platform.RepairCounter
	// CalicoWait bounds how long an overlay node on Calico's network waits
	// for calico-node's host endpoint Calico_ep before reserving a source
	// VIP itself (defaultCalicoWait if 0).
	CalicoWait time.Duration
}

// Backend makes HNS match a core.NodeState: it plans, diffs against what HNS
// reported, and applies the difference with the fewest calls. It owns only
// the load balancers in its ledger and the endpoints named with
// remoteEndpointPrefix or sourceVIPEndpointName.
type Backend struct {
	hns HNS
	cfg Config
	log logrus.FieldLogger

	mu       sync.Mutex
	closed   bool // set by Close: every operation fails
	features *Features
	network  Network
	hostMAC  string
	// sourceVIP is the overlay source VIP in use and sourceVIPFrom how it
	// was chosen (log, explain).
	sourceVIP     netip.Addr
	sourceVIPFrom string
	// networkFrom says how the network was found (log, explain).
	networkFrom string
	// explicitNetwork: the network was named (flag, KUBE_NETWORK) and is
	// never looked for; networkByFallback: it was found as the only
	// candidate with no CNI configuration, so a configuration that appears
	// later decides again.
	explicitNetwork   bool
	networkByFallback bool
	// calicoWaitFrom is when a sync first looked for Calico_ep in vain, and
	// calicoGaveUp that the wait has ended (each logged once).
	calicoWaitFrom time.Time
	calicoGaveUp   bool
	// calicoByName is calico-node's host endpoint found by name because the
	// network's listing did not show it (V1-created); calicoLookup allows
	// one such lookup (set by every full sync's listing).
	calicoByName Endpoint
	calicoLookup bool
	byIP         map[netip.Addr]Endpoint
	// root is the host endpoint health-check VIPs lead to (forwardHealthCheckVip);
	// invalid IP when HNS has none by that name.
	root     Endpoint
	rootSeen bool // the root endpoint's presence has been logged
	// rootByName: root was found by name, not in the network's listing
	// (V1-created); the drift check then does not expect it there.
	rootByName bool
	// dupRemotes are remote endpoints that share their address with a local
	// one (Windows Server 2019/2022): deleted at the end of a full sync.
	dupRemotes []Endpoint
	owned      map[string]ownedLB
	foreign    map[string][]string // frontend -> ids of load balancers crossproxy does not own
	// others are the frontends of the load balancers crossproxy does not
	// own at the last listing (OtherProxies).
	others       []string
	ledger       ledgerData
	saved        ledgerData // what the Ledger holds
	ledgerLoaded bool
	synced       bool
	now          func() time.Time
	// driftNext is when the drift check may list HNS again (driftDuty).
	driftNext time.Time
	// listed is what the last drift check read when it found drift, for
	// the full sync the runner makes next (nil otherwise).
	listed *listing
	// remotesCreated counts remote endpoints created (drift repair reports
	// how many a repair made again).
	remotesCreated int
	retry          map[core.PortKey]struct{}
	// busy are the ports whose frontend HNS refused with
	// HCN_E_PORT_ALREADY_EXISTS, retried with backoff (busyRetry).
	busy    map[core.PortKey]busyWait
	noticed map[types.NamespacedName]map[string]string
	// frontends are the last applied state's frontends per port, so
	// Programmed can report a frontend without a load balancer as what HNS
	// does with its traffic: drop it.
	frontends map[core.PortKey][]platform.ProgrammedFrontend
}

var _ platform.Backend = (*Backend)(nil)

// New returns a Backend driving h. It makes no HNS call until the first Sync.
func New(h HNS, cfg Config, log logrus.FieldLogger) (*Backend, error) {
	if cfg.Ledger == nil {
		return nil, fmt.Errorf("hns backend: %w: no ledger", ErrInvalid)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = defaultConcurrency
	}
	if cfg.CalicoWait <= 0 {
		cfg.CalicoWait = defaultCalicoWait
	}
	if cfg.RootEndpointName == "" {
		cfg.RootEndpointName = defaultRootEndpointName
	}
	return &Backend{
		hns: h, cfg: cfg, log: log, now: time.Now, explicitNetwork: cfg.NetworkName != "",
		byIP:      map[netip.Addr]Endpoint{},
		owned:     map[string]ownedLB{},
		foreign:   map[string][]string{},
		retry:     map[core.PortKey]struct{}{},
		busy:      map[core.PortKey]busyWait{},
		noticed:   map[types.NamespacedName]map[string]string{},
		frontends: map[core.PortKey][]platform.ProgrammedFrontend{},
	}, nil
}

// Name implements platform.Backend.
func (b *Backend) Name() string { return "hns" }

// Preflight checks what kube-proxy checks before it starts: the HNS V2 API,
// and on an overlay network a source VIP and remote subnet support. An error
// wrapping ErrInvalid is a configuration crossproxy refuses to run with; any
// other (HNS not answering yet at boot) is worth retrying, which Sync does.
func (b *Backend) Preflight(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.prepare(ctx, true); err != nil {
		return err
	}
	if b.cfg.NetworkName == "" {
		return nil // cleanup takes the ledger's network; Sync names the missing flag
	}
	nw, err := b.hns.GetNetwork(ctx, b.cfg.NetworkName)
	if err != nil {
		return fmt.Errorf("get HNS network %q: %w", b.cfg.NetworkName, err)
	}
	return OverlayPrerequisites(PlanOptions{Network: nw, Features: *b.features, SourceVIP: b.cfg.SourceVIP, AutoSourceVIP: b.cfg.IPAM != nil}, nil)
}

// prepare loads the ledger, finds the network (full: the CNI
// configuration is read again) and detects features once. A failure (HNS
// not up yet at boot) is not remembered: the next sync asks again.
func (b *Backend) prepare(ctx context.Context, full bool) error {
	if err := b.loadLedger(); err != nil {
		return err
	}
	if err := b.findNetwork(ctx, full); err != nil {
		return err
	}
	if b.features != nil {
		return nil
	}
	f, err := b.hns.Features(ctx)
	if err != nil {
		return fmt.Errorf("detect HNS features: %w", err)
	}
	if !f.APIV2 {
		return fmt.Errorf("hns: %w: this HNS lacks the V2 API crossproxy (and kube-proxy) need: Windows Server 2019 or later", ErrInvalid)
	}
	b.features = &f
	b.log.WithField("features", fmt.Sprintf("%+v", f)).Info("HNS features detected")
	b.log.Info("HNS chooses source NAT itself (to the source VIP on overlay networks, none with DSR): " +
		"the core's masquerade decisions (masqueradeAll, local traffic detection) are not applied on this node")
	if b.cfg.EnableDSR && !f.DSR {
		b.log.Warn("DSR requested but this HNS does not support it; load balancers are created without DSR")
	}
	return nil
}

// errClosed is what every operation of a closed backend returns.
var errClosed = errors.New("hns backend is closed")

// Close ends the backend's use: HNS calls hold no handle between them, so
// nothing is released, but a closed backend programs nothing more (the
// runner has stopped; a late call is a bug to surface, not to act on).
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}
