package main

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"

	"golang.org/x/net/dns/dnsmessage"
)

// ttl is short: specs create and delete Services within seconds.
const ttl = 5

// maxCNAMEs bounds a chain of ExternalName Services naming each other.
const maxCNAMEs = 4

type resolver struct {
	domain   string
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	// hosts are names outside the cluster domain with a fixed IPv4 address
	// (lower case, with the final dot): what a node's own resolver knows,
	// such as the API server's DNS name (--host).
	hosts map[string]netip.Addr
}

// answer builds the response to one query message; a message it cannot
// parse gets FORMERR, or nothing when not even the header parses.
func (r *resolver) answer(req []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, err
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired}
	q, err := p.Question()
	if err != nil {
		resp.RCode = dnsmessage.RCodeFormatError
		return r.pack(resp, nil, nil)
	}
	rcode, records := r.lookup(q, 0)
	resp.RCode = rcode
	resp.Authoritative = r.inDomain(strings.ToLower(q.Name.String()))
	// The pods' only resolver: say so, or BIND's tools warn on every query.
	resp.RecursionAvailable = true
	return r.pack(resp, &q, records)
}

func (r *resolver) pack(h dnsmessage.Header, q *dnsmessage.Question, records []dnsmessage.Resource) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	b.EnableCompression()
	if q != nil {
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		if err := b.Question(*q); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, rr := range records {
		var err error
		switch body := rr.Body.(type) {
		case *dnsmessage.AResource:
			err = b.AResource(rr.Header, *body)
		case *dnsmessage.CNAMEResource:
			err = b.CNAMEResource(rr.Header, *body)
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// inDomain reports whether a lower-case name is the cluster domain or
// under it.
func (r *resolver) inDomain(name string) bool {
	d := strings.ToLower(strings.Trim(r.domain, ".")) + "."
	return name == d || strings.HasSuffix(name, "."+d)
}

// lookup resolves <service>.<namespace>.svc.<domain>. A Service that
// exists answers NOERROR, with no records for types it has none of (AAAA
// on this IPv4 cluster); any other name is NXDOMAIN, also outside the
// domain (there is no upstream): REFUSED would end a resolver's walk down
// the search list (ndots:5 tries svc.ns.svc.cluster.local.cluster.local
// before the name itself), NXDOMAIN makes it try the next. depth counts
// the CNAMEs followed to get here.
func (r *resolver) lookup(q dnsmessage.Question, depth int) (dnsmessage.RCode, []dnsmessage.Resource) {
	name := strings.ToLower(q.Name.String())
	suffix := ".svc." + strings.ToLower(strings.Trim(r.domain, ".")) + "."
	if q.Class != dnsmessage.ClassINET {
		return dnsmessage.RCodeRefused, nil
	}
	if a, ok := r.hosts[name]; ok {
		if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeALL {
			return dnsmessage.RCodeSuccess, nil
		}
		hdr := dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: ttl}
		return dnsmessage.RCodeSuccess, []dnsmessage.Resource{{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}}}
	}
	if !strings.HasSuffix(name, suffix) {
		return dnsmessage.RCodeNameError, nil
	}
	labelsOf := strings.Split(strings.TrimSuffix(name, suffix), ".")
	if len(labelsOf) != 2 {
		// svc.<domain> itself, <namespace>.svc.<domain>, or pod-level names
		// of headless Services: none is a Service.
		return dnsmessage.RCodeNameError, nil
	}
	svc, err := r.services.Services(labelsOf[1]).Get(labelsOf[0])
	if apierrors.IsNotFound(err) {
		return dnsmessage.RCodeNameError, nil
	}
	if err != nil {
		return dnsmessage.RCodeServerFailure, nil
	}
	hdr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		target, err := dnsmessage.NewName(strings.TrimSuffix(svc.Spec.ExternalName, ".") + ".")
		if err != nil {
			return dnsmessage.RCodeServerFailure, nil
		}
		if q.Type != dnsmessage.TypeCNAME && q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA && q.Type != dnsmessage.TypeALL {
			return dnsmessage.RCodeSuccess, nil
		}
		hdr.Type = dnsmessage.TypeCNAME
		out := []dnsmessage.Resource{{Header: hdr, Body: &dnsmessage.CNAMEResource{CNAME: target}}}
		// A CNAME to another Service's name carries that name's records
		// too, as CoreDNS answers: clients then need no second query (and
		// have no upstream to ask for other names).
		if q.Type != dnsmessage.TypeCNAME && depth < maxCNAMEs {
			if rcode, more := r.lookup(dnsmessage.Question{Name: target, Type: q.Type, Class: q.Class}, depth+1); rcode == dnsmessage.RCodeSuccess {
				out = append(out, more...)
			}
		}
		return dnsmessage.RCodeSuccess, out
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeALL {
		return dnsmessage.RCodeSuccess, nil
	}
	hdr.Type = dnsmessage.TypeA
	var out []dnsmessage.Resource
	for _, ip := range r.addresses(svc) {
		out = append(out, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: ip.As4()}})
	}
	return dnsmessage.RCodeSuccess, out
}

// addresses are a Service's IPv4 ClusterIPs or, for a headless Service, the
// ready endpoints of its EndpointSlices (each address once).
func (r *resolver) addresses(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		for _, s := range append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...) {
			if a, err := netip.ParseAddr(s); err == nil && a.Is4() && !contains(out, a) {
				out = append(out, a)
			}
		}
		return out
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc.Name})
	slices, err := r.slices.EndpointSlices(svc.Namespace).List(sel)
	if err != nil {
		return nil
	}
	for _, sl := range slices {
		if sl.AddressType != discoveryv1.AddressTypeIPv4 {
			continue
		}
		for _, ep := range sl.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready && !svc.Spec.PublishNotReadyAddresses {
				continue
			}
			for _, s := range ep.Addresses {
				if a, err := netip.ParseAddr(s); err == nil && !contains(out, a) {
					out = append(out, a)
				}
			}
		}
	}
	return out
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

func serveUDP(c net.PacketConn, r *resolver, logger *slog.Logger) {
	buf := make([]byte, 1500)
	for {
		n, from, err := c.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				logger.Error("udp read", "err", err)
			}
			return
		}
		resp, err := r.answer(buf[:n])
		if err != nil {
			continue
		}
		if _, err := c.WriteTo(resp, from); err != nil {
			logger.Warn("udp write", "to", from, "err", err)
		}
	}
}

func serveTCP(l net.Listener, r *resolver, logger *slog.Logger) {
	for {
		c, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				logger.Error("tcp accept", "err", err)
			}
			return
		}
		go serveConn(c, r)
	}
}

// serveConn answers length-prefixed queries on one TCP connection until
// the client closes it or stays idle for 10 s.
func serveConn(c net.Conn, r *resolver) {
	defer c.Close()
	for {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		var n uint16
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return
		}
		req := make([]byte, n)
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		resp, err := r.answer(req)
		if err != nil {
			return
		}
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		if _, err := c.Write(append(out, resp...)); err != nil {
			return
		}
	}
}
