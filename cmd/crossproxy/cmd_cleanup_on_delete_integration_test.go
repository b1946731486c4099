//go:build integration

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/crossproxy/crossproxy/test/harness"
)

// applyShippedRole creates the Role and RoleBinding of
// installer/linux/rbac.yaml as shipped: what the cleanup container may read.
func applyShippedRole(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "installer", "linux", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	found := 0
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(strings.ReplaceAll(string(b), "@VERSION@", "test"), -1) {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.RbacV1().Roles(r.Namespace).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			found++
		case "RoleBinding":
			var r rbacv1.RoleBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.RbacV1().RoleBindings(r.Namespace).Create(ctx, &r, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			found++
		}
	}
	if found != 2 {
		t.Fatalf("installer/linux/rbac.yaml: %d of Role and RoleBinding", found)
	}
}

func testDaemonSet(annotations map[string]string) *appsv1.DaemonSet {
	labels := map[string]string{"app.kubernetes.io/name": "crossproxy", "app.kubernetes.io/component": "linux"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "crossproxy-linux", Namespace: "kube-system", Annotations: annotations},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "crossproxy", Image: "registry.example/crossproxy:test"}}},
			},
		},
	}
}

// TestCleanupOnDeleteAgainstAPIServer: the cleanup container's watch and
// last question, as the ServiceAccount with the shipped Role, against a real
// kube-apiserver, for each way the pods of a DaemonSet are stopped: only the
// deletions decide to clean. The one that matters most is kubectl delete -f
// of the plain manifests, which deletes the RBAC before the DaemonSet: the
// watch opened before still delivers the deletion.
func TestCleanupOnDeleteAgainstAPIServer(t *testing.T) {
	s := harness.New(t, harness.Options{})
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())
	ctx := context.Background()
	dss := admin.AppsV1().DaemonSets("kube-system")
	cfg, err := s.UserConfig(harness.CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	cp := kubernetes.NewForConfigOrDie(cfg)

	cases := []struct {
		name       string
		annotation map[string]string
		// act does to the DaemonSet what the stop does; until says when the
		// watch has seen it (nil: nothing to see).
		act       func(t *testing.T)
		until     func(o ownerObservation) bool
		wantClean bool
		reason    string
	}{
		{name: "rolling restart, drain, eviction: the DaemonSet stays", reason: "the DaemonSet stays"},
		{name: "helm upgrade: the template changes", act: func(t *testing.T) {
			d, err := dss.Get(ctx, "crossproxy-linux", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			d.Spec.Template.Annotations = map[string]string{"crossproxy.io/config-hash": "new"}
			if _, err := dss.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, reason: "the DaemonSet stays"},
		{name: "helm uninstall, kubectl delete ds (background)", act: func(t *testing.T) {
			bg := metav1.DeletePropagationBackground
			if err := dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil {
				t.Fatal(err)
			}
		}, until: func(o ownerObservation) bool { return o.Deleting }, wantClean: true, reason: "the DaemonSet is gone"},
		{name: "kubectl delete ds --cascade=foreground", act: func(t *testing.T) {
			fg := metav1.DeletePropagationForeground
			if err := dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
				t.Fatal(err)
			}
		}, until: func(o ownerObservation) bool { return o.Deleting }, wantClean: true, reason: "the DaemonSet is being deleted"},
		{name: "kubectl delete -f the manifests: the RBAC first", act: func(t *testing.T) {
			if err := admin.RbacV1().RoleBindings("kube-system").Delete(ctx, "crossproxy", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// RBAC is evaluated per request: wait until the last question
			// is refused, as it is once the uninstall has got that far.
			for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if _, err := cp.AppsV1().DaemonSets("kube-system").Get(ctx, "crossproxy-linux", metav1.GetOptions{}); err != nil {
					break
				}
			}
			if err := dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, until: func(o ownerObservation) bool { return o.Deleting }, wantClean: true, reason: "the watch saw the DaemonSet being deleted (the API server cannot be asked again"},
		{name: "kubectl replace --force: deleted and created again", act: func(t *testing.T) {
			if err := dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := dss.Create(ctx, testDaemonSet(nil), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, until: func(o ownerObservation) bool { return o.Deleting }, reason: "created again"},
		{name: "deleted with the opt-out annotation", annotation: map[string]string{optOutAnnotation: "false"}, act: func(t *testing.T) {
			if err := dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, until: func(o ownerObservation) bool { return o.Deleting }, reason: optOutAnnotation},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applyShippedRole(t, admin)
			if _, err := dss.Create(ctx, testDaemonSet(c.annotation), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = admin.RbacV1().Roles("kube-system").Delete(ctx, "crossproxy", metav1.DeleteOptions{})
				_ = admin.RbacV1().RoleBindings("kube-system").Delete(ctx, "crossproxy", metav1.DeleteOptions{})
				// No garbage collector runs here: a foreground deletion
				// keeps its finalizer until it is taken off.
				if d, err := dss.Get(ctx, "crossproxy-linux", metav1.GetOptions{}); err == nil && len(d.Finalizers) > 0 {
					d.Finalizers = nil
					_, _ = dss.Update(ctx, d, metav1.UpdateOptions{})
				}
				_ = dss.Delete(ctx, "crossproxy-linux", metav1.DeleteOptions{})
				for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
					if _, err := dss.Get(ctx, "crossproxy-linux", metav1.GetOptions{}); err != nil {
						return
					}
				}
			})
			w, stop, err := startWatch(cp, "kube-system", "crossproxy-linux")
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			waitObs := func(what string, f func(ownerObservation) bool) {
				for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
					if f(w.observation()) {
						return
					}
				}
				t.Fatalf("the watch never saw %s: %+v", what, w.observation())
			}
			waitObs("the DaemonSet", func(o ownerObservation) bool { return o.Seen })
			if c.act != nil {
				c.act(t)
			}
			if c.until != nil {
				waitObs("the change", c.until)
			}
			clean, why := decideNow(ctx, cp, "kube-system", "crossproxy-linux", w)
			if clean != c.wantClean || !strings.Contains(why, c.reason) {
				t.Errorf("clean=%v (%s), want %v (%s)", clean, why, c.wantClean, c.reason)
			}
		})
	}
}
