package debug

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// reviewer answers TokenReviews and SubjectAccessReviews as an API server
// with two ServiceAccount tokens would: "reader" (granted the access) and
// "stranger" (not), each issued for the audience it names; "down" makes
// the API server fail.
type reviewer struct {
	tokenReviews, accessReviews atomic.Int32
	// sar is the last access review asked.
	sar authzv1.SubjectAccessReviewSpec
}

func (rv *reviewer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv.tokenReviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		user, aud, _ := strings.Cut(tr.Spec.Token, "@")
		out := tr.DeepCopy()
		switch {
		case user == "down":
			return true, nil, errors.New("connection refused")
		case user != "reader" && user != "stranger":
			out.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		case !slices.Contains(tr.Spec.Audiences, aud):
			// The API server refuses a token whose audiences do not
			// intersect the review's.
			out.Status = authnv1.TokenReviewStatus{Error: "token audiences " + aud + " is invalid for the target audiences"}
		default:
			out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud},
				User: authnv1.UserInfo{Username: "system:serviceaccount:kube-system:" + user, Groups: []string{"system:serviceaccounts"}}}
		}
		return true, out, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rv.accessReviews.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		rv.sar = sar.Spec
		out := sar.DeepCopy()
		out.Status.Allowed = sar.Spec.User == "system:serviceaccount:kube-system:reader"
		return true, out, nil
	})
	return c
}

func authServer(t *testing.T, rv *reviewer) *httptest.Server {
	t.Helper()
	c := rv.client()
	a := &Auth{Tokens: c.AuthenticationV1().TokenReviews(), Access: c.AuthorizationV1().SubjectAccessReviews(),
		Audience: DefaultAudience, NodeName: "node-a", Log: quiet()}
	sum := &Summary{NodeName: "node-a", Version: "v9"}
	sum.Start()
	srv := httptest.NewTLSServer(a.Wrap(&Secure{Handler: &Handler{NodeName: "node-a", Log: quiet()}, Summary: sum}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, header, value string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+StatusPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if header != "" {
		req.Header.Set(header, value)
	}
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestAuthRefusesWhatTheAPIServerDoesNotGrant(t *testing.T) {
	rv := &reviewer{}
	srv := authServer(t, rv)
	for _, c := range []struct {
		name, header, value string
		code                int
		says                string
	}{
		{"no token", "", "", http.StatusUnauthorized, "no bearer token"},
		{"not bearer", "Authorization", "Basic cmVhZGVyOng=", http.StatusUnauthorized, "no bearer token"},
		{"unknown token", TokenHeader, "Bearer forged@crossproxy", http.StatusUnauthorized, "invalid bearer token"},
		{"token for the API server", TokenHeader, "Bearer reader@https://kubernetes.default.svc", http.StatusUnauthorized, "invalid for the target audiences"},
		{"no RBAC", TokenHeader, "Bearer stranger@crossproxy", http.StatusForbidden, `kube-system:stranger may not get proxies.crossproxy.io "node-a"`},
		{"API server down", "Authorization", "Bearer down@crossproxy", http.StatusServiceUnavailable, "connection refused"},
	} {
		code, body := get(t, srv, c.header, c.value)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: %d %q, want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	// The access asked is get proxies.crossproxy.io named for this node.
	want := authzv1.ResourceAttributes{Verb: "get", Group: "crossproxy.io", Resource: "proxies", Name: "node-a"}
	if rv.sar.ResourceAttributes == nil || *rv.sar.ResourceAttributes != want {
		t.Errorf("access review asked %+v, want %+v", rv.sar.ResourceAttributes, want)
	}
}

func TestAuthAnswersTheGrantedAndCachesReviews(t *testing.T) {
	rv := &reviewer{}
	srv := authServer(t, rv)
	for _, h := range []string{TokenHeader, "Authorization", TokenHeader} {
		code, body := get(t, srv, h, "Bearer reader@crossproxy")
		if code != http.StatusOK {
			t.Fatalf("reader through %s: %d %s", h, code, body)
		}
		var st NodeStatus
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.Node != "node-a" || st.Version != "v9" {
			t.Fatalf("status %q: %v", body, err)
		}
	}
	// Three requests with one token: one review of each kind (kubelet's
	// cache times), so a status of a large cluster costs each node two.
	if n, m := rv.tokenReviews.Load(), rv.accessReviews.Load(); n != 1 || m != 1 {
		t.Errorf("token reviews %d, access reviews %d; want 1 and 1", n, m)
	}
	// A denial is cached too, and a second token is reviewed on its own.
	get(t, srv, TokenHeader, "Bearer stranger@crossproxy")
	get(t, srv, TokenHeader, "Bearer stranger@crossproxy")
	if n, m := rv.tokenReviews.Load(), rv.accessReviews.Load(); n != 2 || m != 2 {
		t.Errorf("after the stranger twice: token reviews %d, access reviews %d; want 2 and 2", n, m)
	}
}

func TestSecureRefusesWrites(t *testing.T) {
	rv := &reviewer{}
	srv := authServer(t, rv)
	req, _ := http.NewRequest(http.MethodPost, srv.URL+StatusPath, strings.NewReader("{}"))
	req.Header.Set(TokenHeader, "Bearer reader@crossproxy")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", res.StatusCode)
	}
}
