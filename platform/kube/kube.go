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
	objs := informers.NewSharedInformerFactoryWithOptions(s.Client, s.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }),
		informers.WithTransform(compact.transform))
	nodes := informers.NewSharedInformerFactoryWithOptions(s.Client, s.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.NodeName).String()
		}),
		informers.WithTransform(stripManagedFields))

	svcInf := objs.Core().V1().Services().Informer()
	idx := svcInf.GetIndexer()
	s.services.Store(&idx)
	sliceInf := objs.Discovery().V1().EndpointSlices().Informer()
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
// UID and resource version); of an EndpointSlice its name, labels, the
// last-change-trigger-time annotation, address type, ports, and per endpoint
// the addresses, conditions, node name, zone and hints. Dropped: managed
// fields; kubectl's last-applied annotation; on slices the owner references,
// other annotations and each endpoint's targetRef (a pod reference: about 200
// bytes per endpoint), hostname and deprecated topology. Node names and zones
// repeat across endpoints, so equal ones share one string, and the readiness
// flags point at shared values. Cached objects are never modified, so the
// sharing is safe.
type compactor struct {
	mu      sync.Mutex
	strings map[string]*string
}

var (
	sharedTrue, sharedFalse = true, false
)

func (c *compactor) transform(o any) (any, error) {
	switch obj := o.(type) {
	case *v1.Service:
		obj.ManagedFields = nil
		if _, ok := obj.Annotations[lastApplied]; ok {
			obj.Annotations = withoutKey(obj.Annotations, lastApplied)
		}
	case *discovery.EndpointSlice:
		obj.ManagedFields, obj.OwnerReferences = nil, nil
		if len(obj.Annotations) > 0 {
			if v, ok := obj.Annotations[core.AnnotationTriggerTime]; ok && len(obj.Annotations) == 1 {
				// already only the one annotation the proxy reads
			} else if ok {
				obj.Annotations = map[string]string{core.AnnotationTriggerTime: v}
			} else {
				obj.Annotations = nil
			}
		}
		c.mu.Lock()
		for i := range obj.Endpoints {
			ep := &obj.Endpoints[i]
			ep.TargetRef, ep.Hostname, ep.DeprecatedTopology = nil, nil, nil
			ep.NodeName, ep.Zone = c.intern(ep.NodeName), c.intern(ep.Zone)
			ep.Conditions.Ready = shareBool(ep.Conditions.Ready)
			ep.Conditions.Serving = shareBool(ep.Conditions.Serving)
			ep.Conditions.Terminating = shareBool(ep.Conditions.Terminating)
		}
		c.mu.Unlock()
	default:
		return stripManagedFields(o)
	}
	return o, nil
}

// intern returns the shared pointer for a string value. The table holds one
// entry per node name and zone the cluster has.
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
