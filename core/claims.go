package core

import (
	"cmp"
	"fmt"
	"net/netip"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// claimKey is one destination a frontend takes on this node, packed into 20
// bytes (a netip.Addr and a protocol string need 48) because there is one
// per frontend: the address in its 16-byte form (the core's addresses are
// never IPv4-mapped IPv6, so each has one), the port and the protocol's code.
type claimKey struct {
	addr  [16]byte
	port  uint16
	proto uint8
}

func claimKeyOf(addr netip.Addr, port uint16, proto v1.Protocol) claimKey {
	return claimKey{addr: addr.As16(), port: port, proto: protocolCode(proto)}
}

// protocolCode numbers the protocols a ServicePort can have (parsePorts
// accepts no other).
func protocolCode(p v1.Protocol) uint8 {
	switch p {
	case v1.ProtocolTCP:
		return 1
	case v1.ProtocolUDP:
		return 2
	case v1.ProtocolSCTP:
		return 3
	}
	return 0
}

// claimant is one Service port's frontend on a claimKey. port points to the
// key of the claiming ServicePort (which is never modified) rather than
// copying it: there is a claimant per frontend, 10,000 or more of them.
type claimant struct {
	port    *PortKey
	kind    FrontendKind
	created time.Time
}

// claims records which Service ports' frontends take each destination, so two
// Services that name one address:port (an externalIP equal to another
// Service's IP, two Services with one externalIP) get one frontend between
// them. A data plane maps a destination one way only: nftables refuses a
// whole batch that maps one key twice, which would stop every later sync.
type claims map[claimKey][]claimant

// winner is the claimant that keeps k: a ClusterIP or NodePort before a load
// balancer IP before an ExternalIP (the node's own addresses cannot be taken
// over, and a load balancer keeps its source ranges), then the older Service,
// so a new Service cannot take an address from one that has it, then by key.
func (c claims) winner(k claimKey) claimant {
	list := c[k]
	best := list[0]
	for _, o := range list[1:] {
		if cmp.Or(cmp.Compare(frontendRank[o.kind], frontendRank[best.kind]), o.created.Compare(best.created), comparePortKey(*o.port, *best.port)) < 0 {
			best = o
		}
	}
	return best
}

// move replaces the claims of a Service's old ports by those of its new ones
// and adds to affected every other Service that shares a destination with
// either, since who keeps that destination may change.
func (c claims) move(svc types.NamespacedName, old, nu []*ServicePort, created time.Time, affected map[types.NamespacedName]struct{}) {
	share := func(k claimKey) {
		for _, o := range c[k] {
			if o.port.Service != svc {
				affected[o.port.Service] = struct{}{}
			}
		}
	}
	for _, p := range old {
		for _, f := range p.Frontends {
			k := claimKeyOf(f.Addr, f.Port, p.Protocol)
			list := c[k]
			for i, o := range list {
				if *o.port == p.Key && o.kind == f.Kind {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(c, k)
				continue
			}
			c[k] = list
			share(k)
		}
	}
	for _, p := range nu {
		for _, f := range p.Frontends {
			k := claimKeyOf(f.Addr, f.Port, p.Protocol)
			c[k] = append(c[k], claimant{port: &p.Key, kind: f.Kind, created: created})
			if len(c[k]) > 1 {
				share(k)
			}
		}
	}
}

// publish sets r.ports from r.raw without the frontends another Service
// keeps, each reported in r.conflicts. A ClusterIP frontend loses only to
// another Service's ClusterIP (which the API server never allocates twice, but
// hand-written manifests can): the whole port is then left out in that family,
// because backends build every port around its ClusterIP. Ports that lose
// nothing are shared with r.raw (r.ports is r.raw itself when nothing is
// contested).
func (c claims) publish(r *serviceResult, svc types.NamespacedName) {
	r.conflicts = nil
	if !c.contested(r.raw) {
		r.ports = r.raw
		return
	}
	r.ports = make([]*ServicePort, 0, len(r.raw))
	for _, p := range r.raw {
		var keep []Frontend
		dropped, lost := false, false
		for j, f := range p.Frontends {
			k := claimKeyOf(f.Addr, f.Port, p.Protocol)
			w := claimant{port: &p.Key, kind: f.Kind}
			if len(c[k]) > 1 {
				w = c.winner(k)
			}
			if *w.port == p.Key && w.kind == f.Kind {
				if dropped {
					keep = append(keep, f)
				}
				continue
			}
			if f.Kind == FrontendClusterIP {
				r.conflicts = append(r.conflicts, Problem{Kind: "Service", Object: svc.String(), Field: frontendField[f.Kind], Service: svc,
					Reason: fmt.Sprintf("ClusterIP %s/%s is also the %s frontend of Service %s, which keeps it; port %s not proxied in this family",
						netip.AddrPortFrom(f.Addr, f.Port), p.Protocol, w.kind, w.port.Service, p.Key.PortName)})
				lost = true
				break
			}
			if !dropped {
				keep = append(make([]Frontend, 0, len(p.Frontends)-1), p.Frontends[:j]...)
				dropped = true
			}
			r.conflicts = append(r.conflicts, Problem{Kind: "Service", Object: svc.String(), Field: frontendField[f.Kind], Service: svc,
				Reason: fmt.Sprintf("%s %s/%s is also the %s frontend of Service %s, which keeps it; skipped",
					f.Kind, netip.AddrPortFrom(f.Addr, f.Port), p.Protocol, w.kind, w.port.Service)})
		}
		switch {
		case lost:
		case dropped:
			cp := *p
			cp.Frontends = keep
			r.ports = append(r.ports, &cp)
		default:
			r.ports = append(r.ports, p)
		}
	}
}

// contested reports whether any frontend of ports shares its destination.
func (c claims) contested(ports []*ServicePort) bool {
	for _, p := range ports {
		for _, f := range p.Frontends {
			if len(c[claimKeyOf(f.Addr, f.Port, p.Protocol)]) > 1 {
				return true
			}
		}
	}
	return false
}
