//go:build faults && linux

package faults

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/test/harness"
)

// TestBadObjects (fault 6): Services and EndpointSlices with what the
// validation of an old or buggy API server let through reach the proxy
// through the real API server, its watch and the proxy's decoder (the ones
// today's validation refuses are written into etcd, where the API server
// serves them from as stored). Each must be rejected by the proxy with a
// message naming the object and the field, the rest of it proxied where
// there is a rest, and a good ClusterIP and NodePort Service beside them
// must keep answering throughout: a prober connects to both every 20 ms
// from before the first bad object until after the last, and none may fail.
// The same objects go to kube-proxy in the full form.
func TestBadObjects(t *testing.T) {
	for _, which := range proxies() {
		t.Run(which, func(t *testing.T) { badObjects(t, which) })
	}
}

// proxies are the proxies a fault runs against: crossproxy, and kube-proxy
// unless -short.
func proxies() []string {
	if testing.Short() {
		return []string{crossproxy}
	}
	return []string{crossproxy, kubeProxy}
}

// manyPorts is the "huge number of ports" of the bad objects: ten times the
// 100 an EndpointSlice may hold.
const manyPorts = 1000

func badObjects(t *testing.T, which string) {
	n := newNode(t, harness.Options{})
	p := n.start(which)
	good := n.service("good", nodePort)
	n.createSlice(n.slice("good", "good-1", podAddrs[0]))
	n.lab.waitBackends(t, clusterAddr(good), 30*time.Second, podAddrs[0])
	n.lab.waitBackends(t, nodePortAddr(good), 10*time.Second, podAddrs[0])
	before := n.lab.nft(t, "list", "ruleset")

	probe := n.lab.probe(20*time.Millisecond, clusterAddr(good), nodePortAddr(good))
	start := time.Now()
	ip := func(i int) string { return fmt.Sprintf("10.96.250.%d", i) }
	svc := func(name, clusterIP string, ports ...v1.ServicePort) *v1.Service {
		return &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: metav1.Now()},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
				IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, Ports: ports, SessionAffinity: v1.ServiceAffinityNone}}
	}
	port := func(name string, proto v1.Protocol, number int32) v1.ServicePort {
		return v1.ServicePort{Name: name, Protocol: proto, Port: number, TargetPort: intstr.FromInt32(8080)}
	}

	var want []expect

	// A port 0.
	store(t, n, svc("bad-port0", ip(1), port("zero", v1.ProtocolTCP, 0)))
	n.createSlice(n.slice("bad-port0", "bad-port0-1", podAddrs[1]))
	want = append(want, expect{"default/bad-port0", "spec.ports[0].port"})

	// An unknown protocol beside a good port: the good one is proxied.
	store(t, n, svc("bad-proto", ip(2), port("web", "HTTP", 81), port("ok", v1.ProtocolTCP, 80)))
	protoSlice := n.slice("bad-proto", "bad-proto-1", podAddrs[1])
	protoSlice.Ports[0].Name = ptr("ok")
	n.createSlice(protoSlice)
	want = append(want, expect{"default/bad-proto", "spec.ports[0].protocol"})

	// An endpoint of the wrong family beside a good one.
	fam := n.service("bad-family")
	wrong := n.slice("bad-family", "bad-family-1", "fd00::5", podAddrs[2])
	store(t, n, wrong)
	want = append(want, expect{"default/bad-family-1", "endpoints[0].addresses[0]"})

	// Duplicate endpoints: one address twice in a slice and again in a
	// second slice. The API server accepts them; the address is used once.
	dup := n.service("dup")
	n.createSlice(n.slice("dup", "dup-1", podAddrs[1], podAddrs[1]))
	n.createSlice(n.slice("dup", "dup-2", podAddrs[1]))

	// An ExternalName with a port: accepted by the API server, not proxied.
	n.service("extname", func(s *v1.Service) {
		s.Spec.Type, s.Spec.ExternalName = v1.ServiceTypeExternalName, "db.example.com"
	})

	// A huge number of ports, on the Service and on its slice (the API
	// allows at most 100 on a slice).
	var many []v1.ServicePort
	var slicePorts []discovery.EndpointPort
	for i := 1; i <= manyPorts; i++ {
		many = append(many, port(fmt.Sprintf("p%d", i), v1.ProtocolTCP, int32(1000+i)))
		num, proto, name := int32(8080), v1.ProtocolTCP, fmt.Sprintf("p%d", i)
		slicePorts = append(slicePorts, discovery.EndpointPort{Name: &name, Port: &num, Protocol: &proto})
	}
	store(t, n, svc("many-ports", ip(3), many...))
	manySlice := n.slice("many-ports", "many-ports-1", podAddrs[1])
	manySlice.Ports = slicePorts
	store(t, n, manySlice)

	// Every bad object is in; the proxy has had time to see them all.
	p.waitMetric(t, "kubeproxy_sync_proxy_rules_duration_seconds_count", 1, 10*time.Second)
	time.Sleep(5 * time.Second)
	p.alive(t, "after the bad objects")

	// What is left of each is proxied; kube-proxy's outcome is recorded,
	// crossproxy's must be this.
	manyFirst, manyLast := net.JoinHostPort(ip(3), "1001"), net.JoinHostPort(ip(3), fmt.Sprint(1000+manyPorts))
	var left []string
	for _, c := range []struct {
		what, addr, pod string
	}{
		{"bad-proto's good port", net.JoinHostPort(ip(2), "80"), podAddrs[1]},
		{"bad-family's good endpoint", clusterAddr(fam), podAddrs[2]},
		{"dup", clusterAddr(dup), podAddrs[1]},
		{"many-ports' first port", manyFirst, podAddrs[1]},
		{"many-ports' last port", manyLast, podAddrs[1]},
	} {
		_, err := n.lab.reach(c.addr, 10*time.Second, c.pod)
		if err != nil {
			left = append(left, c.what+" not proxied")
			if which == crossproxy {
				t.Errorf("%s: %v", c.what, err)
			}
		}
	}
	if _, err := n.lab.backendOf(net.JoinHostPort(ip(1), "0"), 300*time.Millisecond); err == nil {
		t.Errorf("%s: port 0 of bad-port0 answered", which)
	}
	probe.stop()
	tried, failed, first := probe.window(start, time.Now(), podAddrs[0])
	figure(t, "%s bad objects: good Service ClusterIP+NodePort %d connections tried, %d failed (%s) over %v; the rest of the bad objects: %s",
		which, tried, failed, first, time.Since(start).Round(time.Second), orAll(left))
	if failed > 0 || tried < 50 {
		t.Errorf("%s: the good Service: %d of %d connections failed (first: %s)", which, failed, tried, first)
	}
	// The good Service's rules are those it had before the bad objects.
	after := n.lab.nft(t, "list", "ruleset")
	for _, s := range []string{good.Spec.ClusterIP, fmt.Sprint(good.Spec.Ports[0].NodePort)} {
		if strings.Count(before, s) != strings.Count(after, s) {
			t.Errorf("%s: the good Service's %s appears %d times in the ruleset before the bad objects, %d after", which, s, strings.Count(before, s), strings.Count(after, s))
		}
	}
	if which != crossproxy {
		// kube-proxy's messages are its own; record what it said.
		logBad(t, p, want)
		return
	}
	log := p.logText()
	for _, w := range want {
		found := false
		for _, line := range strings.Split(log, "\n") {
			found = found || (strings.Contains(line, w.object) && strings.Contains(line, w.field))
		}
		if !found {
			t.Errorf("crossproxy logged nothing naming %s and field %s", w.object, w.field)
		}
	}
	logBad(t, p, want)
	if v, ok := p.metric("crossproxy_input_problems"); !ok || v < float64(len(want)) {
		t.Errorf("crossproxy_input_problems is %v (present %v), want >= %d", v, ok, len(want))
	}
	if strings.Contains(log, "panic") {
		t.Errorf("crossproxy log mentions a panic:\n%s", tail(log, 3000))
	}
}

// expect is what a bad object must produce: its object and field named in
// the proxy's log.
type expect struct{ object, field string }

// logBad records what the proxy logged about each bad object.
func logBad(t *testing.T, p *proc, want []expect) {
	for _, w := range want {
		name := w.object[strings.IndexByte(w.object, '/')+1:]
		for _, line := range strings.Split(p.logText(), "\n") {
			if strings.Contains(line, name) && !strings.Contains(line, "\"GET ") {
				t.Logf("%s on %s: %s", p.name, w.object, tail(line, 400))
				break
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// orAll is the list, or "all proxied" when it is empty.
func orAll(left []string) string {
	if len(left) == 0 {
		return "all proxied"
	}
	return strings.Join(left, ", ")
}
