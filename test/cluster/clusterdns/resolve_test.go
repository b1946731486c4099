package main

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"golang.org/x/net/dns/dnsmessage"
)

func testResolver(t *testing.T) *resolver {
	t.Helper()
	svcs := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	slices := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	add := func(idx cache.Indexer, obj any) {
		if err := idx.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	add(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.203.0.20", ClusterIPs: []string{"10.203.0.20"}}})
	add(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "foo.example.com"}})
	add(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "alias", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web.ns1.svc.cluster.local"}})
	add(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "loop", Namespace: "ns1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "loop.ns1.svc.cluster.local."}})
	add(svcs, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: "ns2"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}})
	ready, notReady := true, false
	add(slices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "headless-abc", Namespace: "ns2", Labels: map[string]string{discoveryv1.LabelServiceName: "headless"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.202.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}},
			{Addresses: []string{"10.202.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &notReady}},
			{Addresses: []string{"10.202.2.8"}},
		},
	})
	// A slice of another Service in the namespace is not headless's.
	add(slices, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "other-abc", Namespace: "ns2", Labels: map[string]string{discoveryv1.LabelServiceName: "other"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.202.1.99"}}},
	})
	return &resolver{domain: "cluster.local", services: corelisters.NewServiceLister(svcs), slices: discoverylisters.NewEndpointSliceLister(slices)}
}

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 42, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	m, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// parse returns the response's code and its answers as text.
func parse(t *testing.T, resp []byte) (dnsmessage.RCode, []string) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatal(err)
	}
	if m.Header.ID != 42 || !m.Header.Response {
		t.Errorf("header = %+v", m.Header)
	}
	var out []string
	for _, a := range m.Answers {
		switch b := a.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, net.IP(b.A[:]).String())
		case *dnsmessage.CNAMEResource:
			out = append(out, "CNAME "+b.CNAME.String())
		}
	}
	return m.Header.RCode, out
}

func TestLookup(t *testing.T) {
	r := testResolver(t)
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{"web.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.203.0.20"}},
		{"WEB.NS1.svc.Cluster.Local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.203.0.20"}},
		{"web.ns1.svc.cluster.local.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"ext.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"CNAME foo.example.com."}},
		// An ExternalName naming another Service answers with its address.
		{"alias.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"CNAME web.ns1.svc.cluster.local.", "10.203.0.20"}},
		{"alias.ns1.svc.cluster.local.", dnsmessage.TypeCNAME, dnsmessage.RCodeSuccess, []string{"CNAME web.ns1.svc.cluster.local."}},
		// A loop ends after maxCNAMEs+1 records.
		{"loop.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"CNAME loop.ns1.svc.cluster.local.", "CNAME loop.ns1.svc.cluster.local.", "CNAME loop.ns1.svc.cluster.local.", "CNAME loop.ns1.svc.cluster.local.", "CNAME loop.ns1.svc.cluster.local."}},
		// Ready and unknown-readiness endpoints, not the unready one, and
		// nothing of the other Service's slice.
		{"headless.ns2.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.202.1.5", "10.202.2.8"}},
		{"web.ns2.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"a.web.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"web.ns1.svc.cluster.local.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		// Outside the Services' names NXDOMAIN, never REFUSED, so that a
		// resolver walking its search list goes on to the next name.
		{"web.ns1.svc.cluster.local.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"example.com.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"web.ns1.svc.other.local.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
	} {
		resp, err := r.answer(query(t, c.name, c.typ))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rcode, got := parse(t, resp)
		if rcode != c.rcode || len(got) != len(c.want) {
			t.Errorf("%s %v: %v %v, want %v %v", c.name, c.typ, rcode, got, c.rcode, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s %v: %v, want %v", c.name, c.typ, got, c.want)
			}
		}
	}
	// Authoritative inside the domain only; recursion always "available".
	for name, aa := range map[string]bool{"web.ns1.svc.cluster.local.": true, "nope.ns1.svc.cluster.local.": true, "example.com.": false} {
		resp, err := r.answer(query(t, name, dnsmessage.TypeA))
		if err != nil {
			t.Fatal(err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(resp); err != nil {
			t.Fatal(err)
		}
		if m.Header.Authoritative != aa || !m.Header.RecursionAvailable {
			t.Errorf("%s: AA %v RA %v, want AA %v RA true", name, m.Header.Authoritative, m.Header.RecursionAvailable, aa)
		}
	}
	if _, err := r.answer([]byte{1, 2}); err == nil {
		t.Error("a truncated header got an answer")
	}
}

// The servers answer over real sockets, UDP and TCP, as a pod's resolver
// asks.
func TestServeUDPAndTCP(t *testing.T) {
	r := testResolver(t)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", udp.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	defer tcp.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go serveUDP(udp, r, logger)
	go serveTCP(tcp, r, logger)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := (&net.Dialer{}).DialContext(ctx, "udp", udp.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(query(t, "web.ns1.svc.cluster.local.", dnsmessage.TypeA)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if rcode, got := parse(t, buf[:n]); rcode != dnsmessage.RCodeSuccess || len(got) != 1 || got[0] != "10.203.0.20" {
		t.Errorf("udp: %v %v", rcode, got)
	}

	tc, err := (&net.Dialer{}).DialContext(ctx, "tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 2; i++ { // two queries on one connection
		q := query(t, "headless.ns2.svc.cluster.local.", dnsmessage.TypeA)
		if _, err := tc.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			t.Fatal(err)
		}
		var l uint16
		if err := binary.Read(tc, binary.BigEndian, &l); err != nil {
			t.Fatal(err)
		}
		resp := make([]byte, l)
		if _, err := io.ReadFull(tc, resp); err != nil {
			t.Fatal(err)
		}
		if rcode, got := parse(t, resp); rcode != dnsmessage.RCodeSuccess || len(got) != 2 {
			t.Errorf("tcp query %d: %v %v", i, rcode, got)
		}
	}
}

// TestHosts: a --host name answers its address outside the cluster domain
// (the API server's DNS name, as a node's resolver knows it), case-blind;
// other types get no records; names not listed stay NXDOMAIN.
func TestHosts(t *testing.T) {
	r := testResolver(t)
	h := hostFlag{}
	if err := h.Set("API.xpc-cluster.internal=10.201.0.1"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"api", "api=fd00::1", "=10.0.0.1", "api=x"} {
		if err := h.Set(bad); err == nil {
			t.Errorf("--host %s accepted", bad)
		}
	}
	r.hosts = h
	for _, c := range []struct {
		name  string
		typ   dnsmessage.Type
		rcode dnsmessage.RCode
		want  []string
	}{
		{"api.xpc-cluster.internal.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.201.0.1"}},
		{"Api.Xpc-Cluster.Internal.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.201.0.1"}},
		{"api.xpc-cluster.internal.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, nil},
		{"other.xpc-cluster.internal.", dnsmessage.TypeA, dnsmessage.RCodeNameError, nil},
		{"web.ns1.svc.cluster.local.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"10.203.0.20"}},
	} {
		resp, err := r.answer(query(t, c.name, c.typ))
		if err != nil {
			t.Fatal(err)
		}
		rcode, got := parse(t, resp)
		if rcode != c.rcode || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s %v: %v %v, want %v %v", c.name, c.typ, rcode, got, c.rcode, c.want)
		}
	}
}
