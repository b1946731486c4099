package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

type recordingNotifier struct {
	mu  sync.Mutex
	got []string
}

func (n *recordingNotifier) Unsupported(svc types.NamespacedName, feature, _ string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, svc.String()+" "+feature)
}

type rig struct {
	fake     *Fake
	backend  *Backend
	ledger   *MemoryLedger
	notifier *recordingNotifier
	localIDs map[string]string
}

// newRig returns a backend over a fake overlay network holding the source
// VIP endpoint and the local endpoints (pods on this node) the CNI would have
// created. The node's address is 192.168.0.11.
func newRig(t *testing.T, features Features, locals ...string) *rig {
	t.Helper()
	return newRigOn(t, overlay, features, locals...)
}

const hostMAC = "00-15-5d-00-00-11"

func hostMACOf(netip.Addr) (string, error) { return hostMAC, nil }

func newRigOn(t *testing.T, nw Network, features Features, locals ...string) *rig {
	t.Helper()
	r := &rig{fake: NewFake(nw, features), ledger: &MemoryLedger{}, notifier: &recordingNotifier{}, localIDs: map[string]string{}}
	cfg := Config{NetworkName: nw.Name, NodeIP: ip("192.168.0.11"), Ledger: r.ledger, Notifier: r.notifier, HostMAC: hostMACOf, SourceVIPOrigin: "flag --source-vip"}
	if nw.isOverlay() {
		cfg.SourceVIP = ip("10.244.1.2")
		r.fake.AddEndpoint(Endpoint{Name: "source-vip", IP: cfg.SourceVIP, MAC: hostMAC, ProviderAddress: cfg.NodeIP})
	}
	for _, a := range locals {
		r.localIDs[a] = r.fake.AddLocalEndpoint("pod-"+a, ip(a))
	}
	log := logrus.New()
	log.SetOutput(testWriter{t})
	b, err := New(r.fake, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	r.backend = b
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func full() core.Changes { return core.Changes{Full: true} }

func partial(keys ...core.PortKey) core.Changes {
	c := core.Changes{Ports: map[core.PortKey]struct{}{}}
	for _, k := range keys {
		c.Ports[k] = struct{}{}
	}
	return c
}

// dump prints the fake's load balancers with endpoint addresses, for whole-state comparisons.
func (r *rig) dump() string {
	ips := map[string]string{}
	for _, ep := range r.fake.Endpoints() {
		ips[strings.ToUpper(ep.ID)] = ep.IP.String()
		if ep.Remote {
			ips[ep.ID] += "*"
		}
	}
	var sb strings.Builder
	for _, lb := range r.fake.LoadBalancers() {
		var eps []string
		for _, id := range lb.EndpointIDs {
			eps = append(eps, ips[strings.ToUpper(id)])
		}
		sort.Strings(eps)
		fmt.Fprintf(&sb, "%s -> :%d [%s] %s\n", lb.frontend(), lb.InternalPort, strings.Join(eps, " "), lb.Flags)
	}
	return sb.String()
}

func (r *rig) sync(t *testing.T, s *core.NodeState, c core.Changes) {
	t.Helper()
	if err := r.backend.Sync(context.Background(), s, c); err != nil {
		t.Fatal(err)
	}
}

func TestSyncCreatesThenNoOp(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}, withNodePort(30080, "192.168.0.11")))
	r.sync(t, s, full())
	mustEqual(t, r.dump(), `TCP/*/30080 -> :8080 [10.244.1.5 10.244.2.7*] LocalRoutedVIP,VipExternalIP
TCP/10.96.0.10/80 -> :8080 [10.244.1.5 10.244.2.7*] none
`)
	r.fake.ResetCalls()
	r.sync(t, s, full())
	want := map[string]int{"GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1}
	if got := r.fake.Calls(); !reflect.DeepEqual(got, want) {
		t.Fatalf("a full sync without changes made calls %v, want only the three reads %v", got, want)
	}
	r.fake.ResetCalls()
	r.sync(t, s, partial())
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("an empty partial sync made %d calls", n)
	}
}

// TestEndpointChangeCalls proves the call budget of one endpoint change: one
// modify where HNS supports it, a delete and a create otherwise.
func TestEndpointChangeCalls(t *testing.T) {
	for _, c := range []struct {
		name     string
		features Features
		want     map[string]int
	}{
		{"modify", AllFeatures(), map[string]int{"UpdateLoadBalancer": 1}},
		{"no modify", Features{APIV2: true, IPv6DualStack: true, RemoteSubnet: true}, map[string]int{"DeleteLoadBalancer": 1, "CreateLoadBalancer": 1}},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			r := newRig(t, c.features, "10.244.1.5", "10.244.1.6")
			p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), local("10.244.1.6", 8080)})
			r.sync(t, state(p), full())
			r.fake.ResetCalls()
			p2 := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
			r.sync(t, state(p2), partial(p2.Key))
			if got := r.fake.Calls(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("calls %v, want %v", got, c.want)
			}
			mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5] none\n")
		})
	}
}

// TestFailureIsolatedAndRetried: one Service's load balancer fails; the other
// is programmed, the sync reports the failure, and the next (partial, empty)
// sync retries it.
func TestFailureIsolatedAndRetried(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	broken := true
	r.fake.SetFail(func(method, arg string) error {
		if broken && method == "CreateLoadBalancer" && strings.Contains(arg, "10.96.0.11") {
			return errors.New("injected HNS failure")
		}
		return nil
	})
	s := state(port("a", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}), port("b", "10.96.0.11", []core.Endpoint{local("10.244.1.6", 8080)}))
	err := r.backend.Sync(context.Background(), s, full())
	if err == nil || !strings.Contains(err.Error(), "default/b:http/TCP/v4") || !strings.Contains(err.Error(), "injected HNS failure") {
		t.Fatalf("want an error naming default/b and the cause, got %v", err)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5] none\n")
	broken = false
	r.fake.ResetCalls()
	r.sync(t, s, partial())
	if got := r.fake.Calls(); !reflect.DeepEqual(got, map[string]int{"CreateLoadBalancer": 1}) {
		t.Fatalf("retry made calls %v", got)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5] none\nTCP/10.96.0.11/80 -> :8080 [10.244.1.6] none\n")
}

// TestForeignObjectsUntouched: a load balancer and a remote endpoint someone
// else made survive sync and cleanup; crossproxy's own are removed.
func TestForeignObjectsUntouched(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	foreignID := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.9.9")}, ExternalPort: 443, InternalPort: 443, EndpointIDs: []string{r.localIDs["10.244.1.5"]}})
	other, err := r.fake.CreateRemoteEndpoint(context.Background(), r.fake.network.ID, Endpoint{Name: "kube-proxy-remote", IP: ip("10.244.2.99"), ProviderAddress: ip("192.168.0.12")})
	if err != nil {
		t.Fatal(err)
	}
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}))
	r.sync(t, s, full())
	r.sync(t, state(), full())
	mustEqual(t, r.dump(), "TCP/10.96.9.9/443 -> :443 [10.244.1.5] none\n")
	r.sync(t, s, full())
	if err := r.backend.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	lbs := r.fake.LoadBalancers()
	if len(lbs) != 1 || lbs[0].ID != foreignID {
		t.Fatalf("after cleanup: %v, want only the foreign load balancer", lbs)
	}
	var left []string
	for _, ep := range r.fake.Endpoints() {
		left = append(left, ep.Name)
	}
	if want := []string{"source-vip", "pod-10.244.1.5", "kube-proxy-remote"}; !reflect.DeepEqual(left, want) || other.ID == "" {
		t.Fatalf("endpoints after cleanup %v, want %v", left, want)
	}
}

// TestServiceRemovedAndRemoteEndpointCollected: removing a Service deletes its
// load balancers, the pods' remote endpoints they used (HNS refuses a pod's
// local endpoint while a remote one holds the address, kubernetes #130963)
// and its ClusterIP's remote endpoint (overlay) in the same sync, as
// kube-proxy does.
func TestServiceRemovedAndRemoteEndpointCollected(t *testing.T) {
	r := newRig(t, AllFeatures())
	p := port("web", "10.96.0.10", []core.Endpoint{remote("10.244.2.7", 8080)})
	r.sync(t, state(p), full())
	r.sync(t, state(), partial(p.Key))
	if len(r.fake.LoadBalancers()) != 0 {
		t.Fatalf("load balancer left: %s", r.dump())
	}
	// The source VIP endpoint only.
	if eps := r.fake.Endpoints(); len(eps) != 1 || eps[0].Remote {
		t.Fatalf("the pod's and the ClusterIP's remote endpoints should be gone with the Service: %v", eps)
	}
	r.sync(t, state(), full())
	if eps := r.fake.Endpoints(); len(eps) != 1 || eps[0].Remote {
		t.Fatalf("remote endpoints left after full sync: %v", eps)
	}
}

// TestNewLocalEndpointRelisted: a pod the CNI attached after the last listing
// is found with one list call on a partial sync; one not attached yet is left
// out and retried.
func TestNewLocalEndpointRelisted(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	r.sync(t, state(p), full())
	p2 := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), local("10.244.1.6", 8080)})
	r.fake.ResetCalls()
	r.sync(t, state(p2), partial(p2.Key))
	if got := r.fake.Calls(); !reflect.DeepEqual(got, map[string]int{"ListEndpoints": 1}) {
		t.Fatalf("calls %v", got)
	}
	r.fake.AddLocalEndpoint("pod-new", ip("10.244.1.6"))
	r.fake.ResetCalls()
	r.sync(t, state(p2), partial())
	if got := r.fake.Calls(); !reflect.DeepEqual(got, map[string]int{"ListEndpoints": 1, "UpdateLoadBalancer": 1}) {
		t.Fatalf("retry calls %v", got)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5 10.244.1.6] none\n")
}

// TestAdoptAfterCrash: a load balancer created just before a crash (pending
// in the ledger, no id recorded) is adopted, not duplicated.
func TestAdoptAfterCrash(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	lb := LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.0.10")}, ExternalPort: 80, InternalPort: 8080,
		SourceVIP: ip("10.244.1.2"), EndpointIDs: []string{r.localIDs["10.244.1.5"]}}
	id := r.fake.AddForeignLoadBalancer(lb)
	if err := r.ledger.Save(ledgerData{Pending: map[string]pendingLB{lb.frontend(): {lbOwner: ownerOf(p.Key, core.FrontendClusterIP)}}}); err != nil {
		t.Fatal(err)
	}
	r.sync(t, state(p), full())
	d, _ := r.ledger.Load()
	if _, ok := d.LoadBalancers[id]; !ok || len(d.Pending) != 0 || len(r.fake.LoadBalancers()) != 1 {
		t.Fatalf("ledger %+v, load balancers %s", d, r.dump())
	}
}

func TestProgrammedReadsHNS(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}, withNodePort(30080, "192.168.0.11"),
		func(p *core.ServicePort) { p.SourceRanges = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/8")} }, withFrontend(core.FrontendLoadBalancer, "198.51.100.9"))
	r.sync(t, state(p, port("other", "10.96.0.11", []core.Endpoint{local("10.244.1.5", 8080)})), full())
	got, err := r.backend.Programmed(context.Background(), p.Key.Service)
	if err != nil {
		t.Fatal(err)
	}
	eps := []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080"), netip.MustParseAddrPort("10.244.2.7:8080")}
	want := &platform.ProgrammedService{Service: p.Key.Service, Frontends: []platform.ProgrammedFrontend{
		{Kind: core.FrontendClusterIP, Addr: ip("10.96.0.10"), Port: 80, Protocol: "TCP", Endpoints: eps},
		{Kind: core.FrontendNodePort, Addr: ip("192.168.0.11"), Port: 30080, Protocol: "TCP", Endpoints: eps},
		{Kind: core.FrontendLoadBalancer, Addr: ip("198.51.100.9"), Port: 80, Protocol: "TCP", Endpoints: eps},
	}, Notes: []string{"CNIConfig: none found",
		"HNSNetwork: vxlan0 (Overlay, id 00000000-0000-4000-8000-00000000BEEF, subnets none), found by the configuration (flag --network-name or KUBE_NETWORK)",
		"LoadBalancerSourceRanges: port http: HNS load balancers cannot filter clients by source; loadBalancerSourceRanges 0.0.0.0/8 are not enforced",
		"SourceVIP: overlay source VIP 10.244.1.2, chosen by flag --source-vip"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Read back, not remembered: a load balancer deleted behind crossproxy's back disappears.
	for _, lb := range r.fake.LoadBalancers() {
		if lb.ExternalPort == 30080 {
			_ = r.fake.DeleteLoadBalancer(context.Background(), lb.ID)
		}
	}
	got, _ = r.backend.Programmed(context.Background(), p.Key.Service)
	want.Frontends[1].Endpoints, want.Frontends[1].Verdict = nil, core.VerdictDrop
	if !reflect.DeepEqual(got.Frontends, want.Frontends) {
		t.Fatalf("after deleting the NodePort load balancer in HNS:\n got %+v\nwant %+v", got.Frontends, want.Frontends)
	}
}

// TestProgrammedWithoutEndpoints: a Service without endpoints has no load
// balancer; HNS drops its traffic, and Programmed says so (explain then shows
// "computed rejects, programmed drops" next to the notice).
func TestProgrammedWithoutEndpoints(t *testing.T) {
	r := newRig(t, AllFeatures())
	p := port("web", "10.96.0.10", nil)
	r.sync(t, state(p), full())
	got, err := r.backend.Programmed(context.Background(), p.Key.Service)
	if err != nil {
		t.Fatal(err)
	}
	want := []platform.ProgrammedFrontend{{Kind: core.FrontendClusterIP, Addr: ip("10.96.0.10"), Port: 80, Protocol: "TCP", Verdict: core.VerdictDrop}}
	if !reflect.DeepEqual(got.Frontends, want) || len(got.Notes) != 4 || !strings.HasPrefix(got.Notes[2], "RejectWithoutEndpoints: ") || !strings.HasPrefix(got.Notes[3], "SourceVIP: ") {
		t.Fatalf("got %+v", got)
	}
	r.sync(t, state(), partial(p.Key))
	// Only the node's notes stay (network, CNI configuration, source VIP).
	if got, _ := r.backend.Programmed(context.Background(), p.Key.Service); len(got.Frontends) != 0 || len(got.Notes) != 3 {
		t.Fatalf("after the Service went: %+v", got)
	}
}

// TestNotifierOncePerService: each unsupported feature is reported once per
// Service across syncs, and again after the Service came back.
func TestNotifierOncePerService(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withFrontend(core.FrontendLoadBalancer, "198.51.100.9"),
		func(p *core.ServicePort) { p.SourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")} })
	r.sync(t, state(p), full())
	r.sync(t, state(p), partial(p.Key))
	r.sync(t, state(p), full())
	stale := core.Changes{StaleUDP: []core.StaleEndpoint{{Key: p.Key, Endpoint: netip.MustParseAddrPort("10.244.1.9:53")}}}
	r.sync(t, state(p), stale)
	r.sync(t, state(), partial(p.Key))
	r.sync(t, state(p), partial(p.Key))
	want := []string{"default/web LoadBalancerSourceRanges", "default/web UDPStaleFlowCleanup", "default/web LoadBalancerSourceRanges"}
	if !reflect.DeepEqual(r.notifier.got, want) {
		t.Fatalf("notices %v, want %v", r.notifier.got, want)
	}
}

// TestModifyWhenDesiredChanges covers frontends changing flags in place and
// the fake's duplicate-frontend validation.
func TestFakeValidates(t *testing.T) {
	f := NewFake(overlay, Features{APIV2: true})
	ctx := context.Background()
	id := f.AddLocalEndpoint("pod", ip("10.244.1.5"))
	base := LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.0.10")}, ExternalPort: 80, InternalPort: 8080, EndpointIDs: []string{id}}
	if _, err := f.CreateLoadBalancer(ctx, base); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		lb   LoadBalancer
		want error
	}{
		"identical":        {base, ErrAlreadyExists},
		"duplicate":        {func() LoadBalancer { l := base; l.InternalPort = 9090; return l }(), ErrDuplicateFrontend},
		"unknown endpoint": {func() LoadBalancer { l := base; l.ExternalPort = 81; l.EndpointIDs = []string{"nope"}; return l }(), ErrUnknownEndpoint},
		"dsr unsupported":  {func() LoadBalancer { l := base; l.ExternalPort = 82; l.Flags.DSR = true; return l }(), ErrInvalid},
		"sctp":             {func() LoadBalancer { l := base; l.ExternalPort = 83; l.Protocol = 132; return l }(), ErrInvalid},
	} {
		if _, err := f.CreateLoadBalancer(ctx, c.lb); !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", name, err, c.want)
		}
	}
	if _, err := f.UpdateLoadBalancer(ctx, "x", base); !errors.Is(err, ErrNotImplemented) {
		t.Errorf("modify without the feature: %v", err)
	}
	if err := f.DeleteEndpoint(ctx, id); !errors.Is(err, ErrInvalid) {
		t.Errorf("deleting an endpoint in use: %v", err)
	}
}

// TestFileLedgerRoundTrip stores and reloads the ledger (no t.TempDir: its
// cleanup fails under Wine).
func TestFileLedgerRoundTrip(t *testing.T) {
	dir, err := os.MkdirTemp("", "crossproxy-ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir) //nolint:errcheck // fails under Wine; the OS cleans temp
	l := FileLedger{Path: filepath.Join(dir, "sub", "hns-owned.json")}
	if d, err := l.Load(); err != nil || len(d.LoadBalancers) != 0 {
		t.Fatalf("missing file: %+v %v", d, err)
	}
	o := lbOwner{Namespace: "default", Name: "web", Port: "http", Protocol: "TCP", Family: "IPv4", Kind: core.FrontendClusterIP}
	want := ledgerData{LoadBalancers: map[string]lbOwner{"id-1": o}, Frontends: map[string]string{"id-1": "TCP/10.96.0.11/80"},
		Pending: map[string]pendingLB{"TCP/10.96.0.10/80": {lbOwner: o, Foreign: []string{"id-9"}}}}
	if err := l.Save(want); err != nil {
		t.Fatal(err)
	}
	if err := l.Save(want); err != nil { // replacing an existing file
		t.Fatal(err)
	}
	got, err := l.Load()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v %v", got, err)
	}
	if err := os.WriteFile(l.Path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(); err == nil || !strings.Contains(err.Error(), l.Path) {
		t.Fatalf("a corrupt ledger must fail naming the file, got %v", err)
	}
}

// TestCleanupUsesRecordedNetwork: `crossproxy cleanup` without
// --network-name still finds the remote endpoints through the network the
// ledger recorded; Sync without a network name, on a node with two
// candidates, fails naming the flag.
func TestCleanupUsesRecordedNetwork(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	r.sync(t, state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)})), full())
	r.fake.AddNetwork(Network{ID: "second", Name: "vxlan1", Type: NetworkOverlay})
	b, err := New(r.fake, Config{Ledger: r.ledger}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(context.Background(), state(), full()); err == nil || !strings.Contains(err.Error(), "--network-name") {
		t.Fatalf("sync without a network: %v", err)
	}
	if err := b.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lbs, eps := r.fake.LoadBalancers(), r.fake.Endpoints(); len(lbs) != 0 || len(eps) != 2 || eps[0].Remote || eps[1].Remote {
		t.Fatalf("after cleanup: %v %v", lbs, eps)
	}
}

// TestForeignFrontendConflict: a frontend held by a load balancer crossproxy
// does not own is reported for that Service (log + Event), not retried on
// every sync as a failure; the other Services are programmed, and the
// frontend is taken at the first full sync after the foreign one is gone.
func TestForeignFrontendConflict(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	foreign := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.0.10")}, ExternalPort: 80, InternalPort: 9999, EndpointIDs: []string{r.localIDs["10.244.1.6"]}})
	s := state(port("a", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}), port("b", "10.96.0.11", []core.Endpoint{local("10.244.1.6", 8080)}))
	r.sync(t, s, full())
	if want := []string{"default/a FrontendInUse"}; !reflect.DeepEqual(r.notifier.got, want) {
		t.Fatalf("notices %v, want %v", r.notifier.got, want)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :9999 [10.244.1.6] none\nTCP/10.96.0.11/80 -> :8080 [10.244.1.6] none\n")
	r.fake.ResetCalls()
	r.sync(t, s, partial())
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("a partial sync retried the conflict: %v", r.fake.Calls())
	}
	if err := r.fake.DeleteLoadBalancer(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}
	r.sync(t, s, full())
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5] none\nTCP/10.96.0.11/80 -> :8080 [10.244.1.6] none\n")
}
