package debug

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	authnv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/platform/explain"
)

// PodSelector finds the proxy pods of every shipped manifest and the chart.
const PodSelector = "app.kubernetes.io/name=crossproxy"

// SecurePortName is the container port the secure endpoint is published as.
const SecurePortName = "secure"

// ReaderServiceAccount is the ServiceAccount, beside the proxy pods, that
// the manifests grant AccessVerb on every node's proxy; `crossproxy status`
// asks the API server for a short-lived token of it (TokenRequest), which
// the operator may do when granted `create serviceaccounts/token` on it.
const ReaderServiceAccount = "crossproxy-reader"

// Remote reaches the proxies of a cluster through the API server only: the
// pods' proxy subresource, never a pod IP, SSH or exec. The API server
// authorizes the operator (get pods/proxy); the endpoint authorizes Token.
type Remote struct {
	Client kubernetes.Interface
	// Token is the endpoint's bearer token (audience DefaultAudience).
	Token string
}

// Proxy is one node's proxy pod, or its absence.
type Proxy struct {
	Node string
	OS   string
	// Pod is nil when no proxy pod runs on the node.
	Pod  *v1.Pod
	Port int
	// PodProblem says why the pod cannot answer (not running, not ready,
	// no secure port); empty when it can.
	PodProblem string
}

// Proxies lists every node with its proxy pod (PodSelector, any namespace),
// sorted by node name. A pod on no node (pending) is skipped.
func (r *Remote) Proxies(ctx context.Context) ([]Proxy, error) {
	nodes, err := r.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	pods, err := r.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: PodSelector})
	if err != nil {
		return nil, fmt.Errorf("list proxy pods (%s): %w", PodSelector, err)
	}
	byNode := map[string]*v1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		// Prefer the pod that is running and not being deleted: during a
		// rolling update an old pod may still be terminating.
		if old, ok := byNode[p.Spec.NodeName]; ok && podRank(old) >= podRank(p) {
			continue
		}
		byNode[p.Spec.NodeName] = p
	}
	out := make([]Proxy, 0, len(nodes.Items))
	for _, n := range nodes.Items {
		px := Proxy{Node: n.Name, OS: n.Labels[v1.LabelOSStable], Pod: byNode[n.Name]}
		px.Port, px.PodProblem = podPort(px.Pod)
		out = append(out, px)
	}
	slices.SortFunc(out, func(a, b Proxy) int { return cmp.Compare(a.Node, b.Node) })
	return out, nil
}

func podRank(p *v1.Pod) int {
	rank := 0
	if p.DeletionTimestamp == nil {
		rank += 2
	}
	if p.Status.Phase == v1.PodRunning {
		rank++
	}
	return rank
}

// podPort returns the secure port of the proxy container, or why the pod
// cannot be asked.
func podPort(p *v1.Pod) (int, string) {
	if p == nil {
		return 0, "no crossproxy pod on this node"
	}
	port := 0
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == SecurePortName {
				port = int(cp.ContainerPort)
			}
		}
	}
	if port == 0 {
		return 0, fmt.Sprintf("pod %s/%s has no container port named %q: the manifest predates the secure endpoint", p.Namespace, p.Name, SecurePortName)
	}
	if p.DeletionTimestamp != nil {
		return port, fmt.Sprintf("pod %s/%s is terminating", p.Namespace, p.Name)
	}
	if p.Status.Phase != v1.PodRunning {
		return port, fmt.Sprintf("pod %s/%s is %s", p.Namespace, p.Name, p.Status.Phase)
	}
	return port, ""
}

// PodReady reports whether the pod's Ready condition is true.
func PodReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// Get asks px's endpoint for path (with query parameters, may be nil)
// through the API server.
func (r *Remote) Get(ctx context.Context, px Proxy, path string, params map[string]string) ([]byte, error) {
	if px.Pod == nil {
		return nil, errors.New(px.PodProblem)
	}
	req := r.Client.CoreV1().RESTClient().Get().
		Namespace(px.Pod.Namespace).Resource("pods").
		Name("https:"+px.Pod.Name+":"+strconv.Itoa(px.Port)).
		SubResource("proxy").Suffix(path).
		SetHeader(TokenHeader, "Bearer "+r.Token).
		// JSON, not protobuf, for the API server's own refusals (the pod
		// unreachable); the endpoint ignores the header. client-go still
		// reports such a 503 with its generic text (test/results/status.md).
		SetHeader("Accept", "application/json, */*")
	for k, v := range params {
		req = req.Param(k, v)
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("node %s: GET %s through the API server (pod %s/%s): %w", px.Node, path, px.Pod.Namespace, px.Pod.Name, describe(err, body))
	}
	return body, nil
}

// describe turns the API server's answer for a failed proxied request into
// words: the endpoint's own refusal text when it gave one (plain text), else
// the API server's Status, which client-go has decoded from JSON or
// protobuf already.
func describe(err error, body []byte) error {
	var st *apierrors.StatusError
	if errors.As(err, &st) && isText(body) {
		return fmt.Errorf("%s: %s", st.ErrStatus.Reason, strings.TrimSpace(string(body)))
	}
	return err
}

// isText reports whether body is a short human message: UTF-8 without
// control characters, not JSON (a Status) and not protobuf (which starts
// with the "k8s" magic and a zero byte).
func isText(body []byte) bool {
	if len(body) == 0 || len(body) > 4096 || !utf8.Valid(body) || json.Valid(body) {
		return false
	}
	for _, r := range string(body) {
		if unicode.IsControl(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

// Status asks px for its NodeStatus.
func (r *Remote) Status(ctx context.Context, px Proxy) (*NodeStatus, error) {
	body, err := r.Get(ctx, px, StatusPath, nil)
	if err != nil {
		return nil, err
	}
	var st NodeStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("node %s: decode status: %w", px.Node, err)
	}
	return &st, nil
}

// Explain asks px for its explain report of svc.
func (r *Remote) Explain(ctx context.Context, px Proxy, svc types.NamespacedName) (*explain.Report, error) {
	body, err := r.Get(ctx, px, explainPath, map[string]string{"service": svc.String()})
	if err != nil {
		return nil, err
	}
	var rep explain.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("node %s: decode explain report: %w", px.Node, err)
	}
	return &rep, nil
}

// MintToken asks the API server for a token of the ServiceAccount ns/name
// for audience, valid for ten minutes (TokenRequest): what `crossproxy
// status` presents to the endpoints when not given a token.
func MintToken(ctx context.Context, client kubernetes.Interface, ns, name, audience string) (string, error) {
	expiry := int64(600)
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s (audience %s): %w", ns, name, audience, err)
	}
	return tr.Status.Token, nil
}
