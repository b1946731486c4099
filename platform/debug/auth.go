package debug

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	authnclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authzclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
)

// The access the secure endpoint asks the API server to grant: `get` on the
// proxy of one node, a resource of crossproxy's own API group (it needs no
// CRD: RBAC authorizes any group and resource by name). Operators grant it
// with a ClusterRole rule, restricted to some nodes by resourceNames if they
// wish; the chart's crossproxy-reader ClusterRole grants it for every node.
const (
	AccessGroup    = "crossproxy.io"
	AccessResource = "proxies"
	AccessVerb     = "get"
)

// DefaultAudience is the audience a token must be issued for: a token minted
// for the API server (a pod's own ServiceAccount token) is refused, so a
// token leaked from the endpoint is worth nothing to the API server and one
// meant for the API server cannot be replayed here.
const DefaultAudience = "crossproxy"

// TokenHeader carries the bearer token through the API server's pod proxy:
// the API server removes the Authorization header of every request it has
// authenticated (k8s.io/apiserver's WithAuthentication), so `crossproxy
// status` sends its own credential to the API server as usual and the
// endpoint's token in this header. Direct clients may use Authorization.
const TokenHeader = "X-Crossproxy-Authorization"

// Auth authenticates and authorizes every request of the secure endpoint
// through the API server, as the kubelet does its own: TokenReview for the
// bearer token (with Audience), then SubjectAccessReview of the user it
// names for AccessVerb on AccessResource named NodeName. Answers are cached
// for the kubelet's default times (tokens 2 minutes, allowed 5 minutes,
// denied 30 seconds) so a `status` of a large cluster costs each node two
// reviews, not two per request.
//
// It uses client-go's typed TokenReview and SubjectAccessReview clients and
// apimachinery's expiring LRU cache rather than k8s.io/apiserver's delegating
// authenticator and authorizer: those import the API server's egress selector
// (gRPC, konnectivity) and CEL, which doubled the stripped binary, 34 MB to
// 71 MB (go build -ldflags '-s -w' ./cmd/crossproxy, 2026-12-07).
type Auth struct {
	Tokens   authnclient.TokenReviewInterface
	Access   authzclient.SubjectAccessReviewInterface
	Audience string
	NodeName string
	Log      logrus.FieldLogger

	users     *cache.LRUExpireCache // token hash -> authnv1.UserInfo
	decisions *cache.LRUExpireCache // user key -> bool
}

const (
	tokenTTL   = 2 * time.Minute
	allowTTL   = 5 * time.Minute
	denyTTL    = 30 * time.Second
	reviewWait = 10 * time.Second
	cacheSize  = 1024
)

// errUnauthenticated and errForbidden are the two refusals a client can act
// on; any other error is the API server's (503).
var (
	errUnauthenticated = errors.New("unauthenticated")
	errForbidden       = errors.New("forbidden")
)

// Wrap returns next behind the check.
func (a *Auth) Wrap(next http.Handler) http.Handler {
	if a.users == nil {
		a.users = cache.NewLRUExpireCache(cacheSize)
		a.decisions = cache.NewLRUExpireCache(cacheSize)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := a.check(r)
		switch {
		case err == nil:
			next.ServeHTTP(w, r)
			return
		case errors.Is(err, errUnauthenticated):
			w.Header().Set("WWW-Authenticate", `Bearer realm="crossproxy"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, errForbidden):
			http.Error(w, err.Error(), http.StatusForbidden)
		default:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
		a.Log.WithFields(logrus.Fields{"path": r.URL.Path, "user": user, "remote": r.RemoteAddr}).WithError(err).Debug("secure endpoint: request refused")
	})
}

// bearer returns the request's token: TokenHeader first (the API server's
// pod proxy path), then Authorization.
func bearer(r *http.Request) string {
	for _, h := range []string{TokenHeader, "Authorization"} {
		v := strings.TrimSpace(r.Header.Get(h))
		if tok, ok := strings.CutPrefix(v, "Bearer "); ok && strings.TrimSpace(tok) != "" {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}

// check returns the user's name and nil when the request may be answered.
func (a *Auth) check(r *http.Request) (string, error) {
	tok := bearer(r)
	if tok == "" {
		return "", fmt.Errorf("%w: no bearer token (header %s or Authorization)", errUnauthenticated, TokenHeader)
	}
	ctx, cancel := context.WithTimeout(r.Context(), reviewWait)
	defer cancel()
	user, err := a.authenticate(ctx, tok)
	if err != nil {
		return "", err
	}
	return user.Username, a.authorize(ctx, user)
}

func (a *Auth) authenticate(ctx context.Context, tok string) (authnv1.UserInfo, error) {
	sum := sha256.Sum256([]byte(tok))
	key := hex.EncodeToString(sum[:])
	if u, ok := a.users.Get(key); ok {
		return u.(authnv1.UserInfo), nil
	}
	review, err := a.Tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: []string{a.Audience}}}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, fmt.Errorf("token review: %w", err)
	}
	st := review.Status
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "the API server did not accept the token"
		}
		return authnv1.UserInfo{}, fmt.Errorf("%w: %s", errUnauthenticated, msg)
	}
	if !slices.Contains(st.Audiences, a.Audience) {
		return authnv1.UserInfo{}, fmt.Errorf("%w: the token is not for audience %q (it is for %v)", errUnauthenticated, a.Audience, st.Audiences)
	}
	a.users.Add(key, st.User, tokenTTL)
	return st.User, nil
}

func (a *Auth) authorize(ctx context.Context, u authnv1.UserInfo) error {
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, "\x00")
	if ok, hit := a.decisions.Get(key); hit {
		if ok.(bool) {
			return nil
		}
		return a.denied(u)
	}
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{Verb: AccessVerb, Group: AccessGroup, Resource: AccessResource, Name: a.NodeName},
	}}
	res, err := a.Access.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("subject access review of %s: %w", u.Username, err)
	}
	if res.Status.Allowed {
		a.decisions.Add(key, true, allowTTL)
		return nil
	}
	a.decisions.Add(key, false, denyTTL)
	return a.denied(u)
}

func (a *Auth) denied(u authnv1.UserInfo) error {
	return fmt.Errorf("%w: %s may not %s %s.%s %q", errForbidden, u.Username, AccessVerb, AccessResource, AccessGroup, a.NodeName)
}
