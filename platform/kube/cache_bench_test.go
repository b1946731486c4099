package kube

import (
	"fmt"
	"github.com/crossproxy/crossproxy/test/heapstat"
	"os"
	"runtime"
	"strconv"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// controllerObjects are n Services with one slice of 10 endpoints each, as
// the API server returns them and the EndpointSlice controller writes them
// (pod targetRefs, the managed-by label, an owner reference), encoded in
// protobuf as the informers receive them.
func controllerObjects(tb testing.TB, n int) (services, slices [][]byte) {
	tb.Helper()
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	enc := scheme.Codecs.EncoderForVersion(pb, v1.SchemeGroupVersion)
	sliceEnc := scheme.Codecs.EncoderForVersion(pb, discovery.SchemeGroupVersion)
	for i := range n {
		name := fmt.Sprintf("svc-%05d", i)
		uid := types.UID(fmt.Sprintf("5b1c8e3a-0000-4000-8000-%012d", i))
		svc := &v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: uid, ResourceVersion: fmt.Sprint(1000 + 2*i),
				CreationTimestamp: metav1.Now()},
			Spec: v1.ServiceSpec{Type: v1.ServiceTypeClusterIP, ClusterIP: fmt.Sprintf("10.96.%d.%d", i/250, i%250+1),
				ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)}, IPFamilies: []v1.IPFamily{v1.IPv4Protocol},
				SessionAffinity: v1.ServiceAffinityNone, InternalTrafficPolicy: ptr(v1.ServiceInternalTrafficPolicyCluster),
				IPFamilyPolicy: ptr(v1.IPFamilyPolicySingleStack),
				Ports:          []v1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}}},
		}
		port, proto, pname := int32(8080), v1.ProtocolTCP, "http"
		s := &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-1", Namespace: "bench", UID: uid + "s", ResourceVersion: fmt.Sprint(1001 + 2*i),
				CreationTimestamp: metav1.Now(),
				Labels:            map[string]string{discovery.LabelServiceName: name, discovery.LabelManagedBy: "endpointslice-controller.k8s.io"},
				OwnerReferences:   []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: uid}}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
		}
		for j := range 10 {
			ready, serving, term := true, true, false
			k := i*10 + j
			nn := "xpk-node-abc"
			if j%2 == 1 {
				nn = "other-node"
			}
			s.Endpoints = append(s.Endpoints, discovery.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 100+k/65536, (k/256)%256, k%256)},
				Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &term}, NodeName: &nn,
				TargetRef: &v1.ObjectReference{Kind: "Pod", Namespace: "bench", Name: fmt.Sprintf("%s-%d-7d9f8b6c5-x%04d", name, j, k%10000),
					UID: types.UID(fmt.Sprintf("5b1c8e3a-0000-4000-8000-%012d", k))},
			})
		}
		sb, err := kruntime.Encode(enc, svc)
		if err != nil {
			tb.Fatal(err)
		}
		eb, err := kruntime.Encode(sliceEnc, s)
		if err != nil {
			tb.Fatal(err)
		}
		services, slices = append(services, sb), append(slices, eb)
	}
	return services, slices
}

func ptr[T any](v T) *T { return &v }

// BenchmarkInformerCache decodes BENCH_CACHE_SERVICES (default 10,000)
// Services and their slices as the informers do (protobuf, one new object
// each), passes them through the informers' transform, keeps them in
// informer stores and reports the heap they hold per Service + slice pair:
// the informer caches' share of the proxy's steady heap without an API server
// (BenchmarkScale/heap measures the same through a real one).
// BENCH_CACHE_HEAPPROFILE=path writes the heap profile while the objects are
// held, for `go tool pprof -sample_index=inuse_space`.
func BenchmarkInformerCache(b *testing.B) {
	n := 10000
	if v := os.Getenv("BENCH_CACHE_SERVICES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("BENCH_CACHE_SERVICES=%q: want a positive number", v)
		}
	}
	svcs, slices := controllerObjects(b, n)
	dec := scheme.Codecs.UniversalDeserializer()
	var held uint64
	for b.Loop() {
		before := heapstat.Inuse()
		c := &compactor{}
		indexers := cache.Indexers{} // as Source.Run makes them
		svcStore := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
		sliceStore := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers)
		for i := range n {
			for _, in := range []struct {
				data  []byte
				store cache.Indexer
			}{{svcs[i], svcStore}, {slices[i], sliceStore}} {
				o, _, err := dec.Decode(in.data, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				// client-go's typed clients decode without the type's
				// apiVersion and kind (runtime.WithoutVersionDecoder).
				o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
				t, err := c.transform(o)
				if err != nil {
					b.Fatal(err)
				}
				if err := in.store.Add(t); err != nil {
					b.Fatal(err)
				}
			}
		}
		held = heapstat.Inuse() - before
		if path := os.Getenv("BENCH_CACHE_HEAPPROFILE"); path != "" {
			heapstat.WriteProfile(b, path)
		}
		runtime.KeepAlive(svcStore)
		runtime.KeepAlive(sliceStore)
	}
	b.ReportMetric(float64(held)/float64(n), "held-B/service")
	b.ReportMetric(float64(held)/(1<<20), "held-MiB")
}
