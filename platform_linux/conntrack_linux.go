package nft

import (
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
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

func (c *netlinkConntrack) dump() (*conntrack.Conn, []conntrack.Flow, error) {
	conn, err := c.dial()
	if err != nil {
		return nil, nil, err
	}
	flows, err := conn.Dump(nil)
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("dump conntrack table: %w", err)
	}
	return conn, flows, nil
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
// reply source) is true and counts them; it goes on past a failed delete
// and returns the first error.
func (c *netlinkConntrack) deleteUDP(drop func(front frontendKey, reply netip.AddrPort) bool) (int, error) {
	conn, flows, err := c.dump()
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n := 0
	var firstErr error
	for _, f := range flows {
		if f.TupleOrig.Proto.Protocol != unix.IPPROTO_UDP {
			continue
		}
		front := frontendKey{unix.IPPROTO_UDP, netip.AddrPortFrom(f.TupleOrig.IP.DestinationAddress.Unmap(), f.TupleOrig.Proto.DestinationPort)}
		reply := netip.AddrPortFrom(f.TupleReply.IP.SourceAddress.Unmap(), f.TupleReply.Proto.SourcePort)
		if !drop(front, reply) {
			continue
		}
		if err := conn.Delete(f); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("delete conntrack entry %s -> %s: %w", front.Dst, reply, err)
			}
			continue
		}
		n++
	}
	return n, firstErr
}

var protoNames = map[uint8]v1.Protocol{unix.IPPROTO_TCP: v1.ProtocolTCP, unix.IPPROTO_UDP: v1.ProtocolUDP, unix.IPPROTO_SCTP: v1.ProtocolSCTP}

func (c *netlinkConntrack) List(frontends map[frontendKey]bool) ([]platform.Connection, error) {
	conn, flows, err := c.dump()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var out []platform.Connection
	for _, f := range flows {
		o, r := f.TupleOrig, f.TupleReply
		k := frontendKey{o.Proto.Protocol, netip.AddrPortFrom(o.IP.DestinationAddress.Unmap(), o.Proto.DestinationPort)}
		if !frontends[k] {
			continue
		}
		state := ""
		if o.Proto.Protocol == unix.IPPROTO_TCP {
			state = tcpStates[f.ProtoInfo.TCP.State]
		}
		if state == "" {
			if f.Status.SeenReply() {
				state = "replied"
			} else {
				state = "unreplied"
			}
		}
		out = append(out, platform.Connection{
			Protocol: protoNames[o.Proto.Protocol],
			Client:   netip.AddrPortFrom(o.IP.SourceAddress.Unmap(), o.Proto.SourcePort),
			Frontend: k.Dst,
			Endpoint: netip.AddrPortFrom(r.IP.SourceAddress.Unmap(), r.Proto.SourcePort),
			State:    state,
		})
	}
	return out, nil
}

var tcpStates = map[uint8]string{
	1: "SYN_SENT", 2: "SYN_RECV", 3: "ESTABLISHED", 4: "FIN_WAIT", 5: "CLOSE_WAIT",
	6: "LAST_ACK", 7: "TIME_WAIT", 8: "CLOSE", 9: "SYN_SENT2",
}
