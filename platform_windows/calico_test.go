package hns

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// The layout Calico for Windows makes with VXLAN and calico-ipam (Calico's
// node/windows-packaging scripts; kubeadm with --pod-network-cidr
// 192.168.0.0/16): the controller manager gives the Node the pod CIDR
// 192.168.1.0/24, which calico-ipam ignores; calico-node takes the IP block
// 192.168.45.64/26 (the default pool's /26 blocks) for this node, creates the
// HNS network "Calico" with that block as its subnet, and its host endpoint
// Calico_ep at an address of the block. Pods get addresses of the block too.
var (
	calicoBlock      = netip.MustParsePrefix("192.168.45.64/26")
	calicoNodePodCID = netip.MustParsePrefix("192.168.1.0/24")
	calicoNetwork    = Network{Name: "Calico", Type: NetworkOverlay, Subnets: []netip.Prefix{calicoBlock}, RemoteSubnets: []RemoteSubnet{
		{Prefix: netip.MustParsePrefix("192.168.77.0/26"), ProviderAddress: ip("192.168.0.12")},
	}}
)

// calicoState is one Service with a pod in this node's block and one in a
// Linux node's block, on a Node whose podCIDR is not Calico's block.
func calicoState() *core.NodeState {
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("192.168.45.70", 8080), remote("192.168.77.5", 8080)}))
	s.Node.PodCIDRs = []netip.Prefix{calicoNodePodCID}
	return s
}

func calicoFake(withEP bool) *Fake {
	f := NewFake(calicoNetwork, AllFeatures())
	f.AddLocalEndpoint("pod", ip("192.168.45.70"))
	if withEP {
		f.AddEndpoint(Endpoint{Name: "Calico_ep", IP: ip("192.168.45.66"), MAC: "0e-2a-c0-a8-2d-42"})
	}
	return f
}

func calicoBackend(t *testing.T, f *Fake, ipam IPAM, explicit netip.Addr, c *clock) *Backend {
	t.Helper()
	log := logrus.New()
	log.SetOutput(testWriter{t})
	b, err := New(f, Config{NetworkName: "Calico", NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: &MemoryLedger{}, IPAM: ipam,
		SourceVIP: explicit, SourceVIPOrigin: "flag --source-vip", CalicoWait: time.Minute}, log)
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		b.now = c.now
	}
	return b
}

// TestSourceVIPCalicoBlocks: with calico-ipam the source VIP lies in the
// network's own subnet (Calico's block), outside the Node's podCIDR:
// Calico_ep is used, an explicit address of the block is taken and one of
// the Node's podCIDR refused naming the block.
func TestSourceVIPCalicoBlocks(t *testing.T) {
	ctx := context.Background()
	f := calicoFake(true)
	ipam := &fakeIPAM{}
	b := calicoBackend(t, f, ipam, netip.Addr{}, nil)
	if err := b.Sync(ctx, calicoState(), full()); err != nil {
		t.Fatal(err)
	}
	if got := lbSourceVIPs(f); got != "192.168.45.66" || ipam.reserves != 0 {
		t.Fatalf("source VIP %q after %d reservations; want Calico_ep's 192.168.45.66, none", got, ipam.reserves)
	}
	noOwnSourceVIPEndpoint(t, f)

	f2 := calicoFake(true)
	b2 := calicoBackend(t, f2, nil, ip("192.168.45.67"), nil)
	if err := b2.Sync(ctx, calicoState(), full()); err != nil || lbSourceVIPs(f2) != "192.168.45.67" {
		t.Fatalf("explicit source VIP in Calico's block: %v, load balancers use %q", err, lbSourceVIPs(f2))
	}

	f3 := calicoFake(true)
	b3 := calicoBackend(t, f3, nil, ip("192.168.1.2"), nil)
	err := b3.Sync(ctx, calicoState(), full())
	if want := `the source VIP 192.168.1.2 (flag --source-vip) is outside the subnet 192.168.45.64/26 of HNS network "Calico"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("explicit source VIP in the Node's podCIDR but outside the block: %v, want %q", err, want)
	}
	if lbs := f3.LoadBalancers(); len(lbs) != 0 {
		t.Fatalf("a refused sync created %v", lbs)
	}
}

// TestSourceVIPWaitsForCalico: crossproxy started before calico-node made
// Calico_ep reserves nothing and programs nothing (the sync fails, naming
// the wait) until Calico_ep appears, then uses it; when it has not appeared
// within CalicoWait, a reservation is made from the block, and Calico_ep
// replaces it once it appears.
func TestSourceVIPWaitsForCalico(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)}
	f := calicoFake(false)
	ipam := &fakeIPAM{}
	b := calicoBackend(t, f, ipam, netip.Addr{}, c)
	for _, after := range []time.Duration{0, 30 * time.Second} {
		c.t = c.t.Add(after)
		err := b.Sync(ctx, calicoState(), full())
		if !errors.Is(err, errWaitingForCalico) || !strings.Contains(err.Error(), `"Calico_ep" on network "Calico"`) {
			t.Fatalf("sync %v after start without Calico_ep: %v", after, err)
		}
	}
	if lbs, eps := f.LoadBalancers(), f.Endpoints(); len(lbs) != 0 || len(eps) != 1 || ipam.reserves != 0 {
		t.Fatalf("while waiting: %d load balancers, endpoints %v, %d reservations", len(lbs), eps, ipam.reserves)
	}
	f.AddEndpoint(Endpoint{Name: "Calico_ep", IP: ip("192.168.45.66")})
	if err := b.Sync(ctx, calicoState(), full()); err != nil || lbSourceVIPs(f) != "192.168.45.66" || ipam.reserves != 0 {
		t.Fatalf("Calico_ep appeared: %v, source VIP %q, %d reservations", err, lbSourceVIPs(f), ipam.reserves)
	}

	// Calico_ep never comes within the wait: a reservation from the block.
	f2 := calicoFake(false)
	b2 := calicoBackend(t, f2, ipam, netip.Addr{}, c)
	if err := b2.Sync(ctx, calicoState(), full()); !errors.Is(err, errWaitingForCalico) {
		t.Fatalf("first sync: %v", err)
	}
	c.t = c.t.Add(time.Minute)
	if err := b2.Sync(ctx, calicoState(), full()); err != nil {
		t.Fatal(err)
	}
	if got := lbSourceVIPs(f2); got != "192.168.45.66" || ipam.reserves != 1 || !calicoBlock.Contains(ip(got)) {
		t.Fatalf("after the wait: source VIP %q, %d reservations; want one from %s", got, ipam.reserves, calicoBlock)
	}
	if n := sourceVIPNote(t, b2); !strings.Contains(n, `a new reservation from subnet 192.168.45.64/26 of HNS network "Calico" through the IPAM plugin`) {
		t.Fatalf("note %q", n)
	}
	f2.AddEndpoint(Endpoint{Name: "Calico_ep", IP: ip("192.168.45.67")})
	if err := b2.Sync(ctx, calicoState(), full()); err != nil || lbSourceVIPs(f2) != "192.168.45.67" {
		t.Fatalf("Calico_ep appeared late: %v, source VIP %q", err, lbSourceVIPs(f2))
	}
	// crossproxy's own source VIP is given back: endpoint and reservation.
	noOwnSourceVIPEndpoint(t, f2)
	if d, _ := b2.cfg.Ledger.Load(); d.SourceVIP != nil || ipam.releases != 1 || len(ipam.held) != 0 {
		t.Fatalf("after Calico_ep took over: ledger %+v, %d releases, held %v", d.SourceVIP, ipam.releases, ipam.held)
	}
}

// TestSourceVIPFromNetworkSubnet: flannel's vxlan0 reports the node's pod
// subnet as its own (pkg/backend/vxlan/device_windows.go), so a Node read
// without spec.podCIDRs (standalone mode, or a cluster whose controller
// manager allocates none) still gets a reservation from the network's
// subnet, and one that reports none the CNI configuration's range; the
// Node's podCIDR serves only when neither has one.
func TestSourceVIPFromNetworkSubnet(t *testing.T) {
	ctx := context.Background()
	nw := overlay
	nw.Subnets = []netip.Prefix{podCIDR}
	f := NewFake(nw, AllFeatures())
	f.AddLocalEndpoint("pod", ip("10.244.1.5"))
	ipam := &fakeIPAM{}
	b := vipBackend(t, f, &MemoryLedger{}, ipam, netip.Addr{})
	s := vipState()
	s.Node.PodCIDRs = nil
	if err := b.Sync(ctx, s, full()); err != nil || lbSourceVIPs(f) != "10.244.1.2" || ipam.reserves != 1 {
		t.Fatalf("no podCIDRs, network subnet %s: %v, source VIP %q, %d reservations", podCIDR, err, lbSourceVIPs(f), ipam.reserves)
	}
	// A network that reports no subnet: the CNI configuration's range.
	f2 := NewFake(overlay, AllFeatures())
	f2.AddLocalEndpoint("pod", ip("10.244.1.5"))
	b2 := vipBackend(t, f2, &MemoryLedger{}, ipam, netip.Addr{})
	b2.cfg.CNI = &CNIConfig{File: "10-overlay.conflist", Name: "vxlan0", IPAMType: "host-local", Subnets: []netip.Prefix{podCIDR}}
	if err := b2.Sync(ctx, s, full()); err != nil || lbSourceVIPs(f2) != "10.244.1.2" {
		t.Fatalf("no podCIDRs, no network subnet, CNI range %s: %v, source VIP %q", podCIDR, err, lbSourceVIPs(f2))
	}
	if n := sourceVIPNote(t, b2); !strings.Contains(n, "a new reservation from range 10.244.1.0/24 of the CNI configuration 10-overlay.conflist") {
		t.Fatalf("note %q", n)
	}
}
