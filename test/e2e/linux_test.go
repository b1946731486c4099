//go:build e2e && linux

package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func hostPort(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }

// TestLinuxDataPlane runs every Service behaviour against one lab: the real
// crossproxy binary in standalone mode, following a manifest file the test
// rewrites, with traffic from pods, the node's neighbours and itself.
func TestLinuxDataPlane(t *testing.T) {
	l := newLab(t)
	c1, ext := l.ns("c1"), l.ns("ext")
	local := []ep{{pod: "b1"}, {pod: "b2"}, {pod: "b3"}}
	l.setService(svc{name: "web", clusterIPs: []string{"10.96.0.10", "fd00:96::10"}, typ: v1.ServiceTypeNodePort,
		ports: []svcPort{{name: "http", port: 80, nodePort: 30080}, {name: "dns", port: 53, nodePort: 30053, proto: v1.ProtocolUDP}}}, local)
	l.setService(svc{name: "ext", clusterIPs: []string{"10.96.0.20"}, externalIPs: []string{"203.0.113.10"},
		ports: []svcPort{{name: "http", port: 80}}}, []ep{{pod: "b1"}})
	l.setService(svc{name: "lb", clusterIPs: []string{"10.96.0.30"}, typ: v1.ServiceTypeLoadBalancer, lbIPs: []string{"198.51.100.10"},
		sourceRanges: []string{extV4 + "/32"}, ports: []svcPort{{name: "http", port: 80, nodePort: 30081}}}, []ep{{pod: "b2"}})
	l.setService(svc{name: "local", clusterIPs: []string{"10.96.0.40"}, typ: v1.ServiceTypeNodePort, etpLocal: true,
		ports: []svcPort{{name: "http", port: 80, nodePort: 30040}}}, []ep{{pod: "b3"}, {pod: "b4", node: "node-b"}})
	l.setService(svc{name: "remote", clusterIPs: []string{"10.96.0.50"}, typ: v1.ServiceTypeNodePort, etpLocal: true,
		ports: []svcPort{{name: "http", port: 80, nodePort: 30050}}}, []ep{{pod: "b4", node: "node-b"}})
	l.setService(svc{name: "empty", clusterIPs: []string{"10.96.0.60"},
		ports: []svcPort{{name: "http", port: 80}, {name: "dns", port: 53, proto: v1.ProtocolUDP}}}, nil)
	l.setService(svc{name: "aff", clusterIPs: []string{"10.96.0.70"}, affinity: 2,
		ports: []svcPort{{name: "http", port: 80}}}, []ep{{pod: "b1"}, {pod: "b2"}, {pod: "b3"}, {pod: "b4"}})
	l.setService(svc{name: "hair", clusterIPs: []string{"10.96.0.80"}, ports: []svcPort{{name: "http", port: 80}}}, []ep{{pod: "b1"}})
	l.setService(svc{name: "v6only", clusterIPs: []string{"fd00:96::90"}, ports: []svcPort{{name: "http", port: 80}}}, []ep{{pod: "b2"}})
	l.setService(svc{name: "term", clusterIPs: []string{"10.96.0.100"}, ports: []svcPort{{name: "http", port: 80}}},
		[]ep{{pod: "b1", state: "notready"}, {pod: "b2", state: "terminating"}})
	l.setService(svc{name: "tports", clusterIPs: []string{"10.96.0.110"}, ports: []svcPort{{name: "http", port: 80}}},
		[]ep{{pod: "b1"}, {pod: "b2", port: echoPort + 1}})
	l.setService(svc{name: "zonal", clusterIPs: []string{"10.96.0.120"}, ports: []svcPort{{name: "http", port: 80}}},
		[]ep{{pod: "b1", zone: nodeZone}, {pod: "b2", zone: "zone-b", node: "node-b"}, {pod: "b3", zone: nodeZone}})
	l.flush()
	l.waitNFT("10.96.0.80", true)
	l.waitNFT("10.96.0.120", true)

	t.Run("Sysctls", func(t *testing.T) {
		for _, s := range []string{"net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"} {
			out, err := exec.Command("ip", "netns", "exec", l.ns("node"), "sysctl", "-n", s).Output()
			if err != nil || strings.TrimSpace(string(out)) != "1" {
				t.Errorf("%s = %q (%v), crossproxy should have set it to 1", s, out, err)
			}
		}
	})

	t.Run("ClusterIP", func(t *testing.T) {
		for _, dst := range []string{"10.96.0.10", "fd00:96::10"} {
			r, err := tcp(c1, "", hostPort(dst, 80), 2*time.Second)
			if err != nil {
				t.Fatalf("tcp %s: %v", dst, err)
			}
			want := clientV4
			if strings.Contains(dst, ":") {
				want = clientV6
			}
			if r.Source != want {
				t.Errorf("tcp %s: server saw %s, want the pod's own address %s (no masquerade inside the cluster)", dst, r.Source, want)
			}
			u, err := udpOnce(c1, hostPort(dst, 53), 2*time.Second)
			if err != nil || !strings.HasPrefix(u.Backend, "b") {
				t.Errorf("udp %s: %+v %v", dst, u, err)
			}
		}
	})

	t.Run("IPv6OnlyService", func(t *testing.T) {
		r, err := tcp(c1, "", hostPort("fd00:96::90", 80), 2*time.Second)
		if err != nil || r.Backend != "b2" {
			t.Fatalf("v6-only service: %+v %v", r, err)
		}
	})

	t.Run("Distribution", func(t *testing.T) {
		counts := map[string]int{}
		for i := 0; i < 90; i++ {
			r, err := tcp(c1, "", hostPort("10.96.0.10", 80), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			counts[r.Backend]++
		}
		for _, b := range []string{"b1", "b2", "b3"} {
			if counts[b] < 12 {
				t.Errorf("endpoint %s got %d of 90 connections: %v", b, counts[b], counts)
			}
		}
	})

	// reached makes n connections to dst from the client pod and counts the
	// answering endpoints.
	reached := func(t *testing.T, dst string, n int) map[string]int {
		t.Helper()
		counts := map[string]int{}
		for i := 0; i < n; i++ {
			r, err := tcp(c1, "", dst, 2*time.Second)
			if err != nil {
				t.Fatalf("tcp %s: %v", dst, err)
			}
			counts[r.Backend]++
		}
		return counts
	}

	t.Run("TerminatingFallback", func(t *testing.T) {
		// No endpoint is ready: the serving, terminating one takes the
		// traffic; the one that is not serving gets none.
		if got := reached(t, hostPort("10.96.0.100", 80), 20); got["b2"] != 20 {
			t.Errorf("want all 20 connections on the serving-terminating b2, got %v", got)
		}
	})

	t.Run("TargetPortPerEndpoint", func(t *testing.T) {
		// One Service port, endpoints on different target ports (two slices):
		// each endpoint is reached on its own port.
		got := reached(t, hostPort("10.96.0.110", 80), 40)
		want2 := fmt.Sprintf("b2@%d", echoPort+1)
		if got["b1"] == 0 || got[want2] == 0 || len(got) != 2 {
			t.Errorf("want b1 on %d and %s, got %v", echoPort, want2, got)
		}
	})

	t.Run("TopologyHints", func(t *testing.T) {
		// Every ready endpoint has a zone hint and some are for this node's
		// zone: only those are used.
		got := reached(t, hostPort("10.96.0.120", 80), 40)
		if got["b2"] != 0 || got["b1"] == 0 || got["b3"] == 0 {
			t.Errorf("want only the zone-a endpoints b1 and b3, got %v", got)
		}
	})

	t.Run("NodePortMasqueraded", func(t *testing.T) {
		for dst, src := range map[string]string{hostPort(nodeV4, 30080): bridgeV4, hostPort(nodeV6, 30080): "fd00:244::1"} {
			r, err := tcp(ext, "", dst, 2*time.Second)
			if err != nil {
				t.Fatalf("NodePort %s: %v", dst, err)
			}
			if r.Source != src {
				t.Errorf("NodePort %s: server saw %s, want the node's address %s (masqueraded)", dst, r.Source, src)
			}
		}
		if u, err := udpOnce(ext, hostPort(nodeV4, 30053), 2*time.Second); err != nil {
			t.Errorf("UDP NodePort: %+v %v", u, err)
		}
	})

	t.Run("ClusterIPFromOutsideIsMasqueraded", func(t *testing.T) {
		r, err := tcp(ext, "", hostPort("10.96.0.10", 80), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.Source != bridgeV4 {
			t.Errorf("ClusterIP from outside the cluster: server saw %s, want the node's address %s", r.Source, bridgeV4)
		}
	})

	t.Run("FromTheNodeItself", func(t *testing.T) {
		for _, dst := range []string{hostPort("10.96.0.10", 80), hostPort("127.0.0.1", 30080), hostPort(nodeV4, 30080)} {
			if r, err := tcp(l.ns("node"), "", dst, 2*time.Second); err != nil || !strings.HasPrefix(r.Backend, "b") {
				t.Errorf("node process to %s: %+v %v", dst, r, err)
			}
		}
		out, err := exec.Command("ip", "netns", "exec", l.ns("node"), "sysctl", "-n", "net.ipv4.conf.all.route_localnet").Output()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("route_localnet = %q (%v), --localhost-nodeports needs 1", out, err)
		}
	})

	// throughLoopback routes the outside client's packets for 127.0.0.1 to
	// the node, as an attacker on the node's network would (CVE-2020-8558:
	// route_localnet, which localhost NodePorts need, lets the node accept
	// them), with a server bound to every address of the node, loopback too.
	l.startEcho("node")
	throughLoopback := func(t *testing.T) (reply, error) {
		t.Helper()
		run(t, "ip", "netns", "exec", ext, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=1")
		run(t, "ip", "-n", ext, "route", "del", "local", "127.0.0.1", "dev", "lo", "table", "local")
		run(t, "ip", "-n", ext, "route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
		run(t, "ip", "-n", ext, "route", "add", "127.0.0.1/32", "via", nodeV4)
		defer func() {
			run(t, "ip", "-n", ext, "route", "del", "127.0.0.1/32", "via", nodeV4)
			run(t, "ip", "-n", ext, "route", "add", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
			run(t, "ip", "-n", ext, "route", "add", "local", "127.0.0.1", "dev", "lo", "table", "local")
			run(t, "ip", "netns", "exec", ext, "sysctl", "-qw", "net.ipv4.conf.all.route_localnet=0")
		}()
		return tcp(ext, "", hostPort("127.0.0.1", echoPort), time.Second)
	}

	t.Run("LoopbackUnreachableFromOutside", func(t *testing.T) {
		if r, err := tcp(ext, "", hostPort(nodeV4, echoPort), 2*time.Second); err != nil || r.Backend != "node" {
			t.Fatalf("the node's server on its own address: %+v %v", r, err)
		}
		if r, err := throughLoopback(t); err == nil {
			t.Errorf("another host reached a server on the node's 127.0.0.1: %+v", r)
		} else if !isTimeout(err) {
			t.Errorf("want the packets dropped (a timeout), got %v", err)
		}
		// nft 1.0 prints "ct state ! established,related ct status ! dnat",
		// 0.9 "ct state & (established | related) == 0x0 ...".
		if !strings.Contains(l.nft(), `iifname != "lo" ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 ct state `) {
			t.Errorf("no localhost guard in the ruleset:\n%s", l.nft())
		}
	})

	t.Run("NodePortOnlyOnSelectedAddresses", func(t *testing.T) {
		// The bridge address is not in --nodeport-addresses: nothing answers there.
		if r, err := tcp(c1, "", hostPort(bridgeV4, 30080), time.Second); err == nil {
			t.Errorf("NodePort answered on an unselected address: %+v", r)
		}
	})

	t.Run("ExternalIP", func(t *testing.T) {
		r, err := tcp(ext, "", hostPort("203.0.113.10", 80), 2*time.Second)
		if err != nil || r.Backend != "b1" {
			t.Fatalf("external IP: %+v %v", r, err)
		}
	})

	t.Run("LoadBalancerSourceRanges", func(t *testing.T) {
		r, err := tcp(ext, extV4, hostPort("198.51.100.10", 80), 2*time.Second)
		if err != nil || r.Backend != "b2" {
			t.Fatalf("allowed source: %+v %v", r, err)
		}
		_, err = tcp(ext, extV4Other, hostPort("198.51.100.10", 80), time.Second)
		if !isTimeout(err) {
			t.Errorf("source outside loadBalancerSourceRanges: want a timeout (drop), got %v", err)
		}
	})

	t.Run("ExternalTrafficPolicyLocal", func(t *testing.T) {
		for i := 0; i < 10; i++ {
			r, err := tcp(ext, "", hostPort(nodeV4, 30040), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.Backend != "b3" {
				t.Errorf("Local policy reached %s, want only the local endpoint b3", r.Backend)
			}
			if r.Source != extV4 {
				t.Errorf("Local policy: server saw %s, want the client's own address %s", r.Source, extV4)
			}
		}
	})

	t.Run("LocalWithoutLocalEndpointDrops", func(t *testing.T) {
		start := time.Now()
		_, err := tcp(ext, "", hostPort(nodeV4, 30050), time.Second)
		if !isTimeout(err) {
			t.Errorf("Local policy without a local endpoint: want a timeout (drop), got %v after %v", err, time.Since(start))
		}
		// Pods still reach it through the ClusterIP (cluster-wide endpoints).
		if r, err := tcp(c1, "", hostPort("10.96.0.50", 80), 2*time.Second); err != nil || r.Backend != "b4" {
			t.Errorf("ClusterIP of a Local-policy Service: %+v %v", r, err)
		}
	})

	t.Run("NoEndpointsRejects", func(t *testing.T) {
		start := time.Now()
		_, err := tcp(c1, "", hostPort("10.96.0.60", 80), 3*time.Second)
		if !isRefused(err) || time.Since(start) > time.Second {
			t.Errorf("TCP to a Service without endpoints: want an immediate refusal, got %v after %v", err, time.Since(start))
		}
		_, err = udpOnce(c1, hostPort("10.96.0.60", 53), 3*time.Second)
		if !isRefused(err) {
			t.Errorf("UDP to a Service without endpoints: want port unreachable, got %v", err)
		}
	})

	t.Run("UnusedClusterIPPortRejects", func(t *testing.T) {
		start := time.Now()
		_, err := tcp(c1, "", hostPort("10.96.0.10", 81), 3*time.Second)
		if !isRefused(err) || time.Since(start) > time.Second {
			t.Errorf("unused ClusterIP port: want an immediate refusal, got %v after %v", err, time.Since(start))
		}
	})

	t.Run("Hairpin", func(t *testing.T) {
		r, err := tcp(l.ns("b1"), "", hostPort("10.96.0.80", 80), 2*time.Second)
		if err != nil || r.Backend != "b1" {
			t.Fatalf("pod reaching itself through its Service: %+v %v", r, err)
		}
		if r.Source != bridgeV4 {
			t.Errorf("hairpin: server saw %s, want the node's address %s (masqueraded so the reply returns through the node)", r.Source, bridgeV4)
		}
	})

	t.Run("SessionAffinity", func(t *testing.T) {
		first, err := tcp(c1, "", hostPort("10.96.0.70", 80), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 15; i++ {
			r, err := tcp(c1, "", hostPort("10.96.0.70", 80), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.Backend != first.Backend {
				t.Fatalf("affinity broken: connection %d went to %s, first to %s", i, r.Backend, first.Backend)
			}
		}
		// After the 2 s timeout a new choice is made; with 4 endpoints it
		// differs from the old one within a few tries.
		prev := first.Backend
		for try := 0; try < 6; try++ {
			time.Sleep(2600 * time.Millisecond)
			r, err := tcp(c1, "", hostPort("10.96.0.70", 80), 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.Backend != prev {
				return
			}
		}
		t.Errorf("affinity never expired: every connection after the timeout went to %s", prev)
	})

	t.Run("UDPFirstEndpoint", func(t *testing.T) { testUDPFirstEndpoint(t, l) })

	t.Run("EndpointRemovedDuringTraffic", func(t *testing.T) {
		l.setService(svc{name: "move", clusterIPs: []string{"10.96.1.10"},
			ports: []svcPort{{name: "dns", port: 53, proto: v1.ProtocolUDP}, {name: "http", port: 80}}}, []ep{{pod: "b1"}, {pod: "b2"}})
		l.flush()
		l.waitNFT("10.96.1.10", true)
		u, err := dialUDP(c1, hostPort("10.96.1.10", 53))
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		var first reply
		eventually(t, "first UDP reply", func() error { first, err = u.ask(time.Second); return err })
		for i := 0; i < 5; i++ {
			r, err := u.ask(time.Second)
			if err != nil || r.Backend != first.Backend {
				t.Fatalf("same UDP flow changed endpoint before any change: %+v %v", r, err)
			}
		}
		keep := "b1"
		if first.Backend == "b1" {
			keep = "b2"
		}
		l.setService(svc{name: "move", clusterIPs: []string{"10.96.1.10"},
			ports: []svcPort{{name: "dns", port: 53, proto: v1.ProtocolUDP}, {name: "http", port: 80}}}, []ep{{pod: keep}})
		l.flush()
		// The removed endpoint's server still runs: only a cleared conntrack
		// entry moves this flow (same source port) to the remaining endpoint.
		eventually(t, "UDP flow moves to the remaining endpoint", func() error {
			r, err := u.ask(500 * time.Millisecond)
			if err != nil {
				return err
			}
			if r.Backend != keep {
				return fmt.Errorf("still answered by %s", r.Backend)
			}
			return nil
		})
		for i := 0; i < 20; i++ {
			r, err := tcp(c1, "", hostPort("10.96.1.10", 80), 2*time.Second)
			if err != nil || r.Backend != keep {
				t.Fatalf("new connection after removal: %+v %v (want %s)", r, err, keep)
			}
		}
	})

	t.Run("StableServiceWhileThousandChange", func(t *testing.T) {
		l.setService(svc{name: "stable", clusterIPs: []string{"10.96.2.10"}, ports: []svcPort{{name: "http", port: 80}}},
			[]ep{{pod: "b1"}, {pod: "b2"}})
		l.flush()
		l.waitNFT("10.96.2.10", true)
		var ok, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := tcp(c1, "", hostPort("10.96.2.10", 80), 2*time.Second); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					} else {
						ok.Add(1)
					}
				}
			}()
		}
		churn := func(round int) {
			l.mu.Lock()
			for i := 0; i < 1000; i++ {
				eps := []ep{{pod: "b3"}, {pod: "b4"}}
				if (i+round)%2 == 1 {
					eps = []ep{{pod: "b4"}}
				}
				l.putService(svc{name: fmt.Sprintf("churn-%d", i), clusterIPs: []string{fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)},
					ports: []svcPort{{name: "http", port: 80 + int32(round%2)}}}, eps)
			}
			l.mu.Unlock()
			l.flush()
		}
		for round := 0; round < 3; round++ {
			churn(round)
			l.waitNFT(fmt.Sprintf("10.97.3.250 . tcp . %d", 80+round%2), true)
		}
		for i := 0; i < 1000; i++ {
			l.deleteService(fmt.Sprintf("churn-%d", i))
		}
		l.flush()
		l.waitNFT("10.97.3.250", false)
		close(stop)
		wg.Wait()
		t.Logf("stable Service: %d connections succeeded, %d failed while 1,000 Services were added, changed twice and removed", ok.Load(), failed.Load())
		if failed.Load() != 0 {
			t.Errorf("%d connections to the stable Service failed; first: %v", failed.Load(), firstErr.Load())
		}
		if ok.Load() < 20 {
			t.Errorf("only %d connections made", ok.Load())
		}
	})

	t.Run("ExplainReadsTheKernel", func(t *testing.T) {
		// An open UDP flow shows up as a live connection.
		u, err := dialUDP(c1, hostPort("10.96.0.10", 53))
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if _, err := u.ask(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"default/web", "default/lb", "default/local", "default/remote", "default/aff"} {
			out, err := exec.Command("ip", "netns", "exec", l.ns("node"), l.bin, "explain", name,
				"--manifests", filepath.Join(l.dir, "manifests"), "--node", nodeName,
				"--cluster-cidr", "10.244.0.0/16,fd00:244::/56", "--ip-families", "IPv4,IPv6",
				"--nodeport-addresses", "192.168.50.0/24,fd00:50::/64").CombinedOutput()
			if err != nil {
				t.Errorf("explain %s: the programmed rules read back from the kernel differ from the computed state (%v):\n%s", name, err, out)
				continue
			}
			if name == "default/web" && !strings.Contains(string(out), clientV4) {
				t.Errorf("explain %s does not list the live UDP flow from %s:\n%s", name, clientV4, out)
			}
		}
	})

	t.Run("TableDeletedFromOutsideIsRepaired", func(t *testing.T) {
		run(t, "ip", "netns", "exec", l.ns("node"), "nft", "flush", "ruleset")
		eventually(t, "the periodic full sync rebuilds the table", func() error {
			_, err := tcp(c1, "", hostPort("10.96.0.10", 80), time.Second)
			return err
		})
	})

	t.Run("Cleanup", func(t *testing.T) {
		l.stopProxy()
		// The guard is what kept 127.0.0.1 closed: without it (and the
		// proxy that would restore it) the outside client gets in.
		run(t, "ip", "netns", "exec", l.ns("node"), "nft", "delete", "chain", "inet", "crossproxy", "filter-input-localnet")
		if r, err := throughLoopback(t); err != nil || r.Backend != "node" {
			t.Errorf("without the guard the outside client should reach 127.0.0.1 (route_localnet is on): %+v %v", r, err)
		}
		run(t, l.bin, "cleanup", "--netns", "/run/netns/"+l.ns("node"))
		out, err := exec.Command("ip", "netns", "exec", l.ns("node"), "nft", "list", "ruleset").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("after cleanup the node still has rules: %s %v", out, err)
		}
	})
}
