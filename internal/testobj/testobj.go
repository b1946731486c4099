// Package testobj builds the Kubernetes objects that the tests of several
// packages feed the core (a Node, a ClusterIP Service, EndpointSlices and
// their endpoints), so each package's tests start from one definition and
// change only what their case is about. It is for tests only; nothing the
// binary runs imports it.
package testobj

import (
	"strings"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Ptr returns a pointer to v, for the API's optional fields.
func Ptr[T any](v T) *T { return &v }

// Node is a Node named name with the zone label (when zone is not empty) and
// one InternalIP per address; an address written "ext:ADDR" is an ExternalIP.
func Node(name, zone string, addrs ...string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[v1.LabelTopologyZone] = zone
	}
	for _, a := range addrs {
		typ := v1.NodeInternalIP
		if s, ok := strings.CutPrefix(a, "ext:"); ok {
			typ, a = v1.NodeExternalIP, s
		}
		n.Status.Addresses = append(n.Status.Addresses, v1.NodeAddress{Type: typ, Address: a})
	}
	return n
}

// Service is a ClusterIP Service ns/name with the cluster IP clusterIP and one
// TCP port "http" 80 whose targetPort is the named port "http".
func Service(ns, name, clusterIP string) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.ServiceSpec{
			Type:       v1.ServiceTypeClusterIP,
			ClusterIP:  clusterIP,
			ClusterIPs: []string{clusterIP},
			Ports:      []v1.ServicePort{{Name: "http", Port: 80, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromString("http")}},
		},
	}
}

// SlicePort is an EndpointSlice port with every field set.
func SlicePort(name string, proto v1.Protocol, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: Ptr(name), Protocol: Ptr(proto), Port: Ptr(port)}
}

// Slice is an IPv4 EndpointSlice ns/name of Service svc (the service-name
// label) with one port, "http" 8080/TCP, and the endpoints eps.
func Slice(ns, name, svc string, eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discovery.LabelServiceName: svc}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{SlicePort("http", v1.ProtocolTCP, 8080)},
		Endpoints:   eps,
	}
}

// Endpoint is an endpoint with the one address addr on node (empty: no
// nodeName) and unset conditions (ready, as Kubernetes reads them).
func Endpoint(addr, node string) discovery.Endpoint {
	e := discovery.Endpoint{Addresses: []string{addr}}
	if node != "" {
		e.NodeName = Ptr(node)
	}
	return e
}
