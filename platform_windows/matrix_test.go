package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
)

// node is one layout's Windows node under one profile, as the matrix plays
// its life: the fake HNS, the CNI configuration as the node has it now (nil
// until the CNI is installed), the backend as `crossproxy run` builds it
// (no network named, the CNI configuration read again through CNISource,
// host-local as IPAM), and a clock.
type node struct {
	t       *testing.T
	lay     layout
	prof    Profile
	fake    *Fake
	cni     *CNIConfig
	ipam    *fakeIPAM
	backend *Backend
	now     time.Time
	// foreign are the ids of what the CNI and the boot scripts made.
	foreign []string
	pods    map[netip.Addr]string
}

// boot is the node right after boot: the boot scripts' External network (if
// the layout has one), no CNI configuration, no pod network; crossproxy
// starts as its service or HostProcess pod does.
func boot(t *testing.T, lay layout, prof Profile) *node {
	n := &node{t: t, lay: lay, prof: prof, ipam: &fakeIPAM{}, now: time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC), pods: map[netip.Addr]string{}}
	n.fake = NewFakeProfile(lay.network, prof)
	n.fake.NetworkLater()
	if lay.external != nil {
		n.fake.AddNetwork(*lay.external)
	}
	n.fake.AddNetwork(Network{ID: "a0a70000-0000-4000-8000-00000000a0a7", Name: "nat", Type: "NAT"})
	log := logrus.New()
	log.SetOutput(testWriter{t})
	cfg := Config{
		Ledger:  &MemoryLedger{},
		HostMAC: func(netip.Addr) (string, error) { return layoutHostMAC, nil },
		IPAM:    n.ipam,
		CNISource: func() (*CNIConfig, IPAM) {
			if n.cni == nil {
				return nil, nil
			}
			return n.cni, n.ipam
		},
	}
	if h := lay.host; h != nil && !h.Remote {
		// forwardHealthCheckVip to the layout's host endpoint, as kube-proxy's
		// --root-hnsendpoint-name names it on such nodes.
		cfg.ForwardHealthCheckVIP, cfg.RootEndpointName, cfg.HealthzPort = true, h.Name, 10256
	}
	b, err := New(n.fake, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	b.now = func() time.Time { return n.now }
	n.backend = b
	return n
}

// installCNI writes the CNI configuration (a HostProcess CNI installed
// after crossproxy started).
func (n *node) installCNI() { n.cni = n.lay.cni }

// startCNI is the CNI making its network, its host endpoint and the pods
// already scheduled here.
func (n *node) startCNI() {
	n.fake.MakeNetwork()
	if n.lay.host != nil {
		n.addHost()
	}
	n.addPod(n.lay.localPod)
}

// addHost is the CNI or its node agent making the layout's host endpoint.
func (n *node) addHost() {
	var id string
	if n.lay.hostV1 {
		id = n.fake.AddV1Endpoint(*n.lay.host)
	} else {
		id = n.fake.AddEndpoint(*n.lay.host)
	}
	n.foreign = append(n.foreign, id)
}

// addPod is the CNI making a pod's endpoint, with HNS' refusal of an
// address a remote endpoint still has.
func (n *node) addPod(a netip.Addr) error {
	ep := Endpoint{Name: "pod-" + a.String(), IP: a, MAC: n.lay.podMAC(a)}
	if n.lay.podPA {
		ep.ProviderAddress = ip(layoutNodeIP)
	}
	if _, err := n.fake.CNICreateLocalEndpoint(ep.Name, a); err != nil {
		return err
	}
	for _, e := range n.fake.Endpoints() {
		if e.IP == a && !e.Remote {
			n.pods[a] = e.ID
			n.foreign = append(n.foreign, e.ID)
		}
	}
	return nil
}

// state is the node's desired state with a ClusterIP Service "web" (the
// local pod and the remote one, plus extra endpoints), a NodePort Service
// "np" and a LoadBalancer Service "lb", as the core computes them.
func (n *node) state(extra ...core.Endpoint) *core.NodeState {
	webEPs := append([]core.Endpoint{local(n.lay.localPod.String(), 8080), remote(n.lay.remotePod.String(), 8080)}, extra...)
	slices.SortFunc(webEPs, func(a, b core.Endpoint) int { return a.Addr.Compare(b.Addr) })
	s := state(
		port("web", "10.96.0.10", webEPs),
		port("np", "10.96.0.20", []core.Endpoint{local(n.lay.localPod.String(), 8080)}, withNodePort(30080, layoutNodeIP)),
		port("lb", "10.96.0.30", []core.Endpoint{local(n.lay.localPod.String(), 8080), remote(n.lay.remotePod.String(), 8080)},
			withNodePort(30090, layoutNodeIP), withFrontend(core.FrontendLoadBalancer, "203.0.113.10")),
	)
	s.Node.Addresses = []netip.Addr{ip(layoutNodeIP)}
	s.Node.PodCIDRs = []netip.Prefix{n.lay.nodePodCIDR}
	s.Families = []v1.IPFamily{v1.IPv4Protocol}
	return s
}

func (n *node) sync(s *core.NodeState, c core.Changes) error {
	return n.backend.Sync(context.Background(), s, c)
}

func (n *node) mustSync(s *core.NodeState, c core.Changes) {
	n.t.Helper()
	if err := n.sync(s, c); err != nil {
		n.t.Fatalf("%s on %s: sync: %v", n.lay.name, n.prof.Name, err)
	}
}

// writes are the calls since the last ResetCalls that change HNS.
func (n *node) writes() int {
	w := 0
	for m, c := range n.fake.Calls() {
		if strings.HasPrefix(m, "Create") || strings.HasPrefix(m, "Update") || strings.HasPrefix(m, "Delete") {
			w += c
		}
	}
	return w
}

// lbEndpoints are the addresses a load balancer on the frontend uses.
func (n *node) lbEndpoints(frontend string) []string {
	byID := map[string]Endpoint{}
	for _, ep := range n.fake.Endpoints() {
		byID[strings.ToLower(ep.ID)] = ep
	}
	for _, lb := range n.fake.LoadBalancers() {
		if lb.frontend() != frontend {
			continue
		}
		var out []string
		for _, id := range lb.EndpointIDs {
			out = append(out, byID[strings.ToLower(id)].IP.String())
		}
		slices.Sort(out)
		return out
	}
	return nil
}

// foreignIntact fails when anything the CNI or the boot scripts made is gone.
func (n *node) foreignIntact(step string) {
	n.t.Helper()
	have := map[string]bool{}
	for _, ep := range n.fake.Endpoints() {
		have[ep.ID] = true
	}
	for _, id := range n.foreign {
		if !have[id] {
			n.t.Fatalf("%s on %s, %s: the CNI's endpoint %s is gone", n.lay.name, n.prof.Name, step, id)
		}
	}
}

// TestLayoutMatrix runs every layout (layouts_test.go, each from its
// product's code) under every Windows Server profile (profiles_test.go)
// through a node's life: boot with only the boot-time networks, the CNI
// installed and then starting, the first programming, a steady full sync
// and drift check, an endpoint change, a node joining while only partial
// syncs run, a pod address moving here from another node, a listing racing
// a pod's deletion, a leaked port lock, and an HNS restart. Each finding of
// issue 48 is one of these steps failing on the code before it.
func TestLayoutMatrix(t *testing.T) {
	for _, lay := range layouts() {
		for _, prof := range profiles {
			t.Run(lay.name+"/"+prof.Name, func(t *testing.T) { playNode(t, lay, prof) })
		}
	}
}

func playNode(t *testing.T, lay layout, prof Profile) {
	n := boot(t, lay, prof)
	ctx := context.Background()
	s := n.state()

	// 1. Boot: only External (and nat); no CNI configuration yet. Nothing
	// is programmed and nothing is refused for good.
	err := n.sync(s, full())
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("boot, no pod network yet: sync %v, want a retried wait", err)
	}
	// 2. The CNI's configuration is written; its network is not there yet.
	n.installCNI()
	err = n.sync(s, full())
	if lay.refused != "" {
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), lay.refused) {
			t.Fatalf("%s: sync %v, want refused naming %q", lay.name, err, lay.refused)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("waiting for the HNS network %q", lay.network.Name)) {
		t.Fatalf("CNI configured, network not there: sync %v, want waiting for %q", err, lay.network.Name)
	}
	if lbs := n.fake.LoadBalancers(); len(lbs) != 0 {
		t.Fatalf("load balancers made before the CNI's network exists: %v", lbs)
	}
	// 3. The CNI starts: its network, host endpoint, the local pod.
	n.startCNI()
	n.mustSync(s, full())
	if n.backend.cfg.NetworkName != lay.network.Name {
		t.Fatalf("programmed network %q, want %q", n.backend.cfg.NetworkName, lay.network.Name)
	}
	checkSourceVIP(t, n)
	const web = "TCP/10.96.0.10/80"
	if got, want := n.lbEndpoints(web), []string{lay.localPod.String(), lay.remotePod.String()}; !slices.Equal(got, want) {
		t.Fatalf("first programming: %s endpoints %v, want %v", web, got, want)
	}
	n.foreignIntact("first programming")
	if h := lay.host; h != nil && !h.Remote {
		if got := n.lbEndpoints("TCP/203.0.113.10/10256"); !slices.Equal(got, []string{h.IP.String()}) {
			t.Fatalf("forwardHealthCheckVip: the ingress IP's health-check port leads to %v, want the host endpoint %s (%s)", got, h.Name, h.IP)
		}
	}

	// 4. Steady: a full sync writes nothing, the drift check finds nothing.
	n.fake.ResetCalls()
	n.mustSync(s, full())
	if w := n.writes(); w != 0 {
		t.Fatalf("steady full sync made %d writes: %v", w, n.fake.Calls())
	}
	if d, err := n.backend.CheckDrift(ctx); err != nil || len(d) != 0 {
		t.Fatalf("steady drift check: %v %v", d, err)
	}

	// 5. An endpoint change (a second local pod) reaches HNS.
	second := lay.localPod.Next()
	if err := n.addPod(second); err != nil {
		t.Fatal(err)
	}
	s = n.state(local(second.String(), 8080))
	n.mustSync(s, partial(s.Ports[webKey()].Key))
	if got, want := n.lbEndpoints(web), sortedStrings(lay.localPod.String(), second.String(), lay.remotePod.String()); !slices.Equal(got, want) {
		t.Fatalf("endpoint change: HNS holds %v, want %v", got, want)
	}

	// 6. A node joins while only partial syncs run (overlay): its pod gets
	// the joiner's provider address, and the load balancer the source VIP.
	if lay.network.isOverlay() {
		n.fake.AddRemoteSubnet(lay.joiner)
		s = n.state(local(second.String(), 8080), remote(lay.joinerPod.String(), 8080))
		n.mustSync(s, partial(webKey()))
		ep := endpointAt(t, n.fake, lay.joinerPod)
		if ep.ProviderAddress != lay.joiner.ProviderAddress {
			t.Fatalf("pod on the joining node: provider address %s, want %s", ep.ProviderAddress, lay.joiner.ProviderAddress)
		}
		if lb := lbAt(t, n.fake, web); lb.SourceVIP != lay.sourceVIP {
			t.Fatalf("after the join: %s source VIP %s, want %s", web, lb.SourceVIP, lay.sourceVIP)
		}
		if d, err := n.backend.CheckDrift(ctx); err != nil || len(d) != 0 {
			t.Fatalf("drift after the join: %v %v", d, err)
		}
	}

	// 7. A pod address moves here: the remote pod goes (partial sync), and
	// the CNI then makes a local endpoint with its address, which HNS
	// refuses while a remote endpoint still has it.
	s = n.state(local(second.String(), 8080))
	s.Ports[webKey()].ClusterEndpoints = slices.DeleteFunc(slices.Clone(s.Ports[webKey()].ClusterEndpoints), func(e core.Endpoint) bool { return e.Addr == lay.remotePod })
	lbPort := s.Ports[lbKey()]
	lbPort.ClusterEndpoints = slices.DeleteFunc(slices.Clone(lbPort.ClusterEndpoints), func(e core.Endpoint) bool { return e.Addr == lay.remotePod })
	n.mustSync(s, partial(webKey(), lbKey()))
	if err := n.addPod(lay.remotePod); err != nil {
		t.Fatalf("a pod given %s, remote a moment ago: the CNI's endpoint is refused: %v", lay.remotePod, err)
	}
	s = n.state(local(second.String(), 8080))
	for _, k := range []core.PortKey{webKey(), lbKey()} {
		p := s.Ports[k]
		for i, e := range p.ClusterEndpoints {
			if e.Addr == lay.remotePod {
				p.ClusterEndpoints[i] = local(lay.remotePod.String(), 8080)
			}
		}
		p.LocalEndpoints = nil
		for _, e := range p.ClusterEndpoints {
			if e.Local {
				p.LocalEndpoints = append(p.LocalEndpoints, e)
			}
		}
	}
	n.mustSync(s, partial(webKey(), lbKey()))
	if got, want := n.lbEndpoints(web), sortedStrings(lay.localPod.String(), second.String(), lay.remotePod.String()); !slices.Equal(got, want) {
		t.Fatalf("after the move: %s holds %v, want %v", web, got, want)
	}
	n.foreignIntact("pod moved")

	// 8. A full sync whose endpoint listing races the deletion of a pod.
	gone := n.pods[second]
	n.fake.SetListRace(func() { n.fake.CNIDeleteEndpoint(gone) })
	err = n.sync(s, full())
	n.fake.SetListRace(nil)
	if err != nil && !strings.Contains(err.Error(), "not known to HNS") {
		t.Fatalf("listing under churn: %v", err)
	}
	n.foreign = slices.DeleteFunc(n.foreign, func(id string) bool { return id == gone })
	s = n.state()
	for _, k := range []core.PortKey{webKey(), lbKey()} {
		p := s.Ports[k]
		p.ClusterEndpoints = slices.DeleteFunc(slices.Clone(p.ClusterEndpoints), func(e core.Endpoint) bool { return e.Addr == second })
	}
	s.Ports[webKey()].ClusterEndpoints = []core.Endpoint{local(lay.localPod.String(), 8080), local(lay.remotePod.String(), 8080)}
	s.Ports[webKey()].LocalEndpoints = s.Ports[webKey()].ClusterEndpoints
	n.mustSync(s, full())

	// 9. A leaked port lock on a new Service's NodePort: retried with
	// backoff by partial syncs, not left for the hourly full sync.
	n.fake.LeakPortLock(ProtocolTCP, 30100, 2)
	extra := port("late", "10.96.0.40", []core.Endpoint{local(lay.localPod.String(), 8080)}, withNodePort(30100, layoutNodeIP))
	s.Ports[extra.Key] = extra
	n.mustSync(s, partial(extra.Key))
	for i := 0; i < 3 && n.lbEndpoints("TCP/*/30100") == nil; i++ {
		n.now = n.now.Add(maxBusyWait)
		n.mustSync(s, partial())
	}
	if n.lbEndpoints("TCP/*/30100") == nil {
		t.Fatalf("leaked port lock: the NodePort is still not programmed after %s of partial syncs", 3*maxBusyWait)
	}

	// 10. HNS restarts as the release does; the drift check sees it and
	// the full sync after repairs it.
	before := lbSummary(n.fake)
	n.fake.RestartHNS(n.backend.sourceVIP)
	n.foreign = slices.DeleteFunc(n.foreign, func(id string) bool { // what the restart itself lost
		return !slices.ContainsFunc(n.fake.Endpoints(), func(ep Endpoint) bool { return ep.ID == id })
	})
	n.restoreHost()
	d, err := n.backend.CheckDrift(ctx)
	if err != nil || len(d) == 0 {
		t.Fatalf("after an HNS restart: drift %v %v", d, err)
	}
	n.mustSync(s, full())
	if after := lbSummary(n.fake); after != before {
		t.Fatalf("after an HNS restart and repair:\n%s\nwant:\n%s", after, before)
	}
	n.foreignIntact("HNS restart")
}

// restoreHost is the CNI's node agent making its host endpoint again after
// HNS lost it: calico-node's and flanneld's start check it and make it when
// it is missing (createAndAttachVxlanHostEP, CreateAndAttachHostEP,
// hostgw_windows.go).
func (n *node) restoreHost() {
	h := n.lay.host
	if h == nil {
		return
	}
	for _, ep := range n.fake.Endpoints() {
		if ep.Name == h.Name {
			return
		}
	}
	n.addHost()
}

// checkSourceVIP checks the overlay source VIP the layout calls for, and
// that an existing one was used without a reservation or an endpoint.
func checkSourceVIP(t *testing.T, n *node) {
	t.Helper()
	lay := n.lay
	lb := lbAt(t, n.fake, "TCP/10.96.0.10/80")
	if !lay.network.isOverlay() {
		if lb.SourceVIP.IsValid() {
			t.Fatalf("L2Bridge load balancer with source VIP %s", lb.SourceVIP)
		}
		return
	}
	if lb.SourceVIP != lay.sourceVIP {
		t.Fatalf("source VIP %s (chosen by %s), want %s", lb.SourceVIP, n.backend.sourceVIPFrom, lay.sourceVIP)
	}
	if reserved := n.ipam.reserves > 0; reserved != lay.reserve {
		t.Fatalf("source VIP reserved through the IPAM: %v, want %v", reserved, lay.reserve)
	}
	for _, ep := range n.fake.Endpoints() {
		if ep.Name == sourceVIPEndpointName && !lay.reserve {
			t.Fatalf("crossproxy made a source-VIP endpoint %s although %s exists", ep.IP, lay.host.Name)
		}
	}
}

func webKey() core.PortKey { return port("web", "10.96.0.10", nil).Key }
func lbKey() core.PortKey  { return port("lb", "10.96.0.30", nil).Key }

func sortedStrings(s ...string) []string {
	slices.Sort(s)
	return s
}

func endpointAt(t *testing.T, f *Fake, a netip.Addr) Endpoint {
	t.Helper()
	for _, ep := range f.Endpoints() {
		if ep.IP == a {
			return ep
		}
	}
	t.Fatalf("no endpoint at %s", a)
	return Endpoint{}
}

func lbAt(t *testing.T, f *Fake, frontend string) LoadBalancer {
	t.Helper()
	for _, lb := range f.LoadBalancers() {
		if lb.frontend() == frontend {
			return lb
		}
	}
	t.Fatalf("no load balancer on %s", frontend)
	return LoadBalancer{}
}

// lbSummary is every load balancer without ids: frontend, ports, source
// VIP, flags and endpoint addresses.
func lbSummary(f *Fake) string {
	addr := map[string]string{}
	for _, ep := range f.Endpoints() {
		addr[strings.ToLower(ep.ID)] = ep.IP.String()
	}
	var sb strings.Builder
	for _, lb := range f.LoadBalancers() {
		var eps []string
		for _, id := range lb.EndpointIDs {
			eps = append(eps, addr[strings.ToLower(id)])
		}
		slices.Sort(eps)
		fmt.Fprintf(&sb, "%s -> :%d via %s %s %v\n", lb.frontend(), lb.InternalPort, lb.SourceVIP, lb.Flags, eps)
	}
	return sb.String()
}
