// Package kube follows the Kubernetes API for one node: client-go informers
// for Services, EndpointSlices and this node's Node feed a core tracker, and
// a trigger tells the sync loop when something changed. Filtering that the
// API server can do (Services of other proxies, EndpointSlices of headless
// Services, other Nodes) is done there, as kube-proxy does, so a large
// cluster costs the proxy only what it serves.
package kube

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// Source runs the informers of one node.
type Source struct {
	Client   kubernetes.Interface
	NodeName string
	// ProxyName is the service.kubernetes.io/service-proxy-name this proxy
	// serves (core.Options.ProxyName); other proxies' objects are not listed.
	ProxyName string
	Sink      platform.ObjectSink
	// OnChange is called after a change reached the Sink, once the initial
	// listing is complete (the sync loop's Trigger). It is called once when
	// the initial listing completes, so the first sync sees everything.
	OnChange func()
	// OnNode, when set, sees every Node update (nil when the Node is
	// deleted), for health reporting.
	OnNode func(*v1.Node)
	// ResyncPeriod is the informers' resync period (kube-proxy's
	// configSyncPeriod); 0 disables resyncs.
	ResyncPeriod time.Duration
	Log          logrus.FieldLogger

	once     sync.Once
	synced   chan struct{}
	services atomic.Pointer[cache.Indexer]
}

func (s *Source) init() { s.once.Do(func() { s.synced = make(chan struct{}) }) }

// Selectors returns the label selector for Services and EndpointSlices:
// exactly this proxy's name label (or no such label) and not headless.
func Selectors(proxyName string) labels.Selector {
	var name *labels.Requirement
	var err error
	if proxyName == "" {
		name, err = labels.NewRequirement(core.LabelServiceProxyName, selection.DoesNotExist, nil)
	} else {
		name, err = labels.NewRequirement(core.LabelServiceProxyName, selection.Equals, []string{proxyName})
	}
	if err != nil {
		// Only an invalid proxy name gets here; core.Options.Validate
		// rejects it before a Source is built. Select nothing rather than everything.
		return labels.Nothing()
	}
	headless, _ := labels.NewRequirement(core.LabelHeadless, selection.DoesNotExist, nil)
	return labels.NewSelector().Add(*name, *headless)
}

// Run starts the informers, waits for their initial listing, calls OnChange
// once, and then forwards changes until ctx ends. It returns an error only
// when the initial listing fails (ctx ended first).
func (s *Source) Run(ctx context.Context) error {
	if s.Client == nil || s.Sink == nil || s.NodeName == "" {
		return errors.New("kube source: Client, Sink and NodeName are required")
	}
	s.init()
	log := s.Log
	if log == nil {
		log = logrus.New()
	}
	sel := Selectors(s.ProxyName).String()
	compact := &compactor{}
	objs := informers.NewSharedInformerFactoryWithOptions(s.Client, s.ResyncPeriod, informers.WithTransform(compact.transform))
	nodes := informers.NewSharedInformerFactoryWithOptions(s.Client, s.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.NodeName).String()
		}),
		informers.WithTransform(stripManagedFields))

	// The informers get no indexes: the proxy looks objects up only by
	// key, and the factory's default namespace index costs a set entry per
	// object (about 1 MB at 10,000 Services).
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = sel }
	svcInf := objs.InformerFor(&v1.Service{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return coreinformers.NewFilteredServiceInformer(c, metav1.NamespaceAll, resync, cache.Indexers{}, tweak)
	})
	idx := svcInf.GetIndexer()
	s.services.Store(&idx)
	sliceInf := objs.InformerFor(&discovery.EndpointSlice{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return discoveryinformers.NewFilteredEndpointSliceInformer(c, metav1.NamespaceAll, resync, cache.Indexers{}, tweak)
	})
	nodeInf := nodes.Core().V1().Nodes().Informer()

	changed := func() {
		select {
		case <-s.synced:
			if s.OnChange != nil {
				s.OnChange()
			}
		default:
		}
	}
	// Each handler registration reports synced once the handler itself has
	// received every object of the initial listing; the informer's own
	// HasSynced only says its store is filled, while notifications may still
	// be queued, and a first sync from that would be a partial view.
	svcReg, err := svcInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.upsertService(o, changed) },
		UpdateFunc: func(_, o any) { s.upsertService(o, changed) },
		DeleteFunc: func(o any) {
			if svc, ok := unwrap[*v1.Service](o); ok {
				s.Sink.DeleteService(svc)
				changed()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("add service handler: %w", err)
	}
	sliceReg, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.upsertSlice(o, changed) },
		UpdateFunc: func(_, o any) { s.upsertSlice(o, changed) },
		DeleteFunc: func(o any) {
			if sl, ok := unwrap[*discovery.EndpointSlice](o); ok {
				s.Sink.DeleteSlice(sl)
				changed()
			}
		},
	})
	if err != nil {
		return fmt.Errorf("add endpointslice handler: %w", err)
	}
	nodeReg, err := nodeInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.setNode(o, changed) },
		UpdateFunc: func(_, o any) { s.setNode(o, changed) },
		DeleteFunc: func(o any) {
			// The tracker keeps the last Node (its addresses still describe
			// this host); health reports the node as not eligible.
			log.WithField("node", s.NodeName).Warn("Node object deleted; keeping its last known addresses")
			if s.OnNode != nil {
				s.OnNode(nil)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("add node handler: %w", err)
	}

	objs.Start(ctx.Done())
	nodes.Start(ctx.Done())
	defer objs.Shutdown()
	defer nodes.Shutdown()

	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), svcReg.HasSynced, sliceReg.HasSynced, nodeReg.HasSynced) {
		return fmt.Errorf("kube source: initial listing of services, endpointslices and node %s: %w", s.NodeName, ctx.Err())
	}
	fields := logrus.Fields{
		"services": len(svcInf.GetStore().ListKeys()), "endpointslices": len(sliceInf.GetStore().ListKeys()),
		"node": s.NodeName, "took": time.Since(start).Round(time.Millisecond).String(),
	}
	if len(nodeInf.GetStore().ListKeys()) == 0 {
		log.WithFields(fields).Warn("Node object not found: nothing is local and NodePorts have no addresses until it appears (check --hostname-override)")
	} else {
		log.WithFields(fields).Info("initial listing complete")
	}
	close(s.synced)
	if s.OnChange != nil {
		s.OnChange()
	}
	<-ctx.Done()
	return nil
}

// Service returns the cached Service (nil when unknown or not yet listed),
// so events can name its UID without an API call.
func (s *Source) Service(key types.NamespacedName) *v1.Service {
	idx := s.services.Load()
	if idx == nil {
		return nil
	}
	o, ok, err := (*idx).GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return nil
	}
	svc, _ := o.(*v1.Service)
	return svc
}

// Synced is closed when the initial listing is complete.
func (s *Source) Synced() <-chan struct{} {
	s.init()
	return s.synced
}

func (s *Source) upsertService(o any, changed func()) {
	if svc, ok := o.(*v1.Service); ok {
		s.Sink.UpsertService(svc)
		changed()
	}
}

func (s *Source) upsertSlice(o any, changed func()) {
	if sl, ok := o.(*discovery.EndpointSlice); ok {
		s.Sink.UpsertSlice(sl)
		changed()
	}
}

func (s *Source) setNode(o any, changed func()) {
	n, ok := o.(*v1.Node)
	if !ok || n.Name != s.NodeName {
		return
	}
	s.Sink.SetNode(n)
	if s.OnNode != nil {
		s.OnNode(n)
	}
	changed()
}

// unwrap returns the object of a delete notification, also when the
// informer missed the delete and hands over a tombstone.
func unwrap[T any](o any) (T, bool) {
	if t, ok := o.(T); ok {
		return t, true
	}
	if tomb, ok := o.(cache.DeletedFinalStateUnknown); ok {
		t, ok := tomb.Obj.(T)
		return t, ok
	}
	var zero T
	return zero, false
}

// stripManagedFields drops server-side-apply bookkeeping, which can be most
// of an object's size and which the proxy never reads.
func stripManagedFields(o any) (any, error) {
	if m, ok := o.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return o, nil
}

// lastApplied is kubectl's copy of the whole object in an annotation: as
// large as the object itself, and never read by the proxy.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// compactor is the informers' transform for Services and EndpointSlices: it
// drops what the proxy never reads before the object is cached, so every
// cached object (the informer's store, the tracker and the debug endpoint
// share it) costs only what the proxy uses. The core reads of a Service its
// name, labels, creation time, spec and load-balancer status (events also its
// UID and resource version); of an EndpointSlice its name, the labels
// kubernetes.io/service-name and service.kubernetes.io/headless, the
// last-change-trigger-time annotation, address type, ports, and per endpoint
// the addresses, conditions, node name, zone and hints (explain shows the
// same). Dropped: managed fields; kubectl's last-applied annotation; on
// slices the UID, generateName, owner references, other labels and
// annotations, and each endpoint's targetRef (a pod reference: about 200
// bytes per endpoint), hostname and deprecated topology.
//
// What is kept is stored tightly, because at 10,000 Services the decoded
// objects are the largest part of the proxy's heap: the protobuf decoder
// grows a slice's endpoint array by appending (an array of 16 for 10
// endpoints), so the endpoints move to an array of exactly their number,
// and their addresses to one array and one string per slice. Values that
// repeat share one copy: namespaces, node names, zones and port names
// through a table (one entry per distinct value the cluster has), the
// readiness flags and the enumerations of the API (protocols, address
// types, policies, IP families) as the package's own values. Cached objects
// are never modified, so the sharing is safe.
type compactor struct {
	mu      sync.Mutex
	strings map[string]*string
}

var (
	sharedTrue, sharedFalse = true, false
	sharedProtocols         = []*v1.Protocol{ptrTo(v1.ProtocolTCP), ptrTo(v1.ProtocolUDP), ptrTo(v1.ProtocolSCTP)}
	sharedInternalPolicies  = []*v1.ServiceInternalTrafficPolicy{ptrTo(v1.ServiceInternalTrafficPolicyCluster), ptrTo(v1.ServiceInternalTrafficPolicyLocal)}
	sharedFamilyPolicies    = []*v1.IPFamilyPolicy{ptrTo(v1.IPFamilyPolicySingleStack), ptrTo(v1.IPFamilyPolicyPreferDualStack), ptrTo(v1.IPFamilyPolicyRequireDualStack)}
	sharedFamilies          = [][]v1.IPFamily{{v1.IPv4Protocol}, {v1.IPv6Protocol}, {v1.IPv4Protocol, v1.IPv6Protocol}, {v1.IPv6Protocol, v1.IPv4Protocol}}
	// sliceLabelsRead are the EndpointSlice labels the proxy reads; the
	// selector's proxy-name label is kept too, as the API server filtered on
	// it.
	sliceLabelsRead = []string{discovery.LabelServiceName, core.LabelHeadless, core.LabelServiceProxyName}
)

func ptrTo[T any](v T) *T { return &v }

func (c *compactor) transform(o any) (any, error) {
	switch obj := o.(type) {
	case *v1.Service:
		obj.ManagedFields = nil
		if _, ok := obj.Annotations[lastApplied]; ok {
			obj.Annotations = withoutKey(obj.Annotations, lastApplied)
		}
		c.mu.Lock()
		obj.Namespace = c.internValue(obj.Namespace)
		c.mu.Unlock()
		compactServiceSpec(&obj.Spec)
	case *discovery.EndpointSlice:
		c.mu.Lock()
		c.compactSlice(obj)
		c.mu.Unlock()
	default:
		return stripManagedFields(o)
	}
	return o, nil
}

// compactServiceSpec shares the spec's enumerated values with the package's.
func compactServiceSpec(spec *v1.ServiceSpec) {
	spec.Type = known(spec.Type, v1.ServiceTypeClusterIP, v1.ServiceTypeNodePort, v1.ServiceTypeLoadBalancer, v1.ServiceTypeExternalName)
	spec.SessionAffinity = known(spec.SessionAffinity, v1.ServiceAffinityNone, v1.ServiceAffinityClientIP)
	spec.ExternalTrafficPolicy = known(spec.ExternalTrafficPolicy, v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal)
	spec.InternalTrafficPolicy = sharedPtr(spec.InternalTrafficPolicy, sharedInternalPolicies)
	spec.IPFamilyPolicy = sharedPtr(spec.IPFamilyPolicy, sharedFamilyPolicies)
	for _, fams := range sharedFamilies {
		if slices.Equal(spec.IPFamilies, fams) {
			spec.IPFamilies = fams
			break
		}
	}
	if len(spec.ClusterIPs) > 0 && spec.ClusterIPs[0] == spec.ClusterIP {
		spec.ClusterIPs[0] = spec.ClusterIP
	}
	for i := range spec.Ports {
		spec.Ports[i].Protocol = known(spec.Ports[i].Protocol, v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)
	}
}

// compactSlice drops and shares what the comment of compactor says; c.mu is
// held.
func (c *compactor) compactSlice(s *discovery.EndpointSlice) {
	s.ManagedFields, s.OwnerReferences, s.UID, s.GenerateName = nil, nil, "", ""
	s.Namespace = c.internValue(s.Namespace)
	if len(s.Annotations) > 0 {
		if v, ok := s.Annotations[core.AnnotationTriggerTime]; ok && len(s.Annotations) == 1 {
			// already only the one annotation the proxy reads
		} else if ok {
			s.Annotations = map[string]string{core.AnnotationTriggerTime: v}
		} else {
			s.Annotations = nil
		}
	}
	// Unread labels are deleted in place: a new map would cost as much
	// (one group of eight entries) and leave the old one as garbage.
	for k := range s.Labels {
		if !slices.Contains(sliceLabelsRead, k) {
			delete(s.Labels, k)
		}
	}
	s.AddressType = known(s.AddressType, discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN)
	s.Ports = exact(s.Ports)
	for i := range s.Ports {
		p := &s.Ports[i]
		p.Name = c.intern(p.Name)
		p.Protocol = sharedPtr(p.Protocol, sharedProtocols)
	}
	s.Endpoints = exact(s.Endpoints)
	n, size := 0, 0
	for i := range s.Endpoints {
		for _, a := range s.Endpoints[i].Addresses {
			n, size = n+1, size+len(a)
		}
	}
	var text strings.Builder
	text.Grow(size)
	for i := range s.Endpoints {
		for _, a := range s.Endpoints[i].Addresses {
			text.WriteString(a)
		}
	}
	all, addrs, at := text.String(), make([]string, 0, n), 0
	for i := range s.Endpoints {
		ep := &s.Endpoints[i]
		from := len(addrs)
		for _, a := range ep.Addresses {
			addrs = append(addrs, all[at:at+len(a)])
			at += len(a)
		}
		if ep.Addresses != nil {
			ep.Addresses = addrs[from:len(addrs):len(addrs)]
		}
		ep.TargetRef, ep.Hostname, ep.DeprecatedTopology = nil, nil, nil
		ep.NodeName, ep.Zone = c.intern(ep.NodeName), c.intern(ep.Zone)
		ep.Conditions.Ready = shareBool(ep.Conditions.Ready)
		ep.Conditions.Serving = shareBool(ep.Conditions.Serving)
		ep.Conditions.Terminating = shareBool(ep.Conditions.Terminating)
	}
}

// exact returns s in an array of exactly its length: the decoder's array
// of a list grown by appending has up to twice the room.
func exact[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	return append(make([]T, 0, len(s)), s...)
}

// known returns the package's copy of v when v is one of values, so equal
// enumerated values in cached objects share one string.
func known[T ~string](v T, values ...T) T {
	for _, k := range values {
		if v == k {
			return k
		}
	}
	return v
}

// sharedPtr returns the pointer of shared that points to a value equal to
// *p, or p.
func sharedPtr[T comparable](p *T, shared []*T) *T {
	if p == nil {
		return nil
	}
	for _, q := range shared {
		if *q == *p {
			return q
		}
	}
	return p
}

// intern returns the shared pointer for a string value. The table holds one
// entry per node name, zone, namespace and slice port name the cluster has.
func (c *compactor) intern(p *string) *string {
	if p == nil {
		return nil
	}
	if c.strings == nil {
		c.strings = map[string]*string{}
	}
	if q, ok := c.strings[*p]; ok {
		return q
	}
	c.strings[*p] = p
	return p
}

// internValue is intern for a string held by value.
func (c *compactor) internValue(s string) string {
	if s == "" {
		return s
	}
	return *c.intern(&s)
}

func shareBool(p *bool) *bool {
	switch {
	case p == nil:
		return nil
	case *p:
		return &sharedTrue
	}
	return &sharedFalse
}

func withoutKey(m map[string]string, key string) map[string]string {
	out := make(map[string]string, len(m)-1)
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// ClientConfig builds the client configuration: kubeconfig when given (or
// $KUBECONFIG), in-cluster config otherwise. qps and burst of 0 keep
// client-go's defaults.
func ClientConfig(kubeconfig string, qps float32, burst int) (*rest.Config, error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster config (give --kubeconfig outside a pod): %w", err)
		}
	}
	if qps > 0 {
		cfg.QPS = qps
	}
	if burst > 0 {
		cfg.Burst = burst
	}
	cfg.UserAgent = "crossproxy"
	UseProtobuf(cfg)
	return cfg, nil
}

// UseProtobuf makes a client speak protobuf, which is smaller and faster to
// decode than JSON for the large Service and EndpointSlice lists.
func UseProtobuf(cfg *rest.Config) {
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
}
