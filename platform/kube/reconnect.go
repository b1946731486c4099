package kube

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
)

// How the proxy's API connection notices a dead route and comes back
// (test/results/faults.md, fault 1). A node cut off from the API server
// sees no error: its watch connection just goes silent. Left to the
// defaults, client-go pings a silent HTTP/2 connection after 30 s and gives
// it 15 s, and its new connection is one dial whose lost SYNs TCP resends
// 1, 3, 7, 15 and 31 s after the first: the reconnect lands up to 16 s
// after the route is back, whatever the data plane does. With these
// settings the dead connection is found within pingAfterIdle+pingTimeout
// and a new SYN leaves every dialAttempt, so the watches are back within
// about a second of the heal. A restarting API server refuses connections
// instead; client-go's reflectors back off between their retries (0.8 s
// doubling to 30 s), so after a minute the next attempt can be half a
// minute away; the dialer retries refusals itself, every half dialAttempt
// with jitter, and client-go sees no failure to back off from. (After a
// restart with a compacted history client-go still waits its first backoff,
// 0.8-1.6 s, between the watch that gets "too old resource version" and
// the relist: the quicker refusal retries keep the whole within 3 s.)
//
// The cost to the API server: one HTTP/2 PING frame (17 bytes, answered
// in the server's read loop, no request) per node every pingAfterIdle
// while the node's connection carries nothing else, at 5,000 nodes 500
// pings a second across the control plane; and while the API server is
// unreachable, one TCP connection attempt a second per node (two a second,
// 0.25-0.75 s apart, when refused) instead of five in 31 s or client-go's
// backoff: SYNs that a partition drops, or a kernel's RST from a restarting
// API server's host (at 5,000 nodes about 10,000 a second, no TLS, no
// request), and when it is back, the nodes' reconnects and relists spread
// over about a second, where client-go's backoff spreads them over up to 30 s: API
// Priority and Fairness queues what the API server cannot take at once.
const (
	// pingAfterIdle is HTTP2_READ_IDLE_TIMEOUT_SECONDS: a connection that
	// received nothing for this long is pinged.
	pingAfterIdle = 10 * time.Second
	// pingTimeout is HTTP2_PING_TIMEOUT_SECONDS: an unanswered ping closes
	// the connection, and every watch on it fails and reconnects.
	pingTimeout = 5 * time.Second
	// dialAttempt is how long one TCP connection attempt waits for the
	// API server's answer before a new one is made.
	dialAttempt = time.Second
	// dialPatience is how long a dial goes on making attempts before it
	// fails to its caller: longer than client-go's reflector takes to
	// reset its backoff (2 minutes without a failure), so that a long
	// outage never grows the reflector's wait between relists (up to 30 s)
	// and the first attempt after the heal is at most dialAttempt away.
	dialPatience = 2*time.Minute + 10*time.Second
)

// FastReconnect makes the API client cfg notice a dead connection to the
// API server within 15 s and reconnect within about a second once the API
// server is reachable again (the constants above say why and what it
// costs), and logs once when the API server becomes unreachable and once
// when it is back. It sets client-go's HTTP/2 health check through its
// environment variables, which client-go reads when it builds a transport,
// unless the operator set them; so it must run before clients are built
// from cfg.
func FastReconnect(cfg *rest.Config, log logrus.FieldLogger) {
	for name, v := range map[string]time.Duration{
		"HTTP2_READ_IDLE_TIMEOUT_SECONDS": pingAfterIdle,
		"HTTP2_PING_TIMEOUT_SECONDS":      pingTimeout,
	} {
		if _, set := os.LookupEnv(name); !set {
			_ = os.Setenv(name, strconv.Itoa(int(v/time.Second)))
		}
	}
	d := &redialer{log: log, attempt: dialAttempt, patience: dialPatience, dial: (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext}
	cfg.Dial = d.DialContext
}

// redialer dials the API server in attempts of its own, each a new
// connection, until one is answered, the caller gives up, or patience runs
// out: a refused or unanswered attempt is what an unreachable or restarting
// API server looks like, and retrying it here, a second apart, instead of
// failing to client-go, keeps client-go's reflectors from backing off (up
// to 30 s between their attempts after a minute of failures).
type redialer struct {
	log      logrus.FieldLogger
	attempt  time.Duration
	patience time.Duration
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)

	mu sync.Mutex
	// down is when an attempt first went unanswered (zero while the API
	// server answers); up is when one was last answered. Dials run
	// concurrently (one per waiting request), so an attempt made before up
	// that times out after it says nothing new.
	down, up time.Time
}

func (d *redialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.patience)
	defer cancel()
	begun := time.Now()
	for {
		started := time.Now()
		actx, acancel := context.WithTimeout(ctx, d.attempt)
		c, err := d.dial(actx, network, addr)
		acancel()
		if err == nil {
			d.reachable(addr)
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial API server %s: unreachable for %v: %w", addr, time.Since(begun), err)
		}
		d.unreachable(addr, err, started)
		// A refusal or a missing route comes back at once: the next
		// attempt comes half an attempt's time after this one, jittered
		// (0.25-0.75 of it), so that the nodes of a cluster do not
		// reconnect in step when a restarted API server comes back.
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			wait := time.Until(started.Add(d.attempt/4 + rand.N(d.attempt/2)))
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("dial API server %s: unreachable for %v: %w", addr, time.Since(begun), err)
			case <-time.After(wait):
			}
		}
	}
}

func (d *redialer) unreachable(addr string, err error, started time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down.IsZero() && started.After(d.up) {
		d.down = time.Now()
		d.log.WithError(err).WithField("server", addr).Warn("API server unreachable; the rules in force stay; trying a new connection every second")
	}
}

func (d *redialer) reachable(addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.up = time.Now()
	if !d.down.IsZero() {
		d.log.WithFields(logrus.Fields{"server": addr, "after": time.Since(d.down).Round(time.Millisecond).String()}).Info("API server reachable again")
		d.down = time.Time{}
	}
}
