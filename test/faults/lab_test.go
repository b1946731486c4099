//go:build faults && linux

package faults

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crossproxy/crossproxy/test/netnsrun"
)

// lab is netnsrun's lab on 10.201: a kubeadm worker with a CNI bridge,
//
//	cli 10.201.1.2 ── 10.201.1.1 node 10.201.2.1 ── 10.201.2.2/.3/.4 pods
//
// The node has no default route, so nothing a fault does leaves the lab;
// the API server is reached through a forwarder on the node's loopback
// (apiForward), so that dropping the node's packets to it is a rule in the
// node's own namespace.
type lab struct{ *netnsrun.Lab }

const (
	nodeAddr   = "10.201.1.1"
	clientAddr = "10.201.1.2"
)

// podAddrs are the pod network's addresses, one per backend "pod".
var podAddrs = []string{"10.201.2.2", "10.201.2.3", "10.201.2.4"}

var run = netnsrun.Run

// newLab creates the namespaces and deletes them when the test ends.
func newLab(t testing.TB) *lab { return &lab{netnsrun.NewLab(t, "xpf", "10.201")} }

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
	netnsrun.ServeTCP(t, l.Back, podAddrs, port, func(c net.Conn, addr string) {
		fmt.Fprintf(c, "hello %s\n", addr)
		c.Close()
	})
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
