package kube

import (
	"encoding/json"
	"net/netip"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/crossproxy/crossproxy/core"
)

// encodeProto is an object as the API server sends it to this proxy's
// clients (UseProtobuf): the protobuf envelope with its type.
func encodeProto(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil {
		t.Fatal(err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	data, err := runtime.Encode(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// FuzzDecodeToCore feeds arbitrary bytes through the path an object from the
// API server takes to the core: client-go's decoder (protobuf, as the proxy
// asks for, or JSON), the informers' transform (the compactor) and the
// core's Tracker. Nothing may panic, and the compaction may not change what
// the core computes: a Service and an EndpointSlice decoded from the bytes
// give the same node state, problems included, compacted or not. The seeds
// are the bad objects of the fault suite (test/faults): a port 0, an unknown
// protocol, an endpoint of the wrong family, duplicate endpoints.
func FuzzDecodeToCore(f *testing.F) {
	port, proto, bad := int32(8080), v1.ProtocolTCP, v1.Protocol("HTTP")
	ready, node := true, "n1"
	svc := &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: v1.ServiceSpec{ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}, Type: v1.ServiceTypeNodePort,
			Ports: []v1.ServicePort{{Name: "a", Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP},
				{Name: "b", Port: 0, Protocol: bad}}}}
	slice := &discovery.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default",
		Labels: map[string]string{discovery.LabelServiceName: "web", "other": "x"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptrTo("a"), Port: &port, Protocol: &proto}},
		Endpoints: []discovery.Endpoint{
			{Addresses: []string{"10.1.0.1"}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node},
			{Addresses: []string{"10.1.0.1"}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node},
			{Addresses: []string{"fd00::1"}, NodeName: &node}}}
	f.Add(encodeProto(f, svc), encodeProto(f, slice))
	js, _ := json.Marshal(svc)
	f.Add(js, encodeProto(f, slice))
	decoder := scheme.Codecs.UniversalDeserializer()
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}, HostAddresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	nodeObj := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: v1.NodeStatus{Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.1"}}}}
	f.Fuzz(func(t *testing.T, svcData, sliceData []byte) {
		// One Service and one EndpointSlice at the most: two objects of a
		// name are a duplicate that Compute reports and the Tracker, keyed
		// by name, cannot see.
		var services []*v1.Service
		var slices []*discovery.EndpointSlice
		if obj, _, err := decoder.Decode(svcData, nil, nil); err == nil {
			if s, ok := obj.(*v1.Service); ok {
				services = append(services, s)
			}
		}
		if obj, _, err := decoder.Decode(sliceData, nil, nil); err == nil {
			if s, ok := obj.(*discovery.EndpointSlice); ok {
				slices = append(slices, s)
			}
		}
		if len(services)+len(slices) == 0 {
			return
		}
		want, err := core.Compute(opts, nodeObj, services, slices)
		if err != nil {
			t.Fatalf("compute: %v", err)
		}
		c := &compactor{}
		tr, err := core.NewTracker(opts)
		if err != nil {
			t.Fatal(err)
		}
		tr.SetNode(nodeObj)
		var cServices []*v1.Service
		var cSlices []*discovery.EndpointSlice
		for _, s := range services {
			o, err := c.transform(s.DeepCopy())
			if err != nil {
				t.Fatalf("transform service: %v", err)
			}
			cServices = append(cServices, o.(*v1.Service))
			tr.UpsertService(o.(*v1.Service))
		}
		for _, s := range slices {
			o, err := c.transform(s.DeepCopy())
			if err != nil {
				t.Fatalf("transform slice: %v", err)
			}
			cSlices = append(cSlices, o.(*discovery.EndpointSlice))
			tr.UpsertSlice(o.(*discovery.EndpointSlice))
		}
		compacted, err := core.Compute(opts, nodeObj, cServices, cSlices)
		if err != nil {
			t.Fatalf("compute compacted: %v", err)
		}
		tracked, _ := tr.Snapshot()
		w, _ := json.Marshal(want)
		for name, got := range map[string]*core.NodeState{"Compute of the compacted objects": compacted, "the Tracker": tracked} {
			if g, _ := json.Marshal(got); string(g) != string(w) {
				t.Fatalf("%s differs from Compute of the decoded objects:\n got %s\nwant %s", name, g, w)
			}
		}
	})
}
