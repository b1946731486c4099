//go:build integration && linux

package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// lab is three network namespaces: a node where crossproxy programs its
// rules and which routes between a client and a backend namespace.
//
//	cli 10.200.1.2 ── 10.200.1.1 node 10.200.2.1 ── 10.200.2.2/.3/.4 be
//
// The node has no default route, so a packet no rule rewrites goes nowhere
// outside the lab.
type lab struct {
	id                 string
	Node, Client, Back string
}

const (
	nodeAddr   = "10.200.1.1"
	nodeAddr2  = "10.200.1.3"
	clientAddr = "10.200.1.2"
)

// backendAddrs are the backend namespace's addresses (one per "pod").
var backendAddrs = []string{"10.200.2.2", "10.200.2.3", "10.200.2.4"}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newLab creates the namespaces and removes them when the test ends.
func newLab(t testing.TB) *lab {
	t.Helper()
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	id := hex.EncodeToString(buf)
	l := &lab{id: id, Node: "xpk-" + id + "-node", Client: "xpk-" + id + "-cli", Back: "xpk-" + id + "-be"}
	t.Cleanup(func() {
		for _, ns := range []string{l.Client, l.Back, l.Node} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range []string{l.Node, l.Client, l.Back} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link := func(a, aIf, aAddr, b, bIf, bAddr string) {
		run(t, "ip", "-n", a, "link", "add", aIf, "type", "veth", "peer", "name", bIf, "netns", b)
		run(t, "ip", "-n", a, "addr", "add", aAddr+"/24", "dev", aIf)
		run(t, "ip", "-n", b, "addr", "add", bAddr+"/24", "dev", bIf)
		run(t, "ip", "-n", a, "link", "set", aIf, "up")
		run(t, "ip", "-n", b, "link", "set", bIf, "up")
	}
	link(l.Node, "xpkc"+id, nodeAddr, l.Client, "eth0", clientAddr)
	link(l.Node, "xpkb"+id, "10.200.2.1", l.Back, "eth0", backendAddrs[0])
	for _, a := range backendAddrs[1:] {
		run(t, "ip", "-n", l.Back, "addr", "add", a+"/24", "dev", "eth0")
	}
	run(t, "ip", "-n", l.Client, "route", "add", "default", "via", nodeAddr)
	run(t, "ip", "-n", l.Back, "route", "add", "default", "via", "10.200.2.1")
	run(t, "ip", "netns", "exec", l.Node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return l
}

// NetNSPath is the node namespace's path for crossproxy --netns.
func (l *lab) NetNSPath() string { return "/run/netns/" + l.Node }

// serveBackends starts one TCP server per backend address on port: each
// greets a connection with "hello ADDR" and then echoes lines.
func (l *lab) serveBackends(t testing.TB, port int) {
	t.Helper()
	var ls []net.Listener
	err := netnsrun.Do(l.Back, func() error {
		for _, a := range backendAddrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, fmt.Sprint(port)))
			if err != nil {
				return err
			}
			ls = append(ls, ln)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("backend listeners: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, ln := range ls {
			ln.Close()
		}
		wg.Wait()
	})
	for i, ln := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "hello %s\n", backendAddrs[i])
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
			}
		}()
	}
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
