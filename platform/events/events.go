// Package events reports, as Kubernetes Events on the Service, the problems a
// Service's owner must fix: fields the core rejected (an invalid source
// range, a bad port) and features a Windows node cannot express. Events are
// where `kubectl describe service` shows them, so the owner learns of the
// problem without reading proxy logs. Each problem is reported once while it
// lasts, not on every sync.
package events

import (
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/crossproxy/crossproxy/core"
)

const (
	// Component is the source component of crossproxy's events.
	Component = "crossproxy"
	// ReasonInvalid marks a Service field the proxy rejected.
	ReasonInvalid = "CrossproxyInvalidField"
	// ReasonUnsupported marks a feature this node's data plane cannot express.
	ReasonUnsupported = "CrossproxyUnsupported"
	// ReasonOtherProxy marks another Service proxy found on the node.
	ReasonOtherProxy = "CrossproxyOtherProxy"
)

// Recorder turns problems into Events. It satisfies the Windows backend's
// Notifier (Unsupported) and takes the core's problems after each sync.
type Recorder struct {
	rec         record.EventRecorder
	broadcaster record.EventBroadcaster
	node        string
	// Lookup, when set, returns the Service so events carry its UID (they
	// still land on the Service by namespace and name without it).
	Lookup func(types.NamespacedName) *v1.Service

	mu       sync.Mutex
	reported map[string]struct{}
}

// New returns a Recorder that writes Events through client, as node.
func New(client kubernetes.Interface, node string, log logrus.FieldLogger) *Recorder {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	if log != nil {
		b.StartEventWatcher(func(e *v1.Event) {
			log.WithFields(logrus.Fields{"service": e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name, "reason": e.Reason}).Info("event: " + e.Message)
		})
	}
	return newWithRecorder(b.NewRecorder(scheme.Scheme, v1.EventSource{Component: Component, Host: node}), b, node)
}

func newWithRecorder(rec record.EventRecorder, b record.EventBroadcaster, node string) *Recorder {
	return &Recorder{rec: rec, broadcaster: b, node: node, reported: map[string]struct{}{}}
}

// Problems reports the Service problems of a computed state. A problem is
// reported when it first appears; one that disappears and comes back is
// reported again.
func (r *Recorder) Problems(problems []core.Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	current := map[string]struct{}{}
	for _, p := range problems {
		if p.Service.Name == "" {
			continue
		}
		key := "p\x00" + p.String()
		current[key] = struct{}{}
		if _, done := r.reported[key]; done {
			continue
		}
		msg := fmt.Sprintf("node %s: %s %s field %s: %s; the rest of the Service is proxied", r.node, p.Kind, p.Object, p.Field, p.Reason)
		r.rec.Event(r.ref(p.Service), v1.EventTypeWarning, ReasonInvalid, msg)
	}
	for key := range r.reported {
		if key[0] == 'p' {
			if _, ok := current[key]; !ok {
				delete(r.reported, key)
			}
		}
	}
	for key := range current {
		r.reported[key] = struct{}{}
	}
}

// Unsupported reports a feature this node cannot express for a Service
// (the Windows backend's Notifier). The backend calls it once per Service and
// feature; the Recorder does not block.
func (r *Recorder) Unsupported(svc types.NamespacedName, feature, detail string) {
	msg := fmt.Sprintf("node %s cannot express %s", r.node, feature)
	if detail != "" {
		msg += ": " + detail
	}
	r.rec.Event(r.ref(svc), v1.EventTypeWarning, ReasonUnsupported, msg)
}

// OtherProxies reports, as a Warning on this node's Node object, each other
// Service proxy found programming the node (name and what gave it away),
// once while it stays; one that goes and comes back is reported again.
// `kubectl describe node` shows it.
func (r *Recorder) OtherProxies(found map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.reported {
		if key[0] == 'o' {
			if _, ok := found[key[2:]]; !ok {
				delete(r.reported, key)
			}
		}
	}
	for name, evidence := range found {
		key := "o\x00" + name
		if _, done := r.reported[key]; done {
			continue
		}
		r.reported[key] = struct{}{}
		msg := fmt.Sprintf("another Service proxy programs node %s beside crossproxy: %s (%s); both translate the same Service addresses, each its own way: stop it", r.node, name, evidence)
		// kubectl describe node finds a Node's events by a UID equal to its
		// name, as the kubelet writes them.
		ref := &v1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: r.node, UID: types.UID(r.node)}
		r.rec.Event(ref, v1.EventTypeWarning, ReasonOtherProxy, msg)
	}
}

// Shutdown flushes and stops the event pipeline.
func (r *Recorder) Shutdown() {
	if r.broadcaster != nil {
		r.broadcaster.Shutdown()
	}
}

func (r *Recorder) ref(svc types.NamespacedName) *v1.ObjectReference {
	ref := &v1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name}
	if r.Lookup != nil {
		if s := r.Lookup(svc); s != nil {
			ref.UID = s.UID
			ref.ResourceVersion = s.ResourceVersion
		}
	}
	return ref
}
