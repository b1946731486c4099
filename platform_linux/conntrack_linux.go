package nft

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/sirupsen/logrus"
	"github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// conntracker is the part of the kernel's connection table the backend uses.
type conntracker interface {
	// ClearStale deletes UDP entries whose frontend is one of a stale
	// endpoint's frontends and whose reply comes from that endpoint.
	ClearStale(stale []core.StaleEndpoint) (int, error)
	// ClearActivated deletes UDP entries whose frontend is one of an
	// activated port's frontends and whose reply comes from none of its
	// endpoints: they were made while nothing translated the frontend.
	ClearActivated(ports []core.ActivatedPort) (int, error)
	// List returns the tracked connections to the given frontends.
	List(frontends map[frontendKey]bool) ([]platform.Connection, error)
}

// clearConntrack runs the UDP cleanup a sync's changes ask for, once the new
// rules are in force: one dump of the table and the deletes it calls for per
// kind, whatever the table holds (a full table is one pass over its
// entries, not a retry). A failure is logged and not retried here: the
// entries it left time out by themselves.
func (b *Backend) clearConntrack(changes core.Changes) {
	if stale := changes.StaleUDP; len(stale) > 0 {
		start := time.Now()
		n, err := b.conntrack.ClearStale(stale)
		b.logCleared(n, err, time.Since(start), "removed UDP endpoints")
	}
	if act := changes.ActivatedUDP; len(act) > 0 {
		start := time.Now()
		n, err := b.conntrack.ClearActivated(act)
		b.logCleared(n, err, time.Since(start), "UDP Services that got their first endpoints (entries made before)")
	}
}

func (b *Backend) logCleared(n int, err error, took time.Duration, what string) {
	l := b.log.WithFields(logrus.Fields{"entries": n, "took": took.String()})
	if err != nil {
		l.WithError(err).Warn("clear conntrack entries of " + what)
		return
	}
	l.Debug("cleared conntrack entries of " + what)
}

// frontendKey is a protocol and destination as conntrack records them.
type frontendKey struct {
	Proto uint8
	Dst   netip.AddrPort
}

type netlinkConntrack struct{ ns *netNS }

func (c *netlinkConntrack) dial() (*conntrack.Conn, error) {
	var conn *conntrack.Conn
	err := c.ns.withFD(func(fd int) error {
		cfg := &netlink.Config{}
		if fd >= 0 {
			cfg.NetNS = fd
		}
		var err error
		conn, err = conntrack.Dial(cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w", err)
	}
	return conn, nil
}

func (c *netlinkConntrack) ClearStale(stale []core.StaleEndpoint) (int, error) {
	type match struct {
		front frontendKey
		ep    netip.AddrPort
	}
	want := map[match]bool{}
	for _, s := range stale {
		for _, f := range s.Frontends {
			want[match{udpFrontend(f), s.Endpoint}] = true
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	return c.deleteUDP(func(front frontendKey, reply netip.AddrPort) bool {
		return want[match{front, reply}]
	})
}

func (c *netlinkConntrack) ClearActivated(ports []core.ActivatedPort) (int, error) {
	// The endpoints each frontend now translates to; an entry that replies
	// from anything else (the frontend itself, for an untranslated one) goes.
	live := map[frontendKey]map[netip.Addr]bool{}
	for _, p := range ports {
		for _, f := range p.Frontends {
			k := udpFrontend(f)
			if live[k] == nil {
				live[k] = map[netip.Addr]bool{}
			}
			for _, ep := range p.Endpoints {
				live[k][ep] = true
			}
		}
	}
	if len(live) == 0 {
		return 0, nil
	}
	return c.deleteUDP(func(front frontendKey, reply netip.AddrPort) bool {
		eps, ok := live[front]
		return ok && !eps[reply.Addr()]
	})
}

func udpFrontend(f core.Frontend) frontendKey {
	return frontendKey{unix.IPPROTO_UDP, netip.AddrPortFrom(f.Addr, f.Port)}
}

// deleteUDP deletes the UDP entries for which drop(original destination,
// reply source) is true and counts them: one pass over the table, which
// keeps only the entries to delete (a full table of 262,144 entries is not
// held in memory), then one delete each. An entry gone in between (expired,
// deleted by someone else) is not counted; it goes on past a failed delete
// and returns the first error.
func (c *netlinkConntrack) deleteUDP(drop func(front frontendKey, reply netip.AddrPort) bool) (int, error) {
	var doomed []ctEntry
	err := c.each(func(e *ctEntry) {
		if e.proto == unix.IPPROTO_UDP && drop(frontendKey{unix.IPPROTO_UDP, e.orig.dst}, e.reply.src) {
			doomed = append(doomed, *e)
		}
	})
	if err != nil || len(doomed) == 0 {
		return 0, err
	}
	conn, err := c.dial()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n := 0
	var firstErr error
	for _, e := range doomed {
		err := conn.Delete(e.flow())
		switch {
		case err == nil:
			n++
		case errors.Is(err, unix.ENOENT):
		case firstErr == nil:
			firstErr = fmt.Errorf("delete conntrack entry %s -> %s: %w", e.orig.dst, e.reply.src, err)
		}
	}
	return n, firstErr
}

var protoNames = map[uint8]v1.Protocol{unix.IPPROTO_TCP: v1.ProtocolTCP, unix.IPPROTO_UDP: v1.ProtocolUDP, unix.IPPROTO_SCTP: v1.ProtocolSCTP}

func (c *netlinkConntrack) List(frontends map[frontendKey]bool) ([]platform.Connection, error) {
	var out []platform.Connection
	err := c.each(func(e *ctEntry) {
		k := frontendKey{e.proto, e.orig.dst}
		if !frontends[k] {
			return
		}
		state := ""
		if e.proto == unix.IPPROTO_TCP {
			state = tcpStates[e.tcpState]
		}
		if state == "" {
			if e.status&ipsSeenReply != 0 {
				state = "replied"
			} else {
				state = "unreplied"
			}
		}
		out = append(out, platform.Connection{
			Protocol: protoNames[e.proto],
			Client:   e.orig.src,
			Frontend: k.Dst,
			Endpoint: e.reply.src,
			State:    state,
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

var tcpStates = map[uint8]string{
	1: "SYN_SENT", 2: "SYN_RECV", 3: "ESTABLISHED", 4: "FIN_WAIT", 5: "CLOSE_WAIT",
	6: "LAST_ACK", 7: "TIME_WAIT", 8: "CLOSE", 9: "SYN_SENT2",
}
