//go:build faults && linux

package faults

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// lab is a node as a kubeadm worker with a CNI bridge sees it, in three
// network namespaces: the node, where the proxy runs and programs its rules,
// a client on the node's network and a pod network behind the node.
//
//	cli 10.201.1.2 ── 10.201.1.1 node 10.201.2.1 ── 10.201.2.2/.3/.4 pods
//
// The node has no default route, so nothing a fault does leaves the lab;
// the API server is reached through a forwarder on the node's loopback
// (apiForward), so that dropping the node's packets to it is a rule in the
// node's own namespace.
type lab struct {
	id                 string
	Node, Client, Back string
}

const (
	nodeAddr   = "10.201.1.1"
	clientAddr = "10.201.1.2"
)

// podAddrs are the pod network's addresses, one per backend "pod".
var podAddrs = []string{"10.201.2.2", "10.201.2.3", "10.201.2.4"}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newLab creates the namespaces and deletes them when the test ends.
func newLab(t testing.TB) *lab {
	t.Helper()
	buf := make([]byte, 3)
	_, _ = rand.Read(buf)
	id := hex.EncodeToString(buf)
	l := &lab{id: id, Node: "xpf-" + id + "-node", Client: "xpf-" + id + "-cli", Back: "xpf-" + id + "-pod"}
	t.Cleanup(func() {
		for _, ns := range []string{l.Client, l.Back, l.Node} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	for _, ns := range []string{l.Node, l.Client, l.Back} {
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	link := func(peer, nodeIf, nodeIP, peerIP string) {
		run(t, "ip", "-n", l.Node, "link", "add", nodeIf, "type", "veth", "peer", "name", "eth0", "netns", peer)
		run(t, "ip", "-n", l.Node, "addr", "add", nodeIP+"/24", "dev", nodeIf)
		run(t, "ip", "-n", peer, "addr", "add", peerIP+"/24", "dev", "eth0")
		run(t, "ip", "-n", l.Node, "link", "set", nodeIf, "up")
		run(t, "ip", "-n", peer, "link", "set", "eth0", "up")
		run(t, "ip", "-n", peer, "route", "add", "default", "via", nodeIP)
	}
	link(l.Client, "xpfc"+id, nodeAddr, clientAddr)
	link(l.Back, "xpfp"+id, "10.201.2.1", podAddrs[0])
	for _, a := range podAddrs[1:] {
		run(t, "ip", "-n", l.Back, "addr", "add", a+"/24", "dev", "eth0")
	}
	run(t, "ip", "netns", "exec", l.Node, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	return l
}

// NetNS is the node namespace's path.
func (l *lab) NetNS() string { return "/run/netns/" + l.Node }

// nft runs nft in the node namespace.
func (l *lab) nft(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", l.Node, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// servePods starts a TCP server on port for every pod address: it greets a
// connection with "hello ADDR" and closes it.
func (l *lab) servePods(t testing.TB, port int) {
	t.Helper()
	var ls []net.Listener
	err := netnsrun.Do(l.Back, func() error {
		for _, a := range podAddrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, fmt.Sprint(port)))
			if err != nil {
				return err
			}
			ls = append(ls, ln)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("pod listeners: %v", err)
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
				fmt.Fprintf(c, "hello %s\n", podAddrs[i])
				c.Close()
			}
		}()
	}
}

// backendOf connects from the client namespace and returns the pod that
// answered.
func (l *lab) backendOf(addr string, timeout time.Duration) (string, error) {
	var c net.Conn
	err := netnsrun.Do(l.Client, func() error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read greeting from %s: %w", addr, err)
	}
	return strings.TrimPrefix(strings.TrimSpace(line), "hello "), nil
}

// waitBackends waits up to limit until connections to addr reach only pods
// of want, each of them at least once, and returns how long that took.
func (l *lab) waitBackends(t testing.TB, addr string, limit time.Duration, want ...string) time.Duration {
	t.Helper()
	took, err := l.reach(addr, limit, want...)
	if err != nil {
		t.Fatal(err)
	}
	return took
}

// reach is waitBackends returning its failure.
func (l *lab) reach(addr string, limit time.Duration, want ...string) (time.Duration, error) {
	start := time.Now()
	wantSet := map[string]bool{}
	for _, w := range want {
		wantSet[w] = true
	}
	var last string
	for time.Since(start) < limit {
		seen, ok := map[string]bool{}, true
		for range 4 * len(want) {
			b, err := l.backendOf(addr, 300*time.Millisecond)
			if err != nil || !wantSet[b] {
				ok, last = false, fmt.Sprintf("backend %q err %v", b, err)
				break
			}
			seen[b] = true
		}
		if ok && len(seen) == len(wantSet) {
			return time.Since(start), nil
		}
		if ok {
			last = fmt.Sprintf("saw only %v", seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("%s: want pods %v within %v; last: %s", addr, want, limit, last)
}

// attempt is one probe connection.
type attempt struct {
	at      time.Time
	target  string
	backend string
	err     error
}

// prober connects to its targets in turn, every interval, from the client
// namespace, and keeps every attempt, until stop.
type prober struct {
	mu       sync.Mutex
	attempts []attempt
	stopc    chan struct{}
	done     chan struct{}
}

func (l *lab) probe(interval time.Duration, targets ...string) *prober {
	p := &prober{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stopc:
				return
			case <-time.After(interval):
			}
			target := targets[i%len(targets)]
			at := time.Now()
			b, err := l.backendOf(target, 300*time.Millisecond)
			p.mu.Lock()
			p.attempts = append(p.attempts, attempt{at: at, target: target, backend: b, err: err})
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *prober) stop() {
	select {
	case <-p.stopc:
	default:
		close(p.stopc)
	}
	<-p.done
}

// window counts the attempts started in [from, to) and those that failed
// (no answer, or an answer from a pod not in ok when ok is given).
func (p *prober) window(from, to time.Time, ok ...string) (tried, failed int, firstErr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.attempts {
		if a.at.Before(from) || !a.at.Before(to) {
			continue
		}
		tried++
		bad := a.err != nil
		if !bad && len(ok) > 0 {
			bad = true
			for _, o := range ok {
				bad = bad && a.backend != o
			}
		}
		if bad {
			failed++
			if firstErr == "" {
				firstErr = fmt.Sprintf("%s: backend %q err %v", a.target, a.backend, a.err)
			}
		}
	}
	return tried, failed, firstErr
}
