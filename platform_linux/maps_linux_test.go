package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
)

// kernelSlots reads the endpoint maps of table crossproxy back from the
// kernel: per frontend, the endpoint in each slot.
func kernelSlots(t *testing.T, b *Backend) map[netip.AddrPort]map[uint32]netip.AddrPort {
	t.Helper()
	out := map[netip.AddrPort]map[uint32]netip.AddrPort{}
	err := b.ns.withConn(func(c *nftables.Conn) error {
		var es []nftables.SetElement
		for _, m := range shared(v1.IPv4Protocol).endpoints[pathMain] {
			got, _, err := readElements(c, tableObj("crossproxy"), m.Name)
			if err != nil {
				return err
			}
			es = append(es, got...)
		}
		for _, e := range es {
			addr, _, port, _ := decodeFrontendKey(v1.IPv4Protocol, e.Key)
			fe := netip.AddrPortFrom(addr, port)
			if out[fe] == nil {
				out[fe] = map[uint32]netip.AddrPort{}
			}
			to := netip.AddrFrom4([4]byte(e.Val[:4]))
			out[fe][binary.NativeEndian.Uint32(e.Key[12:16])] = netip.AddrPortFrom(to, uint16(e.Val[4])<<8|uint16(e.Val[5]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSlotsReadBackFromKernel runs random sequences of endpoint additions
// and removals through partial syncs and reads the endpoint map back from
// the kernel after each: every frontend has its endpoints in slots 0..N-1,
// each once, and the same endpoints a full sync of that state writes.
func TestSlotsReadBackFromKernel(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	pool := endpointsN(0, 40)
	pick := func() []core.Endpoint {
		var out []core.Endpoint
		for _, e := range pool {
			if r.IntN(3) == 0 {
				out = append(out, e)
			}
		}
		return out
	}
	web, loc := pick(), pick()
	st := mappedState(t, web, loc)
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	for step := range 40 {
		// Change one port, the other or both, by a few endpoints each.
		mutate := func(eps []core.Endpoint) []core.Endpoint {
			var out []core.Endpoint
			for _, e := range eps {
				if r.IntN(5) != 0 {
					out = append(out, e)
				}
			}
			for range r.IntN(4) {
				e := pool[r.IntN(len(pool))]
				dup := false
				for _, o := range out {
					dup = dup || o == e
				}
				if !dup {
					out = append(out, e)
				}
			}
			return out
		}
		changes := core.Changes{Ports: map[core.PortKey]struct{}{}}
		if r.IntN(2) == 0 {
			web = mutate(web)
		}
		loc = mutate(loc)
		st = mappedState(t, web, loc)
		for k := range st.Ports {
			changes.Ports[k] = struct{}{}
		}
		if err := b.Sync(ctx, st, changes); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		got := kernelSlots(t, b)
		for _, fe := range []struct {
			addr netip.AddrPort
			eps  []core.Endpoint
		}{
			{netip.MustParseAddrPort("10.96.0.10:80"), web},
			{netip.MustParseAddrPort("192.168.1.10:30080"), web},
			{netip.MustParseAddrPort("10.96.0.11:53"), loc},
		} {
			slots := got[fe.addr]
			if len(slots) != len(fe.eps) {
				t.Fatalf("step %d: %v has %d slots in the kernel, want %d", step, fe.addr, len(slots), len(fe.eps))
			}
			want := map[netip.AddrPort]bool{}
			for _, e := range fe.eps {
				want[e.AddrPort()] = true
			}
			for i := range uint32(len(fe.eps)) {
				ap, ok := slots[i]
				if !ok || !want[ap] {
					t.Fatalf("step %d: %v slot %d holds %v (present %v); want each of %v once in slots 0..%d",
						step, fe.addr, i, ap, ok, fe.eps, len(fe.eps)-1)
				}
				delete(want, ap)
			}
		}
	}
}

// inNamespace runs fn on a thread in network namespace ns; the thread is
// retired afterwards, so no other goroutine ever runs in that namespace.
func inNamespace(t *testing.T, ns string, fn func() error) {
	t.Helper()
	if err := runInNamespace(ns, fn); err != nil {
		t.Fatal(err)
	}
}

// runInNamespace is inNamespace returning fn's error, for other goroutines
// than the test's.
func runInNamespace(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// vethNS is a fresh namespace with lo up and a veth d0 (10.244.0.1/16) that
// also carries the route to the ClusterIPs 10.96.0.0/12; its peer d1 has no
// address, so packets translated to other addresses leave through d0 and
// are dropped there, after conntrack has confirmed their flow.
func vethNS(t *testing.T) string {
	ns := testNS(t)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"link", "set", "d0", "up"},
		{"link", "set", "d1", "up"},
		{"addr", "add", "10.244.0.1/16", "dev", "d0"},
		{"route", "add", "10.96.0.0/12", "dev", "d0"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return ns
}

// chiSquareCritical is the value a chi-square statistic with df degrees of
// freedom exceeds with probability 1e-6 (Wilson-Hilferty): a correct pick
// fails one of this test's 25 counts about once in 40,000 runs.
func chiSquareCritical(df int) float64 {
	const z = 4.7534 // upper 1e-6 quantile of the standard normal
	d := float64(df)
	return d * math.Pow(1-2/(9*d)+z*math.Sqrt(2/(9*d)), 3)
}

// TestPickDistributionIsUniform sends real packets: for N = 1..20, 31, 32,
// 33 and 64 endpoints, thousands of UDP flows (each a new connection from its
// own source port) from the node itself to a ClusterIP; the endpoint each
// flow was translated to is read from conntrack, and the counts must pass a
// chi-square test of uniformity (and every endpoint must be used).
func TestPickDistributionIsUniform(t *testing.T) {
	ns := vethNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	counts := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 31, 32, 33, 64}
	st := &core.NodeState{Node: core.NodeInfo{Name: "n"}, Families: []v1.IPFamily{v1.IPv4Protocol},
		Ports: map[core.PortKey]*core.ServicePort{}}
	ips := map[int]netip.Addr{}
	for i, n := range counts {
		cip := netip.AddrFrom4([4]byte{10, 96, 1, byte(i + 1)})
		ips[n] = cip
		p := &core.ServicePort{Key: key("default", fmt.Sprintf("n%d", n), "", v1.ProtocolUDP, v1.IPv4Protocol),
			ClusterIP: cip, Port: 53, Protocol: v1.ProtocolUDP,
			Frontends:        []core.Frontend{{Kind: core.FrontendClusterIP, Addr: cip, Port: 53}},
			ClusterEndpoints: endpointsN(1000+100*i, n)}
		st.Ports[p.Key] = p
	}
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	for _, n := range counts {
		flows := max(2000, 100*n)
		inNamespace(t, ns, func() error {
			dst := &unix.SockaddrInet4{Port: 53, Addr: ips[n].As4()}
			for i := range flows {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				err = unix.Bind(fd, &unix.SockaddrInet4{Port: 10000 + i})
				if err == nil {
					err = unix.Sendto(fd, []byte("x"), 0, dst)
				}
				unix.Close(fd)
				if err != nil {
					return fmt.Errorf("flow %d to %v: %w", i, ips[n], err)
				}
			}
			return nil
		})
		prog, err := b.Programmed(ctx, types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("n%d", n)})
		if err != nil {
			t.Fatal(err)
		}
		per := map[netip.AddrPort]int{}
		for _, c := range prog.Connections {
			per[c.Endpoint]++
		}
		if len(prog.Connections) != flows {
			t.Fatalf("N=%d: %d connections in conntrack, sent %d flows", n, len(prog.Connections), flows)
		}
		if len(per) != n {
			t.Fatalf("N=%d: flows reached %d endpoints: %v", n, len(per), per)
		}
		want := float64(flows) / float64(n)
		chi := 0.0
		for _, c := range per {
			chi += (float64(c) - want) * (float64(c) - want) / want
		}
		if n > 1 && chi > chiSquareCritical(n-1) {
			t.Errorf("N=%d: chi-square %.1f over %d flows exceeds %.1f (df %d): not uniform: %v", n, chi, flows, chiSquareCritical(n-1), n-1, per)
		}
	}
}

// TestListedRulesetParsesAgain: `nft list ruleset` prints a node's rules
// (both layouts, both families), and the listing loads again into an empty
// namespace, all but the endpoint draws: nft has no type for a random slot,
// so the endpoint maps type it "mark", which nft will not compare with a
// numgen result it parses (the kernel does: both are 32-bit host-order
// integers). kernels.sh runs this with each Debian release's nft, where the
// listing must not fail either.
func TestListedRulesetParsesAgain(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	if err := b.Sync(context.Background(), testState(t), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	listed := nftIn(t, ns, "list", "ruleset")
	for _, want := range []string{"map endpoints-v4-2", "ip daddr . meta l4proto . th dport . numgen random mod 2 map @endpoints-v4-2", // nft 0.9.8: "dnat ip addr . port to"
		"10.96.0.10 . tcp . 80 . 0x00000001 : 10.244.2.6 . 8080", "chain svc-"} {
		if !strings.Contains(listed, want) {
			t.Fatalf("listing lacks %q:\n%s", want, listed)
		}
	}
	// nft before 1.0 (Debian 11's 0.9.8) lists the maps but cannot parse a
	// concatenated data type back ("type ... : ipv4_addr . inet_service").
	if v := nftIn(t, ns, "--version"); strings.Contains(v, " v0.") {
		t.Logf("%s: listing checked, not loaded back", strings.TrimSpace(v))
		return
	}
	var kept []string
	for _, line := range strings.Split(listed, "\n") {
		if !strings.Contains(line, "numgen random mod") || !strings.Contains(line, "map @") {
			kept = append(kept, line)
		}
	}
	path := filepath.Join(t.TempDir(), "listed.nft")
	if err := os.WriteFile(path, []byte(strings.Join(kept, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := testNS(t)
	nftIn(t, fresh, "-f", path)
	if again := nftIn(t, fresh, "list", "ruleset"); listingLines(again) != listingLines(strings.Join(kept, "\n")) {
		a, b := strings.Split(listingLines(strings.Join(kept, "\n")), "\n"), strings.Split(listingLines(again), "\n")
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				t.Fatalf("the listing loaded elsewhere lists differently: first at sorted line %d: %q, then %q", i, a[i], b[i])
			}
		}
		t.Fatalf("the listing loaded elsewhere lists differently: %d lines, then %d", len(a), len(b))
	}
}

// listingLines is an nft listing with its lines trimmed and sorted and
// every element on a line of its own: hash sets list their elements in an
// order of their own.
func listingLines(s string) string {
	s = strings.NewReplacer("elements = { ", "\n", " }\n", "\n", ",\n", "\n").Replace(s)
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestMigrationToSharedMapsLosesNoConnection: a node whose rules are in the
// layout before shared maps (every port with chains of its own) moves to the
// shared-map layout at the new backend's first full sync, in one batch. A
// connection established before keeps working, and none of the new
// connections opened all along, every few milliseconds, fails.
func TestMigrationToSharedMapsLosesNoConnection(t *testing.T) {
	ns := vethNS(t)
	// An echo server in the namespace is the endpoint of default/web; 2,000
	// other Services make the migration batch a large one.
	var ln net.Listener
	inNamespace(t, ns, func() (err error) {
		ln, err = net.Listen("tcp", "10.244.0.1:8080")
		return err
	})
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	st := scaleStateN(2000, 10)
	web := &core.ServicePort{Key: key("default", "web", "", v1.ProtocolTCP, v1.IPv4Protocol),
		ClusterIP: netip.MustParseAddr("10.96.200.1"), Port: 80, Protocol: v1.ProtocolTCP,
		Frontends:        []core.Frontend{fe(core.FrontendClusterIP, "10.96.200.1", 80)},
		ClusterEndpoints: []core.Endpoint{ep("10.244.0.1", 8080, true)}}
	st.Ports[web.Key] = web
	ctx := context.Background()
	old := newTestBackend(t, ns)
	old.cfg.ownChains = true
	if err := old.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	if got := nftIn(t, ns, "list", "ruleset"); !strings.Contains(got, "chain svc-") || strings.Contains(got, `comment "ClusterIP default/web"`) {
		t.Fatal("the old layout should have chains per port and no shared-map element")
	}

	echo := func(c net.Conn, msg string) error {
		if err := c.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
			return err
		}
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			return fmt.Errorf("echo %q, sent %q", buf, msg)
		}
		return nil
	}
	var long net.Conn
	inNamespace(t, ns, func() (err error) {
		long, err = net.DialTimeout("tcp", "10.96.200.1:80", 2*time.Second)
		return err
	})
	defer long.Close()
	if err := echo(long, "before"); err != nil {
		t.Fatal(err)
	}

	stop := make(chan struct{})
	type result struct {
		opened, failed int
		first          error
	}
	done := make(chan result)
	loop := func() error {
		var r result
		for {
			select {
			case <-stop:
				done <- r
				return nil
			default:
			}
			r.opened++
			c, err := net.DialTimeout("tcp", "10.96.200.1:80", 2*time.Second)
			if err == nil {
				err = echo(c, "new")
				c.Close()
			}
			if err != nil {
				r.failed++
				if r.first == nil {
					r.first = err
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	go func() {
		if err := runInNamespace(ns, loop); err != nil {
			<-stop
			done <- result{first: err, failed: 1}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	nu := newTestBackend(t, ns)
	if err := nu.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatalf("migrating full sync: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	r := <-done
	if r.failed > 0 || r.opened < 20 {
		t.Errorf("during the migration %d of %d new connections failed (first: %v)", r.failed, r.opened, r.first)
	}
	if err := echo(long, "after"); err != nil {
		t.Errorf("the connection established before the migration broke: %v", err)
	}
	got := nftIn(t, ns, "list", "ruleset")
	if strings.Contains(got, "chain svc-") || !strings.Contains(got, `10.96.200.1 . tcp . 80 comment "ClusterIP default/web"`) {
		t.Errorf("after the migration: want no port chains, default/web in the shared sets:\n%.2000s", got)
	}
	t.Logf("migrated 2,001 Services in one batch of %d commands (%v); %d new connections during it, none failed",
		nu.LastSync().Commands, nu.LastSync().Kernel, r.opened)
}

// TestAffinityEndpointRemovedMovesOnlyItsClients: under ClientIP affinity
// (a port with chains of its own), 30 clients each send a flow and stick to
// the endpoint they got; one endpoint is removed by a partial sync; the next
// flow of every other client goes to the same endpoint as before, and only
// the removed endpoint's clients go elsewhere.
func TestAffinityEndpointRemovedMovesOnlyItsClients(t *testing.T) {
	ns := vethNS(t)
	clients := make([]netip.Addr, 30)
	for i := range clients {
		clients[i] = netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)})
		if out, err := exec.Command("ip", "-n", ns, "addr", "add", clients[i].String()+"/32", "dev", "d0").CombinedOutput(); err != nil {
			t.Fatalf("ip addr add: %v: %s", err, out)
		}
	}
	b := newTestBackend(t, ns)
	ctx := context.Background()
	cip := netip.MustParseAddr("10.96.3.1")
	svc := &core.ServicePort{Key: key("default", "aff", "", v1.ProtocolUDP, v1.IPv4Protocol),
		ClusterIP: cip, Port: 53, Protocol: v1.ProtocolUDP,
		Frontends:        []core.Frontend{{Kind: core.FrontendClusterIP, Addr: cip, Port: 53}},
		ClusterEndpoints: endpointsN(10, 4),
		Affinity:         core.Affinity{ClientIP: true, TimeoutSeconds: 300}}
	st := &core.NodeState{Node: core.NodeInfo{Name: "n"}, Families: []v1.IPFamily{v1.IPv4Protocol},
		Ports: map[core.PortKey]*core.ServicePort{svc.Key: svc}}
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	// round sends one flow from every client, from source port port, and
	// returns the endpoint each client's flow went to.
	round := func(port int) map[netip.Addr]netip.AddrPort {
		inNamespace(t, ns, func() error {
			for _, c := range clients {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return err
				}
				err = unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: c.As4()})
				if err == nil {
					err = unix.Sendto(fd, []byte("x"), 0, &unix.SockaddrInet4{Port: 53, Addr: cip.As4()})
				}
				unix.Close(fd)
				if err != nil {
					return fmt.Errorf("client %v: %w", c, err)
				}
			}
			return nil
		})
		prog, err := b.Programmed(ctx, types.NamespacedName{Namespace: "default", Name: "aff"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[netip.Addr]netip.AddrPort{}
		for _, c := range prog.Connections {
			if int(c.Client.Port()) == port {
				out[c.Client.Addr()] = c.Endpoint
			}
		}
		if len(out) != len(clients) {
			t.Fatalf("source port %d: %d of %d clients in conntrack", port, len(out), len(clients))
		}
		return out
	}
	first := round(20000)
	if again := round(20001); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("affinity does not hold before the change:\n%v\n%v", first, again)
	}
	removed := first[clients[0]]
	p := *svc
	p.ClusterEndpoints = nil
	for _, e := range svc.ClusterEndpoints {
		if e.AddrPort() != removed {
			p.ClusterEndpoints = append(p.ClusterEndpoints, e)
		}
	}
	st.Ports[p.Key] = &p
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{p.Key: {}}}); err != nil {
		t.Fatal(err)
	}
	after := round(20002)
	moved := 0
	for _, c := range clients {
		switch {
		case first[c] == removed && after[c] == removed:
			t.Errorf("client %v still goes to the removed endpoint %v", c, removed)
		case first[c] == removed:
			moved++
		case after[c] != first[c]:
			t.Errorf("client %v moved from %v to %v although its endpoint stayed", c, first[c], after[c])
		}
	}
	t.Logf("%d of %d clients were on the removed endpoint and moved; the others stayed", moved, len(clients))
}
