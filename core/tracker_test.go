package core

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

func changedKeys(ch Changes) []string {
	var out []string
	for k := range ch.Ports {
		out = append(out, k.String())
	}
	sort.Strings(out)
	return out
}

func newTestTracker(t *testing.T) *Tracker {
	t.Helper()
	tr, err := NewTracker(Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.SetNode(defaultNode())
	return tr
}

func TestTrackerPartialChanges(t *testing.T) {
	tr := newTestTracker(t)
	if !tr.Pending() {
		t.Fatal("new tracker should be pending its first snapshot")
	}
	tr.UpsertService(testService("a"))
	tr.UpsertService(testService("b", clusterIPs("10.96.0.2")))
	tr.UpsertSlice(testSlice("a-1", "a", ep("10.0.0.1", "n1")))
	tr.UpsertSlice(testSlice("b-1", "b", ep("10.0.1.1", "n1")))
	st1, ch := tr.Snapshot()
	if !ch.Full {
		t.Fatal("first snapshot not Full")
	}
	expectEq(t, "first ports", fmt.Sprint(changedKeys(ch)), "[default/a:http/TCP/v4 default/b:http/TCP/v4]")
	expectEq(t, "service changes", ch.ServiceChanges, 2)
	expectEq(t, "endpoint changes", ch.EndpointChanges, 2)
	if tr.Pending() {
		t.Fatal("pending after snapshot")
	}

	st2, ch := tr.Snapshot()
	if ch.Full || len(ch.Ports) != 0 || ch.ServiceChanges != 0 {
		t.Fatalf("idle snapshot changes %+v", ch)
	}
	if st2.Ports[httpV4("a")] != st1.Ports[httpV4("a")] {
		t.Fatal("unchanged port is a new pointer")
	}

	// One slice update changes only Service a; b keeps its pointer; the old
	// state is untouched.
	oldA := st2.Ports[httpV4("a")]
	tr.UpsertSlice(testSlice("a-1", "a", ep("10.0.0.1", "n1"), ep("10.0.0.2", "n2")))
	st3, ch := tr.Snapshot()
	expectEq(t, "changed", fmt.Sprint(changedKeys(ch)), "[default/a:http/TCP/v4]")
	expectEq(t, "full", ch.Full, false)
	expectEq(t, "new a", eps(st3.Ports[httpV4("a")].ClusterEndpoints), "10.0.0.1:8080 10.0.0.2:8080")
	expectEq(t, "old a", eps(st2.Ports[httpV4("a")].ClusterEndpoints), "10.0.0.1:8080")
	if st2.Ports[httpV4("a")] != oldA {
		t.Fatal("old NodeState was modified")
	}
	if st3.Ports[httpV4("b")] != st2.Ports[httpV4("b")] {
		t.Fatal("untouched Service b got a new pointer")
	}

	// A re-delivered identical object changes nothing.
	tr.UpsertService(testService("a"))
	if !tr.Pending() {
		t.Fatal("upsert not pending")
	}
	st4, ch := tr.Snapshot()
	expectEq(t, "resync changes", len(ch.Ports), 0)
	expectEq(t, "resync counted", ch.ServiceChanges, 1)
	if st4.Ports[httpV4("a")] != st3.Ports[httpV4("a")] {
		t.Fatal("identical object produced a new pointer")
	}

	// Adding a port changes just that key.
	tr.UpsertService(testService("a", svcPorts(sport("http", v1.ProtocolTCP, 80), sport("metrics", v1.ProtocolTCP, 9090))))
	_, ch = tr.Snapshot()
	expectEq(t, "added port", fmt.Sprint(changedKeys(ch)), "[default/a:metrics/TCP/v4]")
}

func TestTrackerDeletes(t *testing.T) {
	tr := newTestTracker(t)
	tr.UpsertService(testService("a"))
	tr.UpsertService(testService("b", clusterIPs("10.96.0.2")))
	tr.UpsertSlice(testSlice("a-1", "a", ep("10.0.0.1", "n1")))
	tr.UpsertSlice(testSlice("a-2", "a", ep("10.0.0.2", "n1")))
	tr.Snapshot()

	tr.DeleteSlice(testSlice("a-1", "a"))
	st, ch := tr.Snapshot()
	expectEq(t, "changed", fmt.Sprint(changedKeys(ch)), "[default/a:http/TCP/v4]")
	expectEq(t, "eps", eps(st.Ports[httpV4("a")].ClusterEndpoints), "10.0.0.2:8080")
	expectEq(t, "endpoint changes", ch.EndpointChanges, 1)

	tr.DeleteSlice(testSlice("a-2", "a"))
	st, _ = tr.Snapshot()
	expectEq(t, "verdict", st.Ports[httpV4("a")].InternalEmpty, VerdictReject)

	tr.DeleteService(testService("b"))
	st, ch = tr.Snapshot()
	expectEq(t, "removed", fmt.Sprint(changedKeys(ch)), "[default/b:http/TCP/v4]")
	if _, ok := st.Ports[httpV4("b")]; ok {
		t.Fatal("deleted Service still present")
	}
	expectEq(t, "ports", len(st.Ports), 1)

	// Deleting something unknown is harmless.
	tr.DeleteService(testService("nope"))
	tr.DeleteSlice(testSlice("nope-1", "nope"))
	tr.UpsertService(nil)
	tr.UpsertSlice(nil)
	tr.DeleteService(nil)
	tr.DeleteSlice(nil)
	tr.SetNode(nil)
	_, ch = tr.Snapshot()
	expectEq(t, "no port changes", len(ch.Ports), 0)
}

func TestTrackerStaleUDP(t *testing.T) {
	tr := newTestTracker(t)
	dns := testService("dns", clusterIPs("10.96.0.1"), svcPorts(sport("dns", v1.ProtocolUDP, 53), sport("tcp", v1.ProtocolTCP, 53)), nodePort(30053))
	tr.UpsertService(dns)
	slice := func(eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return withSlicePorts(testSlice("dns-1", "dns", eps...), eport("dns", v1.ProtocolUDP, 5353), eport("tcp", v1.ProtocolTCP, 5353))
	}
	tr.UpsertSlice(slice(ep("10.0.0.1", "n1"), ep("10.0.0.2", "n2"), ep("10.0.0.3", "n2")))
	_, ch := tr.Snapshot()
	expectEq(t, "no stale on first", len(ch.StaleUDP), 0)

	// 10.0.0.2 goes away, 10.0.0.3 becomes not ready: both are stale for UDP only.
	tr.UpsertSlice(slice(ep("10.0.0.1", "n1"), ep("10.0.0.3", "n2", notReady)))
	_, ch = tr.Snapshot()
	if len(ch.StaleUDP) != 2 {
		t.Fatalf("stale %+v", ch.StaleUDP)
	}
	s := ch.StaleUDP[0]
	expectEq(t, "key", s.Key, key("dns", "dns", v1.ProtocolUDP, v1.IPv4Protocol))
	expectEq(t, "endpoint", s.Endpoint.String(), "10.0.0.2:5353")
	expectEq(t, "second", ch.StaleUDP[1].Endpoint.String(), "10.0.0.3:5353")
	expectEq(t, "frontends", frontends(s.Frontends), "ClusterIP 10.96.0.1:53, NodePort 192.168.0.1:30053")

	// Deleting the Service makes every used endpoint stale.
	tr.DeleteService(dns)
	_, ch = tr.Snapshot()
	if len(ch.StaleUDP) != 1 || ch.StaleUDP[0].Endpoint.String() != "10.0.0.1:5353" {
		t.Fatalf("stale after delete %+v", ch.StaleUDP)
	}
}

// TestTrackerActivatedUDP: a UDP port is reported when it gets its first
// endpoints, also when it appears with them; not when it only changes
// endpoints, loses them, or is TCP.
func TestTrackerActivatedUDP(t *testing.T) {
	tr := newTestTracker(t)
	dns := testService("dns", clusterIPs("10.96.0.1"), svcPorts(sport("dns", v1.ProtocolUDP, 53), sport("tcp", v1.ProtocolTCP, 53)), nodePort(30053))
	tr.UpsertService(dns)
	slice := func(eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return withSlicePorts(testSlice("dns-1", "dns", eps...), eport("dns", v1.ProtocolUDP, 5353), eport("tcp", v1.ProtocolTCP, 5353))
	}
	udp := key("dns", "dns", v1.ProtocolUDP, v1.IPv4Protocol)
	activated := func(ch Changes) string {
		var out []string
		for _, a := range ch.ActivatedUDP {
			var eps []string
			for _, e := range a.Endpoints {
				eps = append(eps, e.String())
			}
			out = append(out, fmt.Sprintf("%s [%s] -> %s", a.Key, frontends(a.Frontends), strings.Join(eps, " ")))
		}
		return strings.Join(out, "; ")
	}
	_, ch := tr.Snapshot()
	expectEq(t, "no endpoints yet", activated(ch), "")

	tr.UpsertSlice(slice(ep("10.0.0.2", "n2"), ep("10.0.0.1", "n1"), ep("10.0.0.3", "n2", notReady)))
	_, ch = tr.Snapshot()
	expectEq(t, "first endpoints", activated(ch), udp.String()+" [ClusterIP 10.96.0.1:53, NodePort 192.168.0.1:30053] -> 10.0.0.1 10.0.0.2")

	tr.UpsertSlice(slice(ep("10.0.0.1", "n1")))
	_, ch = tr.Snapshot()
	expectEq(t, "fewer endpoints", activated(ch), "")

	tr.UpsertSlice(slice())
	_, ch = tr.Snapshot()
	expectEq(t, "no endpoints left", activated(ch), "")

	tr.UpsertSlice(slice(ep("10.0.0.4", "n2")))
	_, ch = tr.Snapshot()
	expectEq(t, "endpoints again", activated(ch), udp.String()+" [ClusterIP 10.96.0.1:53, NodePort 192.168.0.1:30053] -> 10.0.0.4")

	// A new Service that comes with endpoints: clients may have sent to its
	// ClusterIP before any rule took it.
	tr.UpsertService(testService("new", clusterIPs("10.96.0.2"), svcPorts(sport("dns", v1.ProtocolUDP, 53))))
	tr.UpsertSlice(withSlicePorts(testSlice("new-1", "new", ep("10.0.1.1", "n1")), eport("dns", v1.ProtocolUDP, 5353)))
	_, ch = tr.Snapshot()
	expectEq(t, "new Service", activated(ch), key("new", "dns", v1.ProtocolUDP, v1.IPv4Protocol).String()+" [ClusterIP 10.96.0.2:53] -> 10.0.1.1")
}

func TestTrackerForceFullAndNode(t *testing.T) {
	tr := newTestTracker(t)
	tr.UpsertService(testService("a", itpLocal()))
	tr.UpsertSlice(testSlice("a-1", "a", ep("10.0.0.1", "n1"), ep("10.0.0.2", "n2")))
	tr.Snapshot()

	tr.ForceFull()
	if !tr.Pending() {
		t.Fatal("ForceFull not pending")
	}
	st1, ch := tr.Snapshot()
	if !ch.Full || len(ch.Ports) != 0 {
		t.Fatalf("ForceFull changes %+v", ch)
	}
	_, ch = tr.Snapshot()
	expectEq(t, "full once", ch.Full, false)

	// The same Node again (a heartbeat) changes nothing.
	tr.SetNode(defaultNode())
	if tr.Pending() {
		t.Fatal("identical node made the tracker pending")
	}
	// Another node name changes which endpoints are local: full recompute.
	n2 := defaultNode()
	n2.Name = "n2"
	tr.SetNode(n2)
	st2, ch := tr.Snapshot()
	if !ch.Full {
		t.Fatal("node change not Full")
	}
	expectEq(t, "changed", fmt.Sprint(changedKeys(ch)), "[default/a:http/TCP/v4]")
	expectEq(t, "local", eps(st2.Ports[httpV4("a")].LocalEndpoints), "10.0.0.2:8080")
	expectEq(t, "old local", eps(st1.Ports[httpV4("a")].LocalEndpoints), "10.0.0.1:8080")
	expectEq(t, "node", st2.Node.Name, "n2")
}

func TestTrackerTriggerTimesAndLists(t *testing.T) {
	tr := newTestTracker(t)
	tr.UpsertService(testService("a", loadBalancer("198.51.100.1"), etpLocal(), hcPort(31000)))
	tr.UpsertService(testService("h", clusterIPs("None")))
	s := testSlice("a-1", "a", ep("10.0.0.1", "n1"), ep("bad", "n1"))
	when := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s.Annotations = map[string]string{AnnotationTriggerTime: when.Format(time.RFC3339)}
	tr.UpsertSlice(s)
	orphan := testSlice("o-1", "", ep("10.0.0.9", "n1"))
	tr.UpsertSlice(orphan)
	st, ch := tr.Snapshot()
	if len(ch.TriggerTimes) != 1 || !ch.TriggerTimes[0].Equal(when) {
		t.Fatalf("trigger times %v", ch.TriggerTimes)
	}
	expectEq(t, "problems", problemFields(st.Problems), `EndpointSlice default/a-1 endpoints[1].addresses[0]; EndpointSlice default/o-1 metadata.labels["kubernetes.io/service-name"]`)
	expectEq(t, "health", fmt.Sprint(st.HealthChecks), "[{default/a 31000 1}]")
	expectEq(t, "ignored", len(st.Ignored), 1)

	// Fixing the slices clears their problems; the health count follows.
	s2 := testSlice("a-1", "a", ep("10.0.0.1", "n1"), ep("10.0.0.3", "n1"))
	tr.UpsertSlice(s2)
	orphan.Labels[discovery.LabelServiceName] = "a"
	tr.UpsertSlice(orphan)
	st, ch = tr.Snapshot()
	expectEq(t, "no trigger", len(ch.TriggerTimes), 0)
	expectEq(t, "problems", len(st.Problems), 0)
	expectEq(t, "health", fmt.Sprint(st.HealthChecks), "[{default/a 31000 3}]")
	expectEq(t, "eps", eps(st.Ports[httpV4("a")].LocalEndpoints), "10.0.0.1:8080 10.0.0.3:8080 10.0.0.9:8080")

	// Moving a slice to another Service updates both.
	tr.UpsertService(testService("b", clusterIPs("10.96.0.2")))
	orphan.Labels[discovery.LabelServiceName] = "b"
	tr.UpsertSlice(orphan)
	st, ch = tr.Snapshot()
	expectEq(t, "changed", fmt.Sprint(changedKeys(ch)), "[default/a:http/TCP/v4 default/b:http/TCP/v4]")
	expectEq(t, "b", eps(st.Ports[httpV4("b")].ClusterEndpoints), "10.0.0.9:8080")

	// Un-ignoring the headless Service.
	tr.UpsertService(testService("h", clusterIPs("10.96.0.3")))
	st, _ = tr.Snapshot()
	expectEq(t, "ignored", len(st.Ignored), 0)
	mustPort(t, st, httpV4("h"))
}

// TestTrackerConcurrent runs informer-like writers against a snapshotting
// reader; run with -race to check the locking.
func TestTrackerConcurrent(t *testing.T) {
	tr := newTestTracker(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				name := fmt.Sprintf("s%d-%d", w, i%10)
				tr.UpsertService(testService(name, clusterIPs(fmt.Sprintf("10.96.%d.%d", w, i%10+1))))
				tr.UpsertSlice(testSlice(name+"-1", name, ep(fmt.Sprintf("10.%d.0.%d", w, i%200+1), "n1")))
				if i%7 == 0 {
					tr.DeleteSlice(testSlice(name+"-1", name))
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			tr.Pending()
			tr.Snapshot()
		}
	}()
	wg.Wait()
	<-done
	st, _ := tr.Snapshot()
	expectEq(t, "ports", len(st.Ports), 40)
	// The incremental result equals a fresh computation of the same objects.
	var services []*v1.Service
	var sl []*discovery.EndpointSlice
	for k, s := range tr.services {
		services = append(services, s)
		sl = append(sl, tr.slicesBySvc[k]...)
	}
	assertSameState(t, mustCompute(t, Options{}, defaultNode(), services, sl), st)
}

func TestSortedPorts(t *testing.T) {
	st := mustCompute(t, Options{}, defaultNode(), svcs(testService("b"), testService("a", svcPorts(sport("z", v1.ProtocolUDP, 1), sport("z", v1.ProtocolTCP, 1)))), nil)
	var got []string
	for _, p := range st.SortedPorts() {
		got = append(got, p.Key.String())
	}
	if !slices.Equal(got, []string{"default/a:z/TCP/v4", "default/a:z/UDP/v4", "default/b:http/TCP/v4"}) {
		t.Fatalf("order %v", got)
	}
}

// TestTrackerStatesStayIntact: every Snapshot equals Compute of the objects
// at that moment, and a NodeState returned earlier still reads the same after
// later Snapshots changed, added and removed ports (a NodeState is never
// modified, so readers need no coordination with the sync loop).
func TestTrackerStatesStayIntact(t *testing.T) {
	tr := newTestTracker(t)
	var services []*v1.Service
	for i := range 5 {
		s := testService(fmt.Sprintf("s%d", i), clusterIPs(fmt.Sprintf("10.96.0.%d", i+1)))
		services = append(services, s)
		tr.UpsertService(s)
	}
	slicesNow := map[string]*discovery.EndpointSlice{}
	set := func(svc string, eps ...discovery.Endpoint) {
		s := testSlice(svc+"-1", svc, eps...)
		slicesNow[svc] = s
		tr.UpsertSlice(s)
	}
	set("s0", ep("10.0.0.1", "n1"))
	steps := []func(){
		func() {},
		func() { set("s1", ep("10.0.1.1", "n1")) },
		func() { set("s0", ep("10.0.0.2", "n1")) },
		func() {},
		func() { tr.DeleteService(services[2]); services[2] = nil },
		func() { set("s3", ep("10.0.3.1", "n2")); set("s1") },
		func() { set("s4", ep("10.0.4.1", "n1")) },
	}
	var kept []*NodeState
	var seen []string
	for _, step := range steps {
		step()
		st, _ := tr.Snapshot()
		var sl []*discovery.EndpointSlice
		for _, s := range slicesNow {
			sl = append(sl, s)
		}
		var live []*v1.Service
		for _, s := range services {
			if s != nil {
				live = append(live, s)
			}
		}
		assertSameState(t, mustCompute(t, Options{}, defaultNode(), live, sl), st)
		j, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		kept, seen = append(kept, st), append(seen, string(j))
	}
	for i, st := range kept {
		if j, _ := json.Marshal(st); string(j) != seen[i] {
			t.Errorf("state %d changed after later snapshots:\n now %s\nthen %s", i, j, seen[i])
		}
	}
}

// TestComputeOrderIndependent: the same objects in any order give the same state.
func TestComputeOrderIndependent(t *testing.T) {
	services, sl := benchObjects(50, 4)
	services = append(services, testService("lb", clusterIPs("10.96.9.1", "fd00:96::9"), loadBalancer("198.51.100.1", "2001:db8::1"), etpLocal(), hcPort(31000)),
		testService("bad", clusterIPs("x")), testService("hl", clusterIPs("None")))
	sl = append(sl, testSlice("lb-b", "lb", ep("10.0.0.2", "n1")), testSlice("lb-a", "lb", ep("10.0.0.2", "n1", termServing), ep("bad", "n2")),
		v6(testSlice("lb-6", "lb", ep("fd00::9", "n1"))), testSlice("orphan", "", ep("10.0.0.3", "n1")))
	opts := Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}}
	want := mustCompute(t, opts, defaultNode(), services, sl)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5 {
		rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		rng.Shuffle(len(sl), func(i, j int) { sl[i], sl[j] = sl[j], sl[i] })
		assertSameState(t, want, mustCompute(t, opts, defaultNode(), services, sl))
	}
}

// TestTrackerFrontendClaims: a Service that takes an address:port another
// Service has gets no frontend there, and gets it once the other lets go; the
// other Service's port does not change meanwhile.
func TestTrackerFrontendClaims(t *testing.T) {
	tr := newTestTracker(t)
	old := testService("old", clusterIPs("10.96.0.1"), externalIPs("203.0.113.9"), created(1))
	nu := testService("new", clusterIPs("10.96.0.2"), externalIPs("203.0.113.9"), created(2))
	live := map[string]*v1.Service{"old": old}
	step := func(what string, wantChanged ...PortKey) *NodeState {
		t.Helper()
		st, ch := tr.Snapshot()
		var list []*v1.Service
		for _, s := range live {
			list = append(list, s)
		}
		assertSameState(t, mustCompute(t, Options{}, defaultNode(), list, nil), st)
		var got []PortKey
		for k := range ch.Ports {
			got = append(got, k)
		}
		slices.SortFunc(got, comparePortKey)
		if !slices.Equal(got, wantChanged) {
			t.Fatalf("%s: changed %v, want %v", what, got, wantChanged)
		}
		return st
	}
	tr.UpsertService(old)
	step("old alone", httpV4("old"))
	tr.UpsertService(nu)
	live["new"] = nu
	st := step("new arrives", httpV4("new"))
	expectEq(t, "new", frontends(mustPort(t, st, httpV4("new")).Frontends), "ClusterIP 10.96.0.2:80")
	tr.DeleteService(old)
	delete(live, "old")
	st = step("old leaves", httpV4("new"), httpV4("old"))
	expectEq(t, "new", frontends(mustPort(t, st, httpV4("new")).Frontends), "ClusterIP 10.96.0.2:80, ExternalIP 203.0.113.9:80")
	if len(st.Problems) != 0 {
		t.Fatalf("problems left: %v", st.Problems)
	}
}
