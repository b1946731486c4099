//go:build faults && linux

package faults

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/test/harness"
	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// TestConntrackFull (fault 4): the node's connection tracking table is full.
// nf_conntrack_max is one value for the whole host, writable only from the
// initial namespace, but the count it is compared with is the node
// namespace's own: the test fills the node namespace's table up to the
// maximum with entries of its own (filler) and keeps it there, which is what
// the kernel sees when nf_conntrack_max is lowered to the count a node holds
// (the same check, count+1 > max, refuses a new entry), without touching any
// other namespace of the host. While the table is full, a prober connects to
// a ClusterIP and a NodePort (the kernel decides: new connections fail),
// the Service's endpoints move and a UDP Service loses the endpoint a
// client's flow is tracked to, so the UDP cleanup runs over the full table.
// Recorded per proxy: connections tried and failed, the kernel's drops,
// whether the proxy went on syncing, the time from the UDP endpoint's removal
// to its stale entry gone (and crossproxy's own time for the cleanup pass),
// the proxy's peak resident size, what it said; after the table is flushed,
// the time until connections succeed again, reaching the moved endpoints.
// crossproxy must say it once: one warning, the gauge 1 then 0, one episode.
func TestConntrackFull(t *testing.T) {
	for _, which := range proxies() {
		t.Run(which, func(t *testing.T) { conntrackFull(t, which) })
	}
}

// udpPort is the pods' UDP echo port, behind the UDP Service's port 53.
const udpPort = 5353

func conntrackFull(t *testing.T, which string) {
	// 25 s: the full period, the /healthz attempt after it (2 s) and the
	// flush end before crossproxy's periodic sync (--sync-period 30 s after
	// the sync of the endpoint changes), which would see the room first.
	full := 25 * time.Second
	if testing.Short() {
		full = 5 * time.Second
	}
	n := newNode(t, harness.Options{})
	servePodsUDP(t, n.lab, udpPort)
	// A node's connection tracking is on before its proxy starts: the CNI's
	// rules use it. Without them the proxy's connection to the API server
	// would be made untracked, need an entry at its first packet after the
	// proxy's rules turn tracking on, and be cut by the full table (a first
	// run of this test saw that: "http2: client connection lost").
	cniMasquerade(t, n.lab)
	var extra []string
	if which == crossproxy {
		extra = append(extra, "--log-level=debug") // the cleanup pass's duration
	}
	p := n.start(which, extra...)
	web := n.service("web", nodePort)
	n.createSlice(n.slice("web", "web-1", podAddrs...))
	dns := n.service("dns", func(s *v1.Service) {
		s.Spec.Ports = []v1.ServicePort{{Port: 53, TargetPort: intstr.FromInt32(udpPort), Protocol: v1.ProtocolUDP}}
	})
	n.createSlice(udpSlice(n.slice("dns", "dns-1", podAddrs...)))
	n.lab.waitBackends(t, clusterAddr(web), 30*time.Second, podAddrs...)
	n.lab.waitBackends(t, nodePortAddr(web), 10*time.Second, podAddrs...)

	// A client's UDP flow to the UDP Service, tracked to one pod: the
	// endpoint removed while the table is full.
	flow, err := openUDPFlow(n.lab, dns.Spec.ClusterIP)
	if err != nil {
		t.Fatal(err)
	}
	defer flow.conn.Close()
	ct := dialConntrack(t, n.lab.NetNS())
	if _, err := ct.Get(flow.tuple()); err != nil {
		t.Fatalf("the UDP flow's conntrack entry %v: %v", flow, err)
	}

	probe := n.lab.probe(50*time.Millisecond, clusterAddr(web), nodePortAddr(web))
	defer probe.stop()
	time.Sleep(time.Second)
	rss0 := p.peakRSS(t)
	drops0 := conntrackDrops(t, ct)
	syncs0, _ := p.metric(allSyncs)

	// Fill the table and keep it full.
	fill := &filler{ct: dialConntrack(t, n.lab.NetNS())} // a socket of its own: it tops up meanwhile
	fillStart := time.Now()
	if err := fill.top(); err != nil {
		t.Fatal(err)
	}
	fillTook := time.Since(fillStart)
	count, limit := n.conntrackSize(t)
	if count < limit {
		t.Fatalf("table holds %d entries after the fill, max %d", count, limit)
	}
	start := time.Now()
	stopTop := make(chan struct{})
	var topWG sync.WaitGroup
	topWG.Go(func() {
		for {
			select {
			case <-stopTop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if err := fill.top(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	defer func() {
		select {
		case <-stopTop:
		default:
			close(stopTop)
		}
		topWG.Wait()
	}()

	// While it is full: the web Service's endpoints move, the UDP Service
	// loses the pod the client's flow is tracked to.
	time.Sleep(time.Second)
	moved := podAddrs[1:]
	n.setEndpoints("web", "web-1", moved...)
	var rest []string
	for _, a := range podAddrs {
		if a != flow.pod {
			rest = append(rest, a)
		}
	}
	removed := time.Now()
	cur := udpSlice(n.slice("dns", "dns-1", rest...))
	n.updateSlice(cur)
	staleGone := time.Duration(-1)
	for time.Since(removed) < full-time.Second {
		if _, err := ct.Get(flow.tuple()); errors.Is(err, unix.ENOENT) {
			staleGone = time.Since(removed)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Until(start.Add(full)))
	// The proxy's own /healthz and /metrics are new connections on the
	// node too (a kubelet's liveness probe, a Prometheus scrape).
	code, _ := p.healthz()
	end := time.Now()
	p.alive(t, "with a full conntrack table")
	rss1 := p.peakRSS(t)
	drops1 := conntrackDrops(t, ct)
	tried, failed, _ := probe.window(start, end)
	var took string
	if m := regexp.MustCompile(`msg="cleared conntrack entries of removed UDP endpoints".*took=(\S+)`).FindStringSubmatch(p.logText()); m != nil {
		took = m[1]
	}

	// Flush the table (the filler's entries and all others): the kernel
	// tracks new connections again and they reach the moved endpoints.
	close(stopTop)
	topWG.Wait()
	flushed := time.Now()
	if err := ct.Flush(); err != nil {
		t.Fatalf("flush the node's conntrack table: %v", err)
	}
	// What the proxy reported while the table was full, read now that
	// /metrics can be reached and before a sync sees the room.
	syncs1, _ := p.metric(allSyncs)
	gauge, gaugeOK := p.metric("crossproxy_conntrack_table_full")
	// A periodic sync may have seen the room already.
	roomEarly := countLines(p.logText(), "conntrack table has room again") > 0
	back, backErr := n.lab.reach(clusterAddr(web), 30*time.Second, moved...)
	if backErr == nil {
		_, backErr = n.lab.reach(nodePortAddr(web), 10*time.Second, moved...)
		back = time.Since(flushed)
	}
	// A change after the flush: its sync finds the table with room.
	n.updateSlice(udpSlice(n.slice("dns", "dns-1", podAddrs...)))
	for wait := time.Now(); time.Since(wait) < 5*time.Second; time.Sleep(100 * time.Millisecond) {
		if which == crossproxy && countLines(p.logText(), "conntrack table has room again") > 0 {
			break
		}
	}
	time.Sleep(500 * time.Millisecond) // the sync's metrics, and probes after it
	afterTried, afterFailed, afterFirst := probe.window(flushed.Add(back), time.Now(), moved...)
	probe.stop()
	gaugeAfter, afterOK := p.metric("crossproxy_conntrack_table_full")
	episodes, episodesOK := p.metric("crossproxy_conntrack_table_full_episodes_total")
	log := p.logText()
	said := countLines(log, "conntrack table full")
	room := countLines(log, "conntrack table has room again")
	var fullLines int // any line on conntrack and a full table, whatever the proxy
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(l), "conntrack") && strings.Contains(l, "full") {
			fullLines++
		}
	}

	backText := fmt.Sprint(back.Round(10 * time.Millisecond))
	if backErr != nil {
		backText = "not within 40 s: " + backErr.Error()
	}
	goneText := fmt.Sprint(staleGone.Round(time.Millisecond))
	if staleGone < 0 {
		goneText = "still there after " + fmt.Sprint(full-time.Second)
	}
	figure(t, "%s conntrack table full (%d of max %d entries, filled in %v) for %v: %d connections tried, %d failed; kernel drops %d; "+
		"syncs during it %v; UDP endpoint removed -> its stale entry gone %s (proxy's cleanup pass %s); proxy peak RSS %d -> %d MiB; /healthz during it %d; "+
		"said: %d full-table line(s), gauge %s at the flush / %s after, %s episode(s), %d room-again line(s) (log lines on conntrack and \"full\": %d); "+
		"after the flush: connections reach the moved endpoints in %s; then %d tried, %d failed %s",
		which, count, limit, fillTook.Round(100*time.Millisecond), end.Sub(start).Round(time.Second), tried, failed, drops1-drops0,
		syncs1-syncs0, goneText, orDash(took), rss0>>20, rss1>>20, code,
		said, series(gauge, gaugeOK), series(gaugeAfter, afterOK), series(episodes, episodesOK), room, fullLines,
		backText, afterTried, afterFailed, afterFirst)

	if backErr != nil {
		t.Errorf("%s: %s", which, backText)
	}
	if afterFailed > 0 {
		t.Errorf("%s: %d of %d connections failed after the table was flushed", which, afterFailed, afterTried)
	}
	if staleGone < 0 {
		t.Errorf("%s: the removed UDP endpoint's conntrack entry was not deleted while the table was full", which)
	}
	if syncs1 <= syncs0 {
		t.Errorf("%s: no sync while the table was full (%v -> %v)", which, syncs0, syncs1)
	}
	if which != crossproxy {
		return
	}
	if failed*2 < tried {
		t.Errorf("only %d of %d connections failed while the table was full: the table was not full", failed, tried)
	}
	if said != 1 || room != 1 || (gauge != 1 && !roomEarly) || gaugeAfter != 0 || episodes != 1 {
		t.Errorf("crossproxy said %d full-table and %d room-again lines, gauge %v then %v, %v episodes; want 1, 1, 1, 0, 1",
			said, room, gauge, gaugeAfter, episodes)
	}
	if took == "" {
		t.Error("crossproxy logged no cleanup pass for the removed UDP endpoint")
	}
}

// cniMasquerade loads flannel's nftables masquerade (flannel >= v0.25 with
// EnableNFTables: table flannel-ipv4, chain postrtg) for the lab's pod
// network 10.201.2.0/24 in a cluster network 10.201.0.0/16: pod traffic
// leaving the cluster network is masqueraded, so none of the lab's is, but
// the node tracks connections from then on, as a flannel node does.
func cniMasquerade(t testing.TB, l *lab) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", l.Node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(`table ip flannel-ipv4 {
	chain postrtg {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.201.2.0/24 ip daddr != 10.201.0.0/16 masquerade fully-random
	}
}
`)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("flannel's masquerade table: %v\n%s", err, out)
	}
}

// allSyncs counts both proxies' syncs, full and partial.
const allSyncs = "kubeproxy_sync_proxy_rules_duration_seconds_count"

// series is a metric's value, or "-" when the proxy has no such series.
func series(v float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprint(v)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countLines(text, sub string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			n++
		}
	}
	return n
}

// udpSlice turns a slice of the node into one of UDP port udpPort.
func udpSlice(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	port, proto := int32(udpPort), v1.ProtocolUDP
	s.Ports = []discovery.EndpointPort{{Port: &port, Protocol: &proto}}
	return s
}

// updateSlice replaces the stored slice of s's name with s.
func (n *node) updateSlice(s *discovery.EndpointSlice) {
	n.t.Helper()
	cur, err := n.admin.DiscoveryV1().EndpointSlices("default").Get(n.ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		n.t.Fatalf("get endpointslice %s: %v", s.Name, err)
	}
	cur.Endpoints, cur.Ports = s.Endpoints, s.Ports
	if _, err := n.admin.DiscoveryV1().EndpointSlices("default").Update(n.ctx, cur, metav1.UpdateOptions{}); err != nil {
		n.t.Fatalf("update endpointslice %s: %v", s.Name, err)
	}
}

// conntrackSize is the node namespace's table count and the host's maximum.
func (n *node) conntrackSize(t testing.TB) (count, limit int) {
	t.Helper()
	read := func(name string) int {
		var v int
		err := netnsrun.Do(n.lab.Node, func() error {
			b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
			if err != nil {
				return err
			}
			v, err = strconv.Atoi(strings.TrimSpace(string(b)))
			return err
		})
		if err != nil {
			t.Fatalf("read %s in the node namespace: %v", name, err)
		}
		return v
	}
	return read("nf_conntrack_count"), read("nf_conntrack_max")
}

// peakRSS is the proxy's peak resident size (VmHWM), in bytes.
func (p *proc) peakRSS(t testing.TB) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("%s status: %v", p.name, err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// dialConntrack opens a ctnetlink socket in the namespace at path.
func dialConntrack(t testing.TB, path string) *conntrack.Conn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := conntrack.Dial(&netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		t.Fatalf("conntrack netlink socket in %s: %v", path, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// conntrackDrops sums the kernel's per-CPU drop counters of the namespace:
// packets dropped because no entry could be made for them (a full table).
func conntrackDrops(t testing.TB, c *conntrack.Conn) uint64 {
	t.Helper()
	st, err := c.Stats()
	if err != nil {
		t.Fatalf("conntrack stats: %v", err)
	}
	var n uint64
	for _, s := range st {
		n += uint64(s.Drop)
	}
	return n
}

// filler fills a namespace's conntrack table to its maximum with UDP
// entries from the benchmarking range 198.18.0.0/15 (RFC 2544, which no
// test traffic uses) to 198.19.255.254 port 9 (discard). They are ASSURED,
// so the kernel's early drop, which evicts only unassured entries to make
// room, leaves them, and time out by themselves after 10 minutes should
// the test die before it flushes them (the lab's namespaces go with it
// anyway).
type filler struct {
	ct   *conntrack.Conn
	next int
}

var fillDst = netip.MustParseAddr("198.19.255.254")

// top creates entries until the kernel refuses one because the table is
// full (ENOMEM); it stops with an error after a million.
func (f *filler) top() error {
	for range 1 << 20 {
		i := f.next
		f.next++
		src := [4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)}
		flow := conntrack.NewFlow(unix.IPPROTO_UDP, conntrack.StatusAssured|conntrack.StatusSeenReply|conntrack.StatusConfirmed,
			netip.AddrFrom4(src), fillDst, uint16(40000+i>>17), 9, 600, 0)
		err := f.ct.Create(flow)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOMEM):
			return nil
		case errors.Is(err, unix.EEXIST):
		default:
			return fmt.Errorf("create filler conntrack entry %d: %w", i, err)
		}
	}
	return errors.New("the conntrack table took a million entries without filling up")
}

// udpFlow is a client's UDP socket with one exchange through a Service
// behind it, so the node tracks the flow to the pod that answered.
type udpFlow struct {
	conn  *net.UDPConn
	local netip.AddrPort
	svc   netip.AddrPort
	pod   string
}

func (u udpFlow) String() string { return fmt.Sprintf("%s -> %s (pod %s)", u.local, u.svc, u.pod) }

// tuple is the flow's original direction, as conntrack keys it.
func (u udpFlow) tuple() conntrack.Flow {
	return conntrack.NewFlow(unix.IPPROTO_UDP, 0, u.local.Addr(), u.svc.Addr(), u.local.Port(), u.svc.Port(), 0, 0)
}

// openUDPFlow sends from the client namespace to clusterIP:53 until a pod
// answers.
func openUDPFlow(l *lab, clusterIP string) (udpFlow, error) {
	var c *net.UDPConn
	svc := netip.AddrPortFrom(netip.MustParseAddr(clusterIP), 53)
	err := netnsrun.Do(l.Client, func() error {
		var err error
		c, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(svc))
		return err
	})
	if err != nil {
		return udpFlow{}, fmt.Errorf("UDP socket in the client namespace: %w", err)
	}
	buf := make([]byte, 64)
	for range 50 {
		_, _ = c.Write([]byte("ping"))
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if k, err := c.Read(buf); err == nil {
			local := c.LocalAddr().(*net.UDPAddr).AddrPort()
			return udpFlow{conn: c, local: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), svc: svc,
				pod: strings.TrimPrefix(strings.TrimSpace(string(buf[:k])), "hello ")}, nil
		}
	}
	c.Close()
	return udpFlow{}, fmt.Errorf("no pod answered UDP to %s in 10 s", svc)
}

// servePodsUDP answers every datagram to a pod address's port with
// "hello ADDR".
func servePodsUDP(t testing.TB, l *lab, port int) {
	t.Helper()
	var cs []net.PacketConn
	err := netnsrun.Do(l.Back, func() error {
		for _, a := range podAddrs {
			c, err := net.ListenPacket("udp4", net.JoinHostPort(a, strconv.Itoa(port)))
			if err != nil {
				return err
			}
			cs = append(cs, c)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod UDP listeners: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
		wg.Wait()
	})
	for i, c := range cs {
		wg.Go(func() {
			buf := make([]byte, 512)
			for {
				_, from, err := c.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = c.WriteTo([]byte("hello "+podAddrs[i]+"\n"), from)
			}
		})
	}
}
