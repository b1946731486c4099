//go:build integration

package harness

import (
	"context"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHarnessLifecycle proves the harness gives a working, authenticated,
// RBAC-enforcing apiserver whose data survives an apiserver restart.
func TestHarnessLifecycle(t *testing.T) {
	s := New(t, Options{})
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(s.AdminConfig())

	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80, Protocol: v1.ProtocolTCP}}},
	}
	if _, err := admin.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin create service: %v", err)
	}

	nobodyCfg, err := s.UserConfig(NobodyUser)
	if err != nil {
		t.Fatal(err)
	}
	nobody := kubernetes.NewForConfigOrDie(nobodyCfg)
	if _, err := nobody.CoreV1().Services("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("nobody list services: want Forbidden, got %v", err)
	}

	path, err := s.Kubeconfig(CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("load kubeconfig: %v", err)
	}
	sa := kubernetes.NewForConfigOrDie(kc)
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("self subject review: %v", err)
	}
	if review.Status.UserInfo.Username != CrossproxyUser {
		t.Fatalf("kubeconfig user: got %q, want %q", review.Status.UserInfo.Username, CrossproxyUser)
	}

	if err := s.RestartAPIServer(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	got, err := admin.CoreV1().Services("default").Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get service after restart: %v", err)
	}
	if got.Spec.ClusterIP == "" {
		t.Fatalf("service has no ClusterIP after restart")
	}
}
