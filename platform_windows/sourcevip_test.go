package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// fakeIPAM hands out addresses of a subnet from .2 on, as host-local does,
// and records the calls; fail makes every call fail.
type fakeIPAM struct {
	mu       sync.Mutex
	held     map[netip.Prefix]netip.Addr
	reserves int
	releases int
	fail     error
}

func (f *fakeIPAM) Reserve(_ context.Context, subnet netip.Prefix) (netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserves++
	if f.fail != nil {
		return netip.Addr{}, f.fail
	}
	if f.held == nil {
		f.held = map[netip.Prefix]netip.Addr{}
	}
	a := subnet.Addr().Next().Next()
	f.held[subnet] = a
	return a, nil
}

func (f *fakeIPAM) Release(_ context.Context, subnet netip.Prefix) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases++
	if f.fail != nil {
		return f.fail
	}
	delete(f.held, subnet)
	return nil
}

func (f *fakeIPAM) Holds(_ context.Context, subnet netip.Prefix, a netip.Addr) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return false, f.fail
	}
	return f.held[subnet] == a, nil
}

var podCIDR = netip.MustParsePrefix("10.244.1.0/24")

// vipState is one overlay Service with a local and a remote pod on a Node
// whose pod CIDR is 10.244.1.0/24.
func vipState() *core.NodeState {
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}))
	s.Node.PodCIDRs = []netip.Prefix{podCIDR}
	return s
}

func vipBackend(t *testing.T, f *Fake, ledger Ledger, ipam IPAM, explicit netip.Addr) *Backend {
	t.Helper()
	log := logrus.New()
	log.SetOutput(testWriter{t})
	b, err := New(f, Config{NetworkName: "vxlan0", NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: ledger, IPAM: ipam,
		SourceVIP: explicit, SourceVIPOrigin: "flag --source-vip"}, log)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lbSourceVIPs lists the distinct source VIPs of the fake's load balancers.
func lbSourceVIPs(f *Fake) string {
	seen := map[string]bool{}
	var out []string
	for _, lb := range f.LoadBalancers() {
		if v := lb.SourceVIP.String(); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return strings.Join(out, ",")
}

// noOwnSourceVIPEndpoint fails the test if crossproxy made a source-VIP
// endpoint of its own beside the one it should have reused.
func noOwnSourceVIPEndpoint(t *testing.T, f *Fake) {
	t.Helper()
	for _, e := range f.Endpoints() {
		if e.Name == sourceVIPEndpointName {
			t.Fatalf("crossproxy made its own source-VIP endpoint beside the existing one: %+v", e)
		}
	}
}

func sourceVIPNote(t *testing.T, b *Backend) string {
	t.Helper()
	p, err := b.Programmed(context.Background(), vipState().Ports[port("web", "10.96.0.10", nil).Key].Key.Service)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Notes {
		if strings.HasPrefix(n, "SourceVIP: ") {
			return n
		}
	}
	t.Fatalf("no SourceVIP note in %v", p.Notes)
	return ""
}

// TestSourceVIPReservedFromPodCIDR: with no source VIP configured and none
// on the network, the backend reserves one from the Node's pod CIDR through
// the IPAM plugin, creates its endpoint and uses it; the sync after, a
// restart (endpoint still there, or gone with the ledger kept) reuse it
// without a new reservation; cleanup releases it.
func TestSourceVIPReservedFromPodCIDR(t *testing.T) {
	ctx := context.Background()
	f := NewFake(overlay, AllFeatures())
	f.AddLocalEndpoint("pod", ip("10.244.1.5"))
	ledger := &MemoryLedger{}
	ipam := &fakeIPAM{}
	b := vipBackend(t, f, ledger, ipam, netip.Addr{})
	if err := b.Preflight(ctx); err != nil {
		t.Fatalf("preflight with an IPAM plugin and no source VIP: %v", err)
	}
	if err := b.Sync(ctx, vipState(), full()); err != nil {
		t.Fatal(err)
	}
	if got := lbSourceVIPs(f); got != "10.244.1.2" || ipam.reserves != 1 {
		t.Fatalf("load balancers' source VIP %q after %d reservations, want 10.244.1.2 after 1", got, ipam.reserves)
	}
	if d, _ := ledger.Load(); d.SourceVIP == nil || d.SourceVIP.Address != ip("10.244.1.2") || d.SourceVIP.Subnet != podCIDR {
		t.Fatalf("ledger reservation %+v", d.SourceVIP)
	}
	if n := sourceVIPNote(t, b); !strings.Contains(n, "10.244.1.2, chosen by a new reservation from pod CIDR 10.244.1.0/24 of Node win-1 through the IPAM plugin") {
		t.Fatalf("explain note %q", n)
	}
	if err := b.Sync(ctx, vipState(), partial()); err != nil || ipam.reserves != 1 {
		t.Fatalf("second sync: %v, %d reservations", err, ipam.reserves)
	}

	// A restart: the endpoint crossproxy made is found first.
	b2 := vipBackend(t, f, ledger, ipam, netip.Addr{})
	if err := b2.Sync(ctx, vipState(), full()); err != nil || ipam.reserves != 1 {
		t.Fatalf("restart: %v, %d reservations", err, ipam.reserves)
	}
	if n := sourceVIPNote(t, b2); !strings.Contains(n, `10.244.1.2, chosen by the existing HNS endpoint "crossproxy-source-vip"`) {
		t.Fatalf("restart note %q", n)
	}
	// A restart after HNS lost the endpoint: the ledger's reservation.
	f2 := NewFake(overlay, AllFeatures())
	f2.AddLocalEndpoint("pod", ip("10.244.1.5"))
	b3 := vipBackend(t, f2, ledger, ipam, netip.Addr{})
	if err := b3.Sync(ctx, vipState(), full()); err != nil || ipam.reserves != 1 || lbSourceVIPs(f2) != "10.244.1.2" {
		t.Fatalf("restart without the endpoint: %v, %d reservations, source VIP %q", err, ipam.reserves, lbSourceVIPs(f2))
	}
	if err := b3.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := ledger.Load(); d.SourceVIP != nil || ipam.releases != 1 || len(ipam.held) != 0 {
		t.Fatalf("after cleanup: ledger %+v, %d releases, held %v", d.SourceVIP, ipam.releases, ipam.held)
	}
}

// TestSourceVIPExistingEndpoint: kube-proxy's source-VIP endpoint (no name,
// the host's MAC) and Calico's Calico_ep are reused; no reservation is made
// and no second endpoint created. An explicit source VIP wins over them.
func TestSourceVIPExistingEndpoint(t *testing.T) {
	ctx := context.Background()
	for name, ep := range map[string]Endpoint{
		"kube-proxy": {IP: ip("10.244.1.9"), MAC: strings.ReplaceAll(hostMAC, "-", ":")},
		"calico":     {Name: "Calico_ep", IP: ip("10.244.1.9"), MAC: "0e-2a-0a-f4-01-09"},
	} {
		t.Run(name, func(t *testing.T) {
			f := NewFake(overlay, AllFeatures())
			f.AddLocalEndpoint("pod", ip("10.244.1.5"))
			f.AddEndpoint(ep)
			ipam := &fakeIPAM{}
			b := vipBackend(t, f, &MemoryLedger{}, ipam, netip.Addr{})
			if err := b.Sync(ctx, vipState(), full()); err != nil {
				t.Fatal(err)
			}
			if got := lbSourceVIPs(f); got != "10.244.1.9" || ipam.reserves != 0 {
				t.Fatalf("source VIP %q, %d reservations; want the existing endpoint's 10.244.1.9, none", got, ipam.reserves)
			}
			noOwnSourceVIPEndpoint(t, f)
		})
	}
	f := NewFake(overlay, AllFeatures())
	f.AddLocalEndpoint("pod", ip("10.244.1.5"))
	f.AddEndpoint(Endpoint{Name: "Calico_ep", IP: ip("10.244.1.9")})
	b := vipBackend(t, f, &MemoryLedger{}, &fakeIPAM{}, ip("10.244.1.3"))
	if err := b.Sync(ctx, vipState(), full()); err != nil {
		t.Fatal(err)
	}
	if got := lbSourceVIPs(f); got != "10.244.1.3" {
		t.Fatalf("explicit source VIP lost to the existing endpoint: %q", got)
	}
	if n := sourceVIPNote(t, b); !strings.Contains(n, "chosen by flag --source-vip") {
		t.Fatalf("note %q", n)
	}
}

// TestSourceVIPBadInput: an explicit source VIP outside the Node's pod CIDR,
// a Node without podCIDRs, an IPAM plugin that fails: the sync fails naming
// the cause, and the load balancers already programmed (another Service's,
// from an earlier run) stay as they are.
func TestSourceVIPBadInput(t *testing.T) {
	ctx := context.Background()
	noCIDR := vipState()
	noCIDR.Node.PodCIDRs = nil
	for _, c := range []struct {
		name     string
		explicit netip.Addr
		ipamErr  error
		state    *core.NodeState
		want     string
	}{
		{"explicit outside the pod CIDR", ip("10.244.9.2"), nil, vipState(), "the source VIP 10.244.9.2 (flag --source-vip) is outside the pod CIDR 10.244.1.0/24 of Node win-1"},
		{"Node without podCIDRs", netip.Addr{}, nil, noCIDR, "Node win-1 has no spec.podCIDRs"},
		{"IPAM plugin fails", netip.Addr{}, errors.New("host-local: no IP addresses available in range set"), vipState(),
			"reserve a source VIP from pod CIDR 10.244.1.0/24 of Node win-1 through the IPAM plugin: host-local: no IP addresses available in range set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// An earlier run programmed another Service with the source VIP 10.244.1.2.
			f := NewFake(overlay, AllFeatures())
			f.AddLocalEndpoint("pod", ip("10.244.1.5"))
			ledger := &MemoryLedger{}
			first := vipBackend(t, f, ledger, nil, ip("10.244.1.2"))
			other := state(port("other", "10.96.0.99", []core.Endpoint{local("10.244.1.5", 8080)}))
			other.Node.PodCIDRs = []netip.Prefix{podCIDR}
			if err := first.Sync(ctx, other, full()); err != nil {
				t.Fatal(err)
			}
			// HNS lost the source-VIP endpoint; this run is configured badly.
			for _, e := range f.Endpoints() {
				if e.Name == sourceVIPEndpointName {
					_ = f.DeleteEndpoint(ctx, e.ID)
				}
			}
			before := stateDump(f)
			ipam := &fakeIPAM{fail: c.ipamErr}
			b := vipBackend(t, f, ledger, ipam, c.explicit)
			s := c.state
			s.Ports[port("other", "10.96.0.99", nil).Key] = other.Ports[port("other", "10.96.0.99", nil).Key]
			err := b.Sync(ctx, s, full())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("sync: %v\nwant an error containing %q", err, c.want)
			}
			if after := stateDump(f); after != before {
				t.Fatalf("a refused sync changed HNS:\n%s\nwant:\n%s", after, before)
			}
		})
	}
}

// TestCNIIPAMHostLocal runs the real host-local plugin (Debian's
// containernetworking-plugins, installed by test/setup-host.sh) through the
// same invocation code the Windows binary uses: the backend reserves the
// source VIP from the pod CIDR in a temporary data directory, a second start
// finds the same address, cleanup releases it.
func TestCNIIPAMHostLocal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("host-local here is the Linux plugin; Windows runs host-local.exe the same way")
	}
	const bin = "/usr/lib/cni"
	if _, err := os.Stat(filepath.Join(bin, "host-local")); err != nil {
		t.Fatalf("the host-local plugin is missing (apt-get install containernetworking-plugins; test/setup-host.sh installs it): %v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	ipam := CNIIPAM{BinDirs: []string{bin}, Network: "vxlan0", DataDir: filepath.Join(dir, "cni")}
	ledger := FileLedger{Path: filepath.Join(dir, "hns-owned.json")}
	reserved := func() []string {
		es, _ := os.ReadDir(filepath.Join(dir, "cni", "vxlan0"))
		var out []string
		for _, e := range es {
			if b, err := os.ReadFile(filepath.Join(dir, "cni", "vxlan0", e.Name())); err == nil && strings.HasPrefix(string(b), sourceVIPContainerID) {
				out = append(out, e.Name())
			}
		}
		return out
	}
	newFake := func() *Fake {
		f := NewFake(overlay, AllFeatures())
		f.AddLocalEndpoint("pod", ip("10.244.1.5"))
		return f
	}
	f := newFake()
	b := vipBackend(t, f, ledger, ipam, netip.Addr{})
	if err := b.Sync(ctx, vipState(), full()); err != nil {
		t.Fatal(err)
	}
	vip := lbSourceVIPs(f)
	if got := reserved(); len(got) != 1 || got[0] != vip || !podCIDR.Contains(ip(vip)) {
		t.Fatalf("host-local holds %v for crossproxy, load balancers use %q", got, vip)
	}
	// Second start, HNS without the endpoint: the same address, no new reservation.
	f2 := newFake()
	b2 := vipBackend(t, f2, ledger, ipam, netip.Addr{})
	if err := b2.Sync(ctx, vipState(), full()); err != nil {
		t.Fatal(err)
	}
	if got := lbSourceVIPs(f2); got != vip || fmt.Sprint(reserved()) != fmt.Sprint([]string{vip}) {
		t.Fatalf("second start: source VIP %q (want %s), host-local holds %v", got, vip, reserved())
	}
	// `crossproxy cleanup` is told neither the network nor the store: the
	// ledger's reservation says where it was made.
	cleanup, err := New(f2, Config{Ledger: ledger, IPAM: CNIIPAM{BinDirs: []string{bin}}}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := cleanup.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if got := reserved(); len(got) != 0 {
		t.Fatalf("after cleanup host-local still holds %v", got)
	}
	// host-local refusing (a pod CIDR it cannot allocate from): the sync
	// fails with the plugin's own words and programs nothing.
	f3 := newFake()
	tiny := vipState()
	tiny.Node.PodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.1.5/32")}
	b3 := vipBackend(t, f3, &MemoryLedger{}, ipam, netip.Addr{})
	err = b3.Sync(ctx, tiny, full())
	if err == nil || !strings.Contains(err.Error(), "host-local ADD") || !strings.Contains(err.Error(), "too small to allocate from") {
		t.Fatalf("host-local refusing: %v", err)
	}
	if lbs := f3.LoadBalancers(); len(lbs) != 0 {
		t.Fatalf("a refused sync created %v", lbs)
	}
	// A plugin that cannot be found is an error naming it.
	bad := CNIIPAM{BinDirs: []string{dir}, Network: "vxlan0"}
	if _, err := bad.Reserve(ctx, podCIDR); err == nil || !strings.Contains(err.Error(), `find the IPAM plugin "host-local"`) {
		t.Fatalf("missing plugin: %v", err)
	}
}
