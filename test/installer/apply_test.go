//go:build integration

package installer

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/test/harness"
)

// applier server-side-applies manifest documents through the dynamic client.
type applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{
		dyn:    dynamic.NewForConfigOrDie(cfg),
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// apply sends one document as an apply patch with strict field validation;
// dryRun asks the server to validate and admit it without storing it.
func (a *applier) apply(ctx context.Context, d Document, dryRun bool) error {
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal(d.Raw, &obj.Object); err != nil {
		return err
	}
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	var ri dynamic.ResourceInterface = a.dyn.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
	}
	body, err := yaml.YAMLToJSON(d.Raw)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: "crossproxy-installer-test", Force: new(bool), FieldValidation: "Strict"}
	*opts.Force = true
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, opts)
	return err
}

// TestManifestsDryRunApply applies every rendered manifest of both OSes to a
// real kube-apiserver with a server-side dry run: schema, strict fields,
// validation (HostProcess rules, probes, capabilities) and admission must all
// accept each object.
func TestManifestsDryRunApply(t *testing.T) {
	s := harness.New(t, harness.Options{})
	a := newApplier(t, s.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for osName, files := range ManifestFiles() {
		docs, err := LoadDocuments(files)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if err := a.apply(ctx, d, true); err != nil {
				t.Errorf("%s: %s %s rejected by the API server: %v", osName, d.Kind, d.Name, err)
			} else {
				t.Logf("%s: %s %s accepted (dry run)", osName, d.Kind, d.Name)
			}
		}
	}

	// A broken manifest must be refused, or the check proves nothing.
	bad := Document{Kind: "DaemonSet", Name: "broken", Raw: []byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: broken, namespace: kube-system}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      securityContext: {windowsOptions: {hostProcess: true}}
      containers: [{name: c, image: x, imagePullPolicy: Sometimes}]
`)}
	if err := a.apply(ctx, bad, true); err == nil {
		t.Error("the API server accepted a DaemonSet with hostProcess but no hostNetwork and a bad pull policy")
	}
}

// TestShippedRBACIsEnoughAndNoMore applies the shipped RBAC for real and then
// acts as crossproxy's ServiceAccount: everything a node proxy does is
// allowed, and writes or reads beyond that are forbidden.
func TestShippedRBACIsEnoughAndNoMore(t *testing.T) {
	s := harness.New(t, harness.Options{})
	a := newApplier(t, s.AdminConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	docs, err := LoadDocuments(ManifestFiles()["linux"][:1]) // rbac.yaml
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if err := a.apply(ctx, d, false); err != nil {
			t.Fatalf("apply %s %s: %v", d.Kind, d.Name, err)
		}
	}
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.UserConfig(harness.CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	cp := kubernetes.NewForConfigOrDie(cfg)

	// RBAC is evaluated per request; bindings take effect within moments.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := cp.CoreV1().Services("").List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	allowed := map[string]func() error{
		"list services": func() error {
			_, err := cp.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return err
		},
		"watch services": func() error { return watchOnce(cp.CoreV1().Services("").Watch(ctx, metav1.ListOptions{})) },
		"list endpointslices": func() error {
			_, err := cp.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return err
		},
		"watch endpointslices": func() error {
			return watchOnce(cp.DiscoveryV1().EndpointSlices("").Watch(ctx, metav1.ListOptions{}))
		},
		"list this node": func() error {
			_, err := cp.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
			return err
		},
		"watch this node": func() error {
			return watchOnce(cp.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"}))
		},
		"create core event": func() error {
			_, err := cp.CoreV1().Events("default").Create(ctx, &v1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "web."},
				InvolvedObject: v1.ObjectReference{Kind: "Service", Namespace: "default", Name: "web"},
				Reason:         "Test", Message: "installer RBAC test", Type: v1.EventTypeWarning,
			}, metav1.CreateOptions{})
			return err
		},
		// The cleanup-on-delete container (issue 37): its own DaemonSet by
		// name; none exists here, so NotFound is the allowed answer.
		"get own daemonset": func() error {
			_, err := cp.AppsV1().DaemonSets("kube-system").Get(ctx, "crossproxy-linux", metav1.GetOptions{})
			return notFoundIsAllowed(err)
		},
		"watch own daemonset by name": func() error {
			return watchOnce(cp.AppsV1().DaemonSets("kube-system").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=crossproxy-windows"}))
		},
	}
	for what, f := range allowed {
		if err := f(); err != nil {
			t.Errorf("%s as crossproxy: %v, want allowed", what, err)
		}
	}

	forbidden := map[string]func() error{
		"get node": func() error { // the informer lists this node by field selector instead
			_, err := cp.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			return err
		},
		"list secrets": func() error {
			_, err := cp.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"list pods": func() error {
			_, err := cp.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		},
		"create service": func() error {
			_, err := cp.CoreV1().Services("default").Create(ctx, &v1.Service{
				ObjectMeta: metav1.ObjectMeta{Name: "x"},
				Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80}}},
			}, metav1.CreateOptions{})
			return err
		},
		"update node": func() error {
			n, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
			if err != nil {
				return nil // not what is tested
			}
			n.Labels = map[string]string{"x": "y"}
			_, err = cp.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		},
		"delete endpointslices": func() error {
			return cp.DiscoveryV1().EndpointSlices("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		},
		"list configmaps": func() error {
			_, err := cp.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"list every daemonset": func() error {
			_, err := cp.AppsV1().DaemonSets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"get kube-proxy's daemonset": func() error {
			_, err := cp.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
			return err
		},
		"delete own daemonset": func() error {
			return cp.AppsV1().DaemonSets("kube-system").Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{})
		},
	}
	for what, f := range forbidden {
		if err := f(); !apierrors.IsForbidden(err) {
			t.Errorf("%s as crossproxy: %v, want Forbidden", what, err)
		}
	}
}

// notFoundIsAllowed: a NotFound answer means the request was authorized.
func notFoundIsAllowed(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// watchOnce turns a watch start into an error and stops the watch.
func watchOnce(w interface{ Stop() }, err error) error {
	if err != nil {
		return err
	}
	w.Stop()
	return nil
}
