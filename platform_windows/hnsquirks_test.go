package hns

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/core"
)

// TestListingRetriedUnderChurn: hcn lists endpoints by enumerating their ids
// and then opening each (hcsshim hcn/hcnendpoint.go enumerateEndpoints), so
// a pod deleted in between fails the whole listing with element not found.
// A full sync lists once more instead of failing (and backing off, and
// forcing another full sync).
func TestListingRetriedUnderChurn(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5", "10.244.1.6")
	r.fake.profile.ListFailsOnConcurrentDelete = true
	s := state(port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)}))
	r.sync(t, s, full())
	gone := r.localIDs["10.244.1.6"]
	once := false
	r.fake.SetListRace(func() {
		if !once {
			once = true
			r.fake.CNIDeleteEndpoint(gone)
		}
	})
	if err := r.backend.Sync(context.Background(), s, full()); err != nil {
		t.Fatalf("a full sync whose listing raced a pod's deletion: %v", err)
	}
	if calls := r.fake.Calls()["ListEndpoints"]; calls != 3 {
		t.Fatalf("ListEndpoints called %d times, want 3 (one per full sync, one retry)", calls)
	}
}

// TestFrontendOutageIsOneCall: on HNS without modify (Windows Server
// 2019/2022) a changed load balancer is deleted and created again. Each
// frontend's delete and create run back to back, so it is without a load
// balancer for about one call, not for a whole phase of deletes.
func TestFrontendOutageIsOneCall(t *testing.T) {
	const n, latency = 20, 10 * time.Millisecond
	var ports []*core.ServicePort
	for i := range n {
		ports = append(ports, port(string(rune('a'+i)), "10.96.0."+itoa(10+i), []core.Endpoint{local("10.244.1.5", 8080)}))
	}
	r := newRig(t, Features{APIV2: true, RemoteSubnet: true}, "10.244.1.5", "10.244.1.6")
	r.backend.cfg.Concurrency = 1
	r.sync(t, state(ports...), full())
	var changed []core.PortKey
	for _, p := range ports {
		p.ClusterEndpoints = []core.Endpoint{local("10.244.1.6", 8080)}
		p.LocalEndpoints = p.ClusterEndpoints
		changed = append(changed, p.Key)
	}
	r.fake.SetLatency(latency)
	r.sync(t, state(ports...), partial(changed...))
	worst := time.Duration(0)
	for f, d := range r.fake.Outage() {
		t.Logf("%s without a load balancer for %s", f, d)
		worst = max(worst, d)
	}
	// About one call each; a phase of deletes first would leave the last
	// frontend without a load balancer for n calls. The bound leaves room
	// for sleeps that overshoot on a loaded machine.
	if bound := n / 4 * latency; len(r.fake.Outage()) != n || worst > bound {
		t.Fatalf("%d frontends replaced, the longest without a load balancer for %s, want every one within %s (one call is %s)", len(r.fake.Outage()), worst, bound, latency)
	}
}

// TestPortLockRetriedWithBackoff: HCN_E_PORT_ALREADY_EXISTS also comes from
// a port lock HNS kept after a failed delete (kubernetes #137530); the
// frontend is tried again by the next syncs once its backoff (1 s, 2 s ...)
// has passed, not only at the hourly full sync.
func TestPortLockRetriedWithBackoff(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	r.backend.now = func() time.Time { return now }
	np := port("np", "10.96.0.20", []core.Endpoint{local("10.244.1.5", 8080)}, withNodePort(30100, "192.168.0.11"))
	s := state(np)
	r.sync(t, s, full())
	r.fake.LeakPortLock(ProtocolTCP, 30100, 2)
	// The port lock is leaked when the Service is created again.
	r.sync(t, state(), partial(np.Key))
	r.sync(t, s, partial(np.Key))
	creates := func() int { return r.fake.Calls()["CreateLoadBalancer"] }
	before := creates()
	now = now.Add(500 * time.Millisecond)
	r.sync(t, s, partial())
	if creates() != before {
		t.Fatalf("retried before its backoff of 1 s")
	}
	for range 2 {
		now = now.Add(2 * time.Second)
		r.sync(t, s, partial())
	}
	if got := r.dump(); got != "TCP/*/30100 -> :8080 [10.244.1.5] LocalRoutedVIP,VipExternalIP\nTCP/10.96.0.20/80 -> :8080 [10.244.1.5] none\n" {
		t.Fatalf("after the lock is released, partial syncs only:\n%s", got)
	}
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// TestReportsAs: a load balancer HNS reports with a source VIP it was sent
// without (L2Bridge, the node's address) or without port mapping flag 16
// is the one wanted; any other difference is not (the replay under Wine,
// TestHCNReplayZeroWrites, runs it through hcn's JSON).
func TestReportsAs(t *testing.T) {
	want := LoadBalancer{Protocol: ProtocolTCP, ExternalPort: 30080, InternalPort: 8080, EndpointIDs: []string{"a"},
		Flags: LBFlags{LocalRoutedVIP: true, VipExternalIP: true}}
	for _, c := range []struct {
		name   string
		change func(*LoadBalancer)
		same   bool
	}{
		{"as sent", func(*LoadBalancer) {}, true},
		{"the node's address as source VIP", func(lb *LoadBalancer) { lb.SourceVIP = ip("192.168.0.11") }, true},
		{"flag 16 not reported", func(lb *LoadBalancer) { lb.Flags.VipExternalIP = false }, true},
		{"DSR reported", func(lb *LoadBalancer) { lb.Flags.DSR = true }, false},
		{"another endpoint", func(lb *LoadBalancer) { lb.EndpointIDs = []string{"b"} }, false},
		{"another internal port", func(lb *LoadBalancer) { lb.InternalPort = 9090 }, false},
	} {
		got := cloneLB(want)
		c.change(&got)
		if reportsAs(got, want) != c.same {
			t.Errorf("%s: reportsAs %v, want %v", c.name, !c.same, c.same)
		}
	}
	overlayWant := want
	overlayWant.SourceVIP = ip("10.244.1.2")
	reported := cloneLB(overlayWant)
	reported.SourceVIP = ip("192.168.0.11")
	if reportsAs(reported, overlayWant) {
		t.Errorf("an overlay load balancer reported with another source VIP must be rewritten")
	}
}

// TestCleanupLeavesAnotherProxysLoadBalancer: the way back to kube-proxy
// (installer/README.md): kube-proxy starts, deletes every load balancer,
// crossproxy's included, and makes its own on the same frontends; then
// crossproxy's cleanup runs. It must delete nothing of kube-proxy's, though
// a load balancer now stands on each frontend crossproxy's ledger names
// (TestTakeoverAndBack in test/hnsemu/kubeproxy plays it with the binaries).
func TestCleanupLeavesAnotherProxysLoadBalancer(t *testing.T) {
	r := newRig(t, AllFeatures(), "10.244.1.5")
	p := port("web", "10.96.0.10", []core.Endpoint{local("10.244.1.5", 8080)})
	r.sync(t, state(p), full())
	ours := r.fake.LoadBalancers()[0]
	r.fake.DeleteBehind(strings.ToLower(ours.ID))
	theirs := r.fake.AddForeignLoadBalancer(LoadBalancer{Protocol: ProtocolTCP, FrontendVIPs: ours.FrontendVIPs, ExternalPort: 80, InternalPort: 8080,
		EndpointIDs: []string{r.localIDs["10.244.1.5"]}})
	if err := r.backend.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lbs := r.fake.LoadBalancers(); len(lbs) != 1 || !strings.EqualFold(lbs[0].ID, theirs) {
		t.Fatalf("cleanup deleted the load balancer another proxy made on crossproxy's old frontend: %v", lbs)
	}
}
