package hns

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// Tests of the backend against HNS failing the way HNS fails (issue 10):
// each drives the Fake into one of HNS' real behaviours and checks what
// crossproxy programs, the calls it makes and what it reports.

func (r *rig) endpointByIP(t *testing.T, a string) Endpoint {
	t.Helper()
	for _, ep := range r.fake.Endpoints() {
		if ep.IP == ip(a) {
			return ep
		}
	}
	t.Fatalf("no endpoint %s in %v", a, r.fake.Endpoints())
	return Endpoint{}
}

func (r *rig) notices() []string {
	r.notifier.mu.Lock()
	defer r.notifier.mu.Unlock()
	return slices.Clone(r.notifier.got)
}

// TestOverlayPrerequisites: on an overlay network crossproxy refuses to
// program without a source VIP, or without HNS' remote subnet support, as
// kube-proxy refuses to start; Preflight (run's start) reports it as a
// configuration error. L2Bridge needs neither.
func TestOverlayPrerequisites(t *testing.T) {
	for _, c := range []struct {
		name     string
		vip      netip.Addr
		features Features
		want     string
	}{
		{"no source VIP", netip.Addr{}, AllFeatures(), "source VIP (flag --source-vip)"},
		{"no remote subnet support", ip("10.244.1.2"), Features{APIV2: true}, "HNS remote subnet support"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFake(overlay, c.features)
			b, err := New(f, Config{NetworkName: "vxlan0", SourceVIP: c.vip, NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: &MemoryLedger{}}, logrus.New())
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Preflight(context.Background()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("preflight: %v, want %q", err, c.want)
			}
			s := state(port("web", "10.96.0.10", []core.Endpoint{remote("10.244.2.7", 8080)}))
			if err := b.Sync(context.Background(), s, full()); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("sync: %v, want %q", err, c.want)
			}
			if lbs, eps := len(f.LoadBalancers()), len(f.Endpoints()); lbs != 0 || eps != 0 {
				t.Fatalf("programmed %d load balancers, %d endpoints", lbs, eps)
			}
		})
	}
	f := NewFake(l2bridge, Features{APIV2: true})
	b, _ := New(f, Config{NetworkName: "cbr0", Ledger: &MemoryLedger{}}, logrus.New())
	if err := b.Preflight(context.Background()); err != nil {
		t.Fatalf("L2Bridge preflight: %v", err)
	}
}

// TestV2APIRequired: an HNS without the V2 API is refused at start.
func TestV2APIRequired(t *testing.T) {
	r := newRig(t, Features{RemoteSubnet: true})
	err := r.backend.Sync(context.Background(), state(), full())
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "V2 API") {
		t.Fatalf("got %v", err)
	}
}

// TestFeaturesRetriedAtBoot: GetGlobals failing (HNS not up yet at boot)
// fails the sync without remembering the failure; the next sync asks again.
func TestFeaturesRetriedAtBoot(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	down := 2
	r.fake.SetFail(func(method, _ string) error {
		if method == "Features" && down > 0 {
			down--
			return errors.New("hcnGetGlobals: The RPC server is unavailable (0x6ba)")
		}
		return nil
	})
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}))
	for range 2 {
		if err := r.backend.Sync(context.Background(), s, full()); err == nil || !strings.Contains(err.Error(), "detect HNS features") {
			t.Fatalf("want the features error, got %v", err)
		}
	}
	r.sync(t, s, full())
	if got := r.fake.Calls()["Features"]; got != 3 {
		t.Fatalf("Features called %d times, want 3 (asked until it answers, then kept)", got)
	}
	r.sync(t, s, full())
	if got := r.fake.Calls()["Features"]; got != 3 {
		t.Fatalf("Features asked again after it answered: %d", got)
	}
}

// TestSourceVIPEndpointCreated: an overlay network without the source VIP's
// endpoint gets one (local, host MAC, no provider address policy), as
// kube-proxy creates it; if HNS refuses it the sync stops before any load
// balancer.
func TestSourceVIPEndpointCreated(t *testing.T) {
	f := NewFake(overlay, AllFeatures())
	pod := f.AddLocalEndpoint("pod", ip("10.244.1.5"))
	b, err := New(f, Config{NetworkName: "vxlan0", SourceVIP: ip("10.244.1.2"), NodeIP: ip("192.168.0.11"), HostMAC: hostMACOf, Ledger: &MemoryLedger{}}, logrus.New())
	if err != nil {
		t.Fatal(err)
	}
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}))
	f.SetFail(func(method, _ string) error {
		if method == "CreateLocalEndpoint" {
			return errors.New("injected")
		}
		return nil
	})
	if err := b.Sync(context.Background(), s, full()); err == nil || !strings.Contains(err.Error(), "source VIP endpoint") {
		t.Fatalf("want the sync skipped naming the source VIP endpoint, got %v", err)
	}
	if n := len(f.LoadBalancers()); n != 0 {
		t.Fatalf("%d load balancers created although the source VIP endpoint is missing", n)
	}
	f.SetFail(nil)
	if err := b.Sync(context.Background(), s, full()); err != nil {
		t.Fatal(err)
	}
	var got Endpoint
	for _, ep := range f.Endpoints() {
		if ep.IP == ip("10.244.1.2") {
			got = ep
		}
	}
	want := Endpoint{ID: got.ID, Name: sourceVIPEndpointName, IP: ip("10.244.1.2"), MAC: hostMAC}
	if got != want || len(f.LoadBalancers()) != 1 || pod == "" {
		t.Fatalf("source VIP endpoint %+v, want %+v; load balancers %v", got, want, f.LoadBalancers())
	}
}

// TestOverlayRemoteEndpoints: every ClusterIP gets a remote endpoint (host
// MAC, this node as provider address); an endpoint outside every remote
// subnet (the kubernetes Service's API server) goes through this node, and
// one at another node's own address (hostNetwork) through that node; both
// load balancers take the node IP as source VIP, as kube-proxy's.
func TestOverlayRemoteEndpoints(t *testing.T) {
	r := newRig(t, AllFeatures())
	api := port("kubernetes", "10.96.0.1", []core.Endpoint{remote("172.16.0.10", 6443)})
	host := port("exporter", "10.96.0.30", []core.Endpoint{remote("192.168.0.12", 9100)})
	r.sync(t, state(api, host), full())
	for _, c := range []struct{ ip, pa, mac string }{
		{"10.96.0.1", "192.168.0.11", hostMAC},
		{"10.96.0.30", "192.168.0.11", hostMAC},
		{"172.16.0.10", "192.168.0.11", "02-11-ac-10-00-0a"},
		{"192.168.0.12", "192.168.0.12", "02-11-c0-a8-00-0c"},
	} {
		ep := r.endpointByIP(t, c.ip)
		if !ep.Remote || ep.ProviderAddress != ip(c.pa) || ep.MAC != c.mac {
			t.Errorf("endpoint %s: %+v, want remote, provider %s, MAC %s", c.ip, ep, c.pa, c.mac)
		}
	}
	for _, lb := range r.fake.LoadBalancers() {
		if lb.SourceVIP != ip("192.168.0.11") || len(lb.EndpointIDs) != 1 {
			t.Errorf("load balancer %s: source VIP %s, endpoints %v; want the node IP and one endpoint", lb.frontend(), lb.SourceVIP, lb.EndpointIDs)
		}
	}
}

// TestHostNetworkLocalEndpointNotRetried: a local endpoint at this node's own
// address (a hostNetwork pod) has no HNS endpoint; it is left out with a
// notice, not waited for: partial syncs make no list call for it.
func TestHostNetworkLocalEndpointNotRetried(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("exporter", "10.96.0.30", []core.Endpoint{local("192.168.0.11", 9100), local("10.244.1.5", 9100)})
	r.sync(t, state(p), full())
	mustEqual(t, r.dump(), "TCP/10.96.0.30/80 -> :9100 [10.244.1.5] none\n")
	r.fake.ResetCalls()
	r.sync(t, state(p), partial())
	r.sync(t, state(p), partial(p.Key))
	if n := r.fake.TotalCalls(); n != 0 {
		t.Fatalf("partial syncs made %d calls (%v) for a hostNetwork endpoint", n, r.fake.Calls())
	}
	if got := r.notices(); !slices.Contains(got, "default/exporter HostNetworkEndpoint") {
		t.Fatalf("notices %v", got)
	}
}

// TestWildcardNodePortHeldByForeign: the NodePort load balancer has no VIP
// (every host address), as kube-proxy's; one left by kube-proxy on the same
// port is reported for the Service (FrontendInUse), not a sync failure, and
// the other frontends are programmed.
func TestWildcardNodePortHeldByForeign(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, ExternalPort: 30080, InternalPort: 8080, EndpointIDs: []string{r.localIDs["10.244.1.5"]},
		Flags: LBFlags{LocalRoutedVIP: true, VipExternalIP: true}})
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30080, "192.168.0.11")))
	r.sync(t, s, full())
	mustEqual(t, r.dump(), "TCP/*/30080 -> :8080 [10.244.1.5] LocalRoutedVIP,VipExternalIP\nTCP/10.96.0.10/80 -> :8080 [10.244.1.5] none\n")
	if got := r.notices(); !slices.Contains(got, "default/web FrontendInUse") {
		t.Fatalf("notices %v", got)
	}
	if d, _ := r.ledger.Load(); len(d.LoadBalancers) != 1 || len(d.Pending) != 0 {
		t.Fatalf("ledger %+v: want only the ClusterIP load balancer, nothing pending", d)
	}
}

// TestPortReservationNotice: HNS answers a host port reservation with the
// same error as a foreign load balancer (0x803b0013); the notice names both.
func TestPortReservationNotice(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	r.fake.ReservePort(ProtocolTCP, 30080)
	var detail string
	r.backend.cfg.Notifier = notifierFunc(func(_, feature, d string) {
		if feature == "FrontendInUse" {
			detail = d
		}
	})
	r.sync(t, state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30080, "192.168.0.11"))), full())
	if !strings.Contains(detail, "load balancer crossproxy does not own") || !strings.Contains(detail, "reserved the port") {
		t.Fatalf("notice %q should name a foreign load balancer and a host port reservation", detail)
	}
}

// TestUpdateNotImplemented: an HNS that reports modify but answers E_NOTIMPL
// is handled as kube-proxy does: modify is turned off and the load balancer
// is deleted and created again in the same sync; later changes go straight
// to delete + create.
func TestUpdateNotImplemented(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	r.fake.SetUpdateNotImplemented(true)
	one := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	two := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), local("10.244.1.6", 8080)})
	r.sync(t, state(one), full())
	r.fake.ResetCalls()
	r.sync(t, state(two), partial(two.Key))
	if got, want := r.fake.Calls(), map[string]int{"UpdateLoadBalancer": 1, "DeleteLoadBalancer": 1, "CreateLoadBalancer": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5 10.244.1.6] none\n")
	r.fake.ResetCalls()
	r.sync(t, state(one), partial(one.Key))
	if got, want := r.fake.Calls(), map[string]int{"DeleteLoadBalancer": 1, "CreateLoadBalancer": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after E_NOTIMPL: calls %v, want %v", got, want)
	}
}

// TestAdoptAfterHNSRestart: HNS restores every load balancer under a new id
// after a restart; the next full sync recognises crossproxy's by their
// recorded frontends and creates nothing.
func TestAdoptAfterHNSRestart(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30080, "192.168.0.11")))
	r.sync(t, s, full())
	r.fake.Restart()
	r.fake.ResetCalls()
	r.sync(t, s, full())
	if got, want := r.fake.Calls(), map[string]int{"GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want only the reads", got)
	}
	d, _ := r.ledger.Load()
	for _, lb := range r.fake.LoadBalancers() {
		if _, ok := d.LoadBalancers[lb.ID]; !ok {
			t.Fatalf("restored load balancer %s (%s) not adopted: %+v", lb.ID, lb.frontend(), d)
		}
	}
}

// TestAlreadyExistsOnCreate: a create whose reply failed although HNS made
// the load balancer leaves a pending entry; the retry's create gets
// ERROR_ALREADY_EXISTS (0xb7) and adopts the load balancer, with no sync
// error and no orphan.
func TestAlreadyExistsOnCreate(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	lost := true
	r.fake.SetFailAfter(func(method, _ string) error {
		if method == "CreateLoadBalancer" && lost {
			lost = false
			return errors.New("hcnCreateLoadBalancer: the remote procedure call failed")
		}
		return nil
	})
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}))
	if err := r.backend.Sync(context.Background(), s, full()); err == nil {
		t.Fatal("the failed create must be reported")
	}
	if d, _ := r.ledger.Load(); len(d.Pending) != 1 {
		t.Fatalf("want the create kept pending: %+v", d)
	}
	r.fake.ResetCalls()
	r.sync(t, s, partial())
	if got, want := r.fake.Calls(), map[string]int{"CreateLoadBalancer": 1, "ListLoadBalancers": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	d, _ := r.ledger.Load()
	lbs := r.fake.LoadBalancers()
	if len(lbs) != 1 || len(d.Pending) != 0 || d.LoadBalancers[lbs[0].ID].Name != "web" {
		t.Fatalf("load balancers %v, ledger %+v", lbs, d)
	}
}

// TestFailedCreateAdoptedAtFullSync: the same failed create, followed by a
// full sync (the runner forces one after a failure): the pending entry adopts
// the load balancer HNS made.
func TestFailedCreateAdoptedAtFullSync(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	r.fake.SetFailAfter(func(method, _ string) error {
		if method == "CreateLoadBalancer" {
			return errors.New("timeout")
		}
		return nil
	})
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}))
	if err := r.backend.Sync(context.Background(), s, full()); err == nil {
		t.Fatal("the failed create must be reported")
	}
	r.fake.SetFailAfter(nil)
	r.fake.ResetCalls()
	r.sync(t, s, full())
	if got, want := r.fake.Calls(), map[string]int{"GetNetwork": 1, "ListEndpoints": 1, "ListLoadBalancers": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("calls %v, want only the reads (adopted, nothing created)", got)
	}
	if d, _ := r.ledger.Load(); len(d.LoadBalancers) != 1 || len(d.Pending) != 0 {
		t.Fatalf("ledger %+v", d)
	}
}

// TestPendingDoesNotAdoptForeign: a pending entry never adopts a load
// balancer that held its frontend when the entry was written (a foreign one),
// and a create HNS refused as a duplicate leaves no pending entry behind.
func TestPendingDoesNotAdoptForeign(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	foreign := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: []netip.Addr{ip("10.96.0.10")}, ExternalPort: 80, InternalPort: 8080,
		EndpointIDs: []string{r.localIDs["10.244.1.5"]}, SourceVIP: ip("10.244.1.2")})
	if err := r.ledger.Save(ledgerData{Pending: map[string]pendingLB{"TCP/10.96.0.10/80": {lbOwner: ownerOf(p.Key, core.FrontendClusterIP), Foreign: []string{foreign}}}}); err != nil {
		t.Fatal(err)
	}
	r.sync(t, state(p), full())
	d, _ := r.ledger.Load()
	if _, adopted := d.LoadBalancers[foreign]; adopted || len(d.Pending) != 0 {
		t.Fatalf("foreign load balancer adopted or entry left pending: %+v", d)
	}
	if got := r.notices(); !slices.Contains(got, "default/web FrontendInUse") {
		t.Fatalf("notices %v", got)
	}
	r.sync(t, state(p), full())
	if d, _ := r.ledger.Load(); len(d.LoadBalancers) != 0 {
		t.Fatalf("foreign load balancer adopted at a later full sync: %+v", d)
	}
}

// TestLocalAndRemoteWithOneIP: where a local and a remote endpoint share an
// address (Windows Server 2019/2022 can hold both), the load balancer uses
// the local one; the remote one is deleted when crossproxy made it and never
// touched when another did (kube-proxy deletes neither's foreign twin; Calico's
// Calico_ep is remote).
func TestLocalAndRemoteWithOneIP(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	ownTwin := r.fake.AddEndpoint(Endpoint{Name: remoteEndpointPrefix + "10.244.1.5", IP: ip("10.244.1.5"), Remote: true, ProviderAddress: ip("192.168.0.12")})
	foreignTwin := r.fake.AddEndpoint(Endpoint{Name: "left-over", IP: ip("10.244.1.6"), Remote: true, ProviderAddress: ip("192.168.0.12")})
	r.sync(t, state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), local("10.244.1.6", 8080)})), full())
	lbs := r.fake.LoadBalancers()
	want := normalIDs([]string{r.localIDs["10.244.1.5"], r.localIDs["10.244.1.6"]})
	if len(lbs) != 1 || !slices.Equal(normalIDs(lbs[0].EndpointIDs), want) {
		t.Fatalf("load balancer %v should use the local endpoints %v", lbs, want)
	}
	var ids []string
	for _, ep := range r.fake.Endpoints() {
		ids = append(ids, ep.ID)
	}
	if slices.Contains(ids, ownTwin) {
		t.Fatalf("crossproxy's remote twin %s was not deleted", ownTwin)
	}
	if !slices.Contains(ids, foreignTwin) {
		t.Fatalf("the foreign remote twin %s was deleted", foreignTwin)
	}
}

// TestStaleRemoteEndpointReplaced: a remote endpoint crossproxy made whose
// provider address no longer matches (the pod's subnet moved to another
// node) is replaced: left out of the load balancer, deleted, created with the
// new provider address, and used again by the next sync.
func TestStaleRemoteEndpointReplaced(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), remote("10.244.2.7", 8080)}))
	r.sync(t, s, full())
	r.fake.SetRemoteSubnets([]RemoteSubnet{{Prefix: netip.MustParsePrefix("10.244.2.0/24"), ProviderAddress: ip("192.168.0.13")}})
	if err := r.backend.Sync(context.Background(), s, full()); err != nil {
		t.Fatal(err)
	}
	r.sync(t, s, partial())
	if ep := r.endpointByIP(t, "10.244.2.7"); ep.ProviderAddress != ip("192.168.0.13") {
		t.Fatalf("remote endpoint %+v still has the old provider address", ep)
	}
	mustEqual(t, r.dump(), "TCP/10.96.0.10/80 -> :8080 [10.244.1.5 10.244.2.7*] none\n")
}

// TestLBsReadBackNormalised: HNS reports endpoint ids in its own order and
// case; an unchanged load balancer still costs no call on a full sync.
func TestLBsReadBackNormalised(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080), local("10.244.1.6", 8080)}))
	r.sync(t, s, full())
	got := r.fake.LoadBalancers()[0].EndpointIDs
	if slices.IsSorted(got) || got[0] != strings.ToUpper(got[0]) {
		t.Fatalf("the fake should read back HNS' form, got %v", got)
	}
	r.fake.ResetCalls()
	r.sync(t, s, full())
	if n := r.fake.TotalCalls(); n != 3 {
		t.Fatalf("full sync of an unchanged load balancer: %v", r.fake.Calls())
	}
}

// TestNetworkTypeAndIDAsHNSReportsThem: a network type in another case is
// still an overlay, and the network id is passed back to HNS exactly as HNS
// gave it (the fake refuses a lower-cased id).
func TestNetworkTypeAndIDAsHNSReportsThem(t *testing.T) {
	nw := overlay
	nw.Type = "overlay"
	nw.ID = "5D3A1E6B-0000-4000-8000-00000000ABCD"
	r := newRigOn(t, nw, AllFeatures())
	r.sync(t, state(port("web", "10.96.0.10", []core.Endpoint{remote("10.244.2.7", 8080)})), full())
	if ep := r.endpointByIP(t, "10.244.2.7"); ep.ProviderAddress != ip("192.168.0.12") {
		t.Fatalf("overlay not recognised: %+v", ep)
	}
}

type notifierFunc func(svc, feature, detail string)

func (f notifierFunc) Unsupported(svc types.NamespacedName, feature, detail string) {
	f(svc.String(), feature, detail)
}
