//go:build e2e && linux

package e2e

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// testUDPFirstEndpoint: a UDP client that sent to a ClusterIP before any rule
// translated it has a conntrack entry the kernel never translates again, and
// the client keeps it as long as it keeps sending. When the Service gets its
// first endpoint, crossproxy deletes such entries (core.Changes.ActivatedUDP),
// so the same 5-tuple reaches the endpoint; a client refused while the Service
// had no endpoint reaches it too.
func testUDPFirstEndpoint(t *testing.T, l *lab) {
	const cip = "10.96.3.10"
	c1 := l.ns("c1")
	dst := hostPort(cip, 53)
	early, err := dialUDP(c1, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()
	// No Service yet: the packets are routed as they are, untranslated.
	for range 3 {
		if r, err := early.ask(200 * time.Millisecond); err == nil {
			t.Fatalf("a ClusterIP without a Service answered: %+v", r)
		}
	}
	l.untranslated(t, early, cip, true)

	svc := svc{name: "late", clusterIPs: []string{cip}, ports: []svcPort{{name: "dns", port: 53, proto: v1.ProtocolUDP}}}
	l.setService(svc, nil)
	l.flush()
	l.waitNFT(cip, true)
	refused, err := dialUDP(c1, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	eventually(t, "a UDP client of a Service without endpoints is refused", func() error {
		_, err := refused.ask(500 * time.Millisecond)
		if isRefused(err) {
			return nil
		}
		return fmt.Errorf("want connection refused, got %v", err)
	})
	// The early client's entry bypasses the rules: not refused, not answered.
	if r, err := early.ask(200 * time.Millisecond); err == nil || isRefused(err) {
		t.Fatalf("the early client's untranslated flow met the rules: %+v %v", r, err)
	}
	l.untranslated(t, early, cip, true)

	l.setService(svc, []ep{{pod: "b1"}})
	l.flush()
	for name, u := range map[string]*udpConn{"early": early, "refused": refused} {
		eventually(t, "the "+name+" client's flow reaches the first endpoint", func() error {
			r, err := u.ask(300 * time.Millisecond)
			if err != nil {
				return err
			}
			if r.Backend != "b1" {
				return fmt.Errorf("answered by %s", r.Backend)
			}
			return nil
		})
	}
	l.untranslated(t, early, cip, false)
}

// untranslated checks whether the node's conntrack table holds an entry for
// u's flow that replies from the ClusterIP itself (no DNAT), with the conntrack
// tool, independently of crossproxy.
func (l *lab) untranslated(t *testing.T, u *udpConn, cip string, want bool) {
	t.Helper()
	src := u.c.LocalAddr().(*net.UDPAddr)
	out, err := exec.Command("ip", "netns", "exec", l.ns("node"), "conntrack", "-L", "-p", "udp",
		"--orig-src", src.IP.String(), "--sport", fmt.Sprint(src.Port), "--orig-dst", cip).CombinedOutput()
	if err != nil {
		t.Fatalf("conntrack -L: %v: %s", err, out)
	}
	got := false
	for _, line := range strings.Split(string(out), "\n") {
		// The second src= is the reply's source.
		if f := strings.Split(line, " src="); len(f) >= 3 && strings.HasPrefix(f[2], cip+" ") {
			got = true
		}
	}
	if got != want {
		t.Fatalf("untranslated conntrack entry of %s -> %s present: %v, want %v; table:\n%s", src, cip, got, want, out)
	}
}
