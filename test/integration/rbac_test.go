//go:build integration && linux

package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform/events"
	"github.com/crossproxy/crossproxy/test/harness"
)

const rbacFile = "../../installer/linux/rbac.yaml"

// shippedRBAC reads the installer's ServiceAccount, ClusterRole and binding
// of the proxy itself (all named crossproxy).
func shippedRBAC(t *testing.T) (*v1.ServiceAccount, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding) {
	t.Helper()
	all := shippedRBACObjects(t)
	var sa *v1.ServiceAccount
	var role *rbacv1.ClusterRole
	var binding *rbacv1.ClusterRoleBinding
	for _, o := range all.serviceAccounts {
		if o.Name == "crossproxy" {
			sa = o
		}
	}
	for _, o := range all.clusterRoles {
		if o.Name == "crossproxy" {
			role = o
		}
	}
	for _, o := range all.clusterRoleBindings {
		if o.Name == "crossproxy" {
			binding = o
		}
	}
	if sa == nil || role == nil || binding == nil {
		t.Fatalf("%s lacks the ServiceAccount, ClusterRole or ClusterRoleBinding named crossproxy", rbacFile)
	}
	return sa, role, binding
}

// rbacObjects are the cluster-wide objects of the shipped RBAC file.
type rbacObjects struct {
	serviceAccounts     []*v1.ServiceAccount
	clusterRoles        []*rbacv1.ClusterRole
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

// shippedRBACObjects reads every ServiceAccount, ClusterRole and
// ClusterRoleBinding of installer/linux/rbac.yaml.
func shippedRBACObjects(t *testing.T) rbacObjects {
	t.Helper()
	data, err := os.ReadFile(rbacFile)
	if err != nil {
		t.Fatalf("shipped RBAC: %v", err)
	}
	data = bytes.ReplaceAll(data, []byte("@VERSION@"), []byte("test"))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out rbacObjects
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if err != io.EOF {
				t.Fatalf("%s: %v", rbacFile, err)
			}
			break
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		switch doc["kind"] {
		case "ServiceAccount":
			o := &v1.ServiceAccount{}
			decodeJSON(t, b, o)
			out.serviceAccounts = append(out.serviceAccounts, o)
		case "ClusterRole":
			o := &rbacv1.ClusterRole{}
			decodeJSON(t, b, o)
			out.clusterRoles = append(out.clusterRoles, o)
		case "ClusterRoleBinding":
			o := &rbacv1.ClusterRoleBinding{}
			decodeJSON(t, b, o)
			out.clusterRoleBindings = append(out.clusterRoleBindings, o)
		}
	}
	return out
}

// TestShippedClusterRoleGrantsOnlyWhatProxyUses parses the role: list/watch of
// Services, EndpointSlices and Nodes (ServiceCIDRs allowed), create/patch of
// Events, create of the token and access reviews the secure endpoint asks
// for, and nothing else.
func TestShippedClusterRoleGrantsOnlyWhatProxyUses(t *testing.T) {
	sa, role, binding := shippedRBAC(t)
	allowed := map[string][]string{
		"/services":                                 {"list", "watch"},
		"discovery.k8s.io/endpointslices":           {"list", "watch"},
		"/nodes":                                    {"list", "watch"},
		"networking.k8s.io/servicecidrs":            {"list", "watch"},
		"/events":                                   {"create", "patch"},
		"events.k8s.io/events":                      {"create", "patch"},
		"authentication.k8s.io/tokenreviews":        {"create"},
		"authorization.k8s.io/subjectaccessreviews": {"create"},
	}
	for i, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("rule %d: nonResourceURLs/resourceNames are not expected: %+v", i, r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				ok := allowed[g+"/"+res]
				if ok == nil {
					t.Errorf("rule %d grants %s in group %q, which crossproxy does not use", i, res, g)
					continue
				}
				for _, v := range r.Verbs {
					if !slices.Contains(ok, v) {
						t.Errorf("rule %d grants %q on %s/%s; only %v are used", i, v, g, res, ok)
					}
				}
			}
		}
	}
	if sa.Namespace != "kube-system" || sa.Name != "crossproxy" {
		t.Errorf("service account %s/%s, want kube-system/crossproxy", sa.Namespace, sa.Name)
	}
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 || binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind role %s to %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
}

// TestRunsWithShippedRBAC: crossproxy authenticated as the ServiceAccount
// with only the shipped role works; the same identity is refused everything
// else; events reach the Service.
func TestRunsWithShippedRBAC(t *testing.T) {
	e := newEnv(t)
	sa, role, binding := shippedRBAC(t)
	if _, err := e.admin.CoreV1().ServiceAccounts(sa.Namespace).Create(e.ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RbacV1().ClusterRoleBindings().Create(e.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.api.UserConfig(harness.CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	limited := kubernetes.NewForConfigOrDie(cfg)

	// The RBAC authorizer reads bindings from an informer cache, so a binding
	// just created takes effect a moment later; on a busy machine that moment
	// is seconds. Wait for it before asking questions whose answer depends on it.
	waitAuthorized(t, e, limited, authzv1.ResourceAttributes{Verb: "list", Resource: "services"})

	// The apiserver's own answer for each request crossproxy makes, and for
	// a few it must not be able to make.
	for _, c := range []struct {
		attrs authzv1.ResourceAttributes
		want  bool
	}{
		{authzv1.ResourceAttributes{Verb: "list", Resource: "services"}, true},
		{authzv1.ResourceAttributes{Verb: "watch", Resource: "services"}, true},
		{authzv1.ResourceAttributes{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}, true},
		{authzv1.ResourceAttributes{Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"}, true},
		{authzv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{authzv1.ResourceAttributes{Verb: "watch", Resource: "nodes"}, true},
		{authzv1.ResourceAttributes{Verb: "create", Resource: "events", Namespace: "default"}, true},
		{authzv1.ResourceAttributes{Verb: "patch", Resource: "events", Namespace: "default"}, true},
		{authzv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "kube-system"}, false},
		{authzv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
		{authzv1.ResourceAttributes{Verb: "update", Resource: "services", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "patch", Resource: "services", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "update", Resource: "services", Subresource: "status", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "create", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "delete", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"}, false},
		{authzv1.ResourceAttributes{Verb: "update", Resource: "nodes"}, false},
		{authzv1.ResourceAttributes{Verb: "patch", Resource: "nodes", Subresource: "status"}, false},
		{authzv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false},
		{authzv1.ResourceAttributes{Verb: "list", Resource: "configmaps"}, false},
		{authzv1.ResourceAttributes{Verb: "delete", Resource: "events", Namespace: "default"}, false},
	} {
		attrs := c.attrs
		r, err := accessReview(e, limited, attrs)
		if err != nil {
			t.Fatalf("access review %+v: %v", attrs, err)
		}
		if r.Status.Allowed != c.want {
			t.Errorf("%s %s/%s %s (ns %q): allowed=%v, want %v", attrs.Verb, attrs.Group, attrs.Resource, attrs.Subresource, attrs.Namespace, r.Status.Allowed, c.want)
		}
	}
	// And for real: reading secrets and changing a Service are refused.
	if _, err := limited.CoreV1().Secrets("kube-system").List(e.ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets as crossproxy: %v, want Forbidden", err)
	}
	web := e.service("web")
	web.Spec.Ports[0].Port = 8081
	if _, err := limited.CoreV1().Services("default").Update(e.ctx, web, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("update service as crossproxy: %v, want Forbidden", err)
	}

	// The proxy runs with that identity and programs the node.
	e.user = harness.CrossproxyUser
	e.startProxy()
	e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(web), backendAddrs[0])
	if log := e.proxy.logText(); strings.Contains(log, "forbidden") {
		t.Errorf("crossproxy log mentions forbidden requests:\n%s", log)
	}

	// Events as that identity land on the Service, with its UID.
	rec := events.New(limited, e.node, nil)
	defer rec.Shutdown()
	rec.Lookup = func(k types.NamespacedName) *v1.Service {
		s, _ := e.admin.CoreV1().Services(k.Namespace).Get(e.ctx, k.Name, metav1.GetOptions{})
		return s
	}
	key := types.NamespacedName{Namespace: "default", Name: "web"}
	rec.Problems([]core.Problem{{Kind: "Service", Object: "default/web", Field: "spec.loadBalancerSourceRanges[0]",
		Reason: `"010.0.0.0/8" is not a CIDR; range ignored`, Service: key}})
	rec.Unsupported(key, "sessionAffinity", "example notice from a Windows node")
	deadline := time.Now().Add(15 * time.Second)
	for {
		list, err := e.admin.CoreV1().Events("default").List(e.ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "web").String()})
		if err != nil {
			t.Fatal(err)
		}
		reasons := map[string]bool{}
		for _, ev := range list.Items {
			if ev.InvolvedObject.UID == web.UID && ev.Source.Component == events.Component && ev.Source.Host == e.node {
				reasons[ev.Reason] = true
			}
		}
		if reasons[events.ReasonInvalid] && reasons[events.ReasonUnsupported] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events on default/web: %+v", list.Items)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func decodeJSON(t *testing.T, b []byte, into any) {
	t.Helper()
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", rbacFile, err)
	}
}

// waitAuthorized polls a SelfSubjectAccessReview until the apiserver allows
// attrs, failing the test after 30 s.
func waitAuthorized(t *testing.T, e *env, client kubernetes.Interface, attrs authzv1.ResourceAttributes) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := accessReview(e, client, attrs)
		if err == nil && r.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s/%s still not allowed 30 s after the binding was created (last error %v)", attrs.Verb, attrs.Group, attrs.Resource, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// accessReview asks the apiserver whether client may do attrs.
func accessReview(e *env, client kubernetes.Interface, attrs authzv1.ResourceAttributes) (*authzv1.SelfSubjectAccessReview, error) {
	return client.AuthorizationV1().SelfSubjectAccessReviews().Create(e.ctx,
		&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
}
