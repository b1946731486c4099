//go:build integration && linux

package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// lab is netnsrun's lab on 10.200: a node where crossproxy programs its
// rules and which routes between a client and a backend namespace.
//
//	cli 10.200.1.2 ── 10.200.1.1 node 10.200.2.1 ── 10.200.2.2/.3/.4 be
//
// The node has no default route, so a packet no rule rewrites goes nowhere
// outside the lab.
type lab struct{ *netnsrun.Lab }

const (
	nodeAddr   = "10.200.1.1"
	nodeAddr2  = "10.200.1.3"
	clientAddr = "10.200.1.2"
)

// backendAddrs are the backend namespace's addresses (one per "pod").
var backendAddrs = []string{"10.200.2.2", "10.200.2.3", "10.200.2.4"}

var run = netnsrun.Run

// newLab creates the namespaces and removes them when the test ends.
func newLab(t testing.TB) *lab { return &lab{netnsrun.NewLab(t, "xpk", "10.200")} }

// serveBackends starts one TCP server per backend address on port: each
// greets a connection with "hello ADDR" and then echoes lines.
func (l *lab) serveBackends(t testing.TB, port int) {
	t.Helper()
	netnsrun.ServeTCP(t, l.Back, backendAddrs, port, func(c net.Conn, addr string) {
		go func() {
			defer c.Close()
			fmt.Fprintf(c, "hello %s\n", addr)
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if _, err := c.Write([]byte(line)); err != nil {
					return
				}
			}
		}()
	})
}

// conn is a client connection through the node.
type conn struct {
	net.Conn
	r *bufio.Reader
	// Backend is the address that greeted the connection.
	Backend string
}

// dial connects from the client namespace and reads the greeting.
func (l *lab) dial(addr string, timeout time.Duration) (*conn, error) {
	var c net.Conn
	err := netnsrun.Do(l.Client, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read greeting from %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return &conn{Conn: c, r: r, Backend: strings.TrimPrefix(strings.TrimSpace(line), "hello ")}, nil
}

// httpClient is an HTTP client whose connections start in the client
// namespace, as a cloud load balancer's health probe reaches the node.
func (l *lab) httpClient() *http.Client { return httpClientIn(l.Client) }

// httpClientIn is an HTTP client whose connections start in namespace ns:
// the node's, for a server bound to the node's loopback.
func httpClientIn(ns string) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netnsrun.Do(ns, func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// ping sends a line and expects it back.
func (c *conn) ping(msg string) error {
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintln(c, msg); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// backendOf connects once and returns who answered ("" and the error when
// nobody did).
func (l *lab) backendOf(addr string) (string, error) {
	c, err := l.dial(addr, 500*time.Millisecond)
	if err != nil {
		return "", err
	}
	c.Close()
	return c.Backend, nil
}

// waitBackends waits until connections to addr reach exactly the backends
// in want (empty: until connections fail).
func (l *lab) waitBackends(t testing.TB, addr string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	wantSet := map[string]bool{}
	for _, w := range want {
		wantSet[w] = true
	}
	var last string
	for time.Now().Before(deadline) {
		seen := map[string]bool{}
		ok := true
		for range 4 * max(len(want), 1) {
			b, err := l.backendOf(addr)
			if len(want) == 0 {
				if err == nil {
					ok = false
					last = "answered by " + b
				}
				continue
			}
			if err != nil || !wantSet[b] {
				ok = false
				last = fmt.Sprintf("backend %q err %v", b, err)
				break
			}
			seen[b] = true
		}
		if ok && (len(want) == 0 || len(seen) == len(wantSet)) {
			return
		}
		if ok {
			last = fmt.Sprintf("saw only %v", seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: want backends %v; last: %s", addr, want, last)
}

// nft lists the node's ruleset (for assertions that something is absent).
func (l *lab) nft(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", l.Node, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	return string(out)
}
