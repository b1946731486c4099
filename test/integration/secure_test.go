//go:build integration && linux

package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/test/harness"
)

// TestSecureEndpointThroughTheAPIServer runs the proxy as the shipped
// ServiceAccount with only the shipped RBAC and its secure endpoint on, as
// the DaemonSet does, and checks both ways in: directly, where it refuses a
// request with no token, a token for the API server's audience and a token
// of a ServiceAccount without the RBAC, and answers the crossproxy-reader's;
// and as an operator does, through the API server's pod proxy: `crossproxy
// status`, `explain --node` and `bundle` run from outside the node.
//
// The proxy pod is a Pod object as the DaemonSet makes it (hostNetwork, so
// its IP is the node's, label app.kubernetes.io/name=crossproxy, container
// port "secure"), its status written as the kubelet would: there is no
// kubelet in this harness. Its IP is this host's own, on its first
// interface: the API server refuses to proxy to loopback and link-local
// addresses, as it would for a real pod.
func TestSecureEndpointThroughTheAPIServer(t *testing.T) {
	e := newEnv(t)
	applyShippedRBAC(t, e)

	hostIP := hostAddress(t)
	secure := net.JoinHostPort(hostIP, strconv.Itoa(freePort(t, hostIP)))
	e.user = harness.CrossproxyUser
	e.startProxy("--secure-address", secure)
	web := e.service("web")
	e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(web), backendAddrs[0])

	reader := mint(t, e, "crossproxy-reader", debug.DefaultAudience)
	for _, c := range []struct {
		name, token string
		code        int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"reader's token for the API server", mint(t, e, "crossproxy-reader", "https://kubernetes.default.svc"), http.StatusUnauthorized},
		{"a ServiceAccount without the RBAC", mint(t, e, "stranger", debug.DefaultAudience), http.StatusForbidden},
		{"crossproxy-reader", reader, http.StatusOK},
	} {
		code, body := secureGet(t, secure, debug.StatusPath, c.token)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
		}
	}

	e.proxyPod("crossproxy-linux-x1", hostIP, secure)
	admin, err := e.api.Kubeconfig(harness.AdminUser)
	if err != nil {
		t.Fatal(err)
	}

	// status: the node is healthy once its first sync is in, with web.
	rows := waitStatus(t, admin, 30*time.Second)
	if st := rows[0].Status; rows[0].Node != e.node || !rows[0].Healthy || st.Backend != "nftables" || st.LastFull == nil || st.Syncs == 0 {
		t.Errorf("status row %+v status %+v", rows[0], st)
	}
	table, code := cli(t, "status", "--kubeconfig", admin)
	if code != 0 || !strings.Contains(table, e.node) || !strings.Contains(table, "HEALTHY") {
		t.Errorf("status table, exit %d:\n%s", code, table)
	}
	t.Logf("crossproxy status:\n%s", table)

	// The operator's own token decides: the stranger's is refused by the
	// endpoint, and status says so and exits 1.
	out, code := cli(t, "status", "--kubeconfig", admin, "--token", mint(t, e, "stranger", debug.DefaultAudience))
	if code != 1 || !strings.Contains(out, "may not get proxies.crossproxy.io") {
		t.Errorf("status with the stranger's token: exit %d, want 1 naming the refusal:\n%s", code, out)
	}

	// explain of the node, from outside it: the four layers agree.
	out, code = cli(t, "explain", "default/web", "--node", e.node, "--kubeconfig", admin)
	if code != 0 || !strings.Contains(out, backendAddrs[0]) {
		t.Errorf("explain --node: exit %d:\n%s", code, out)
	}
	// Every node (one here): agrees.
	out, code = cli(t, "explain", "default/web", "--kubeconfig", admin)
	if code != 0 || !strings.Contains(out, "every node agrees") {
		t.Errorf("explain on every node: exit %d:\n%s", code, out)
	}

	// bundle: the node's files, the config without the proxy's credentials.
	tgz := filepath.Join(t.TempDir(), "b.tar.gz")
	if out, code := cli(t, "bundle", "--kubeconfig", admin, "-f", tgz); code != 0 {
		t.Fatalf("bundle: exit %d:\n%s", code, out)
	}
	files := untar(t, tgz)
	for _, want := range []string{"status.json", "versions.txt", "status.json", "explain-mismatch.json", "reports.json", "state.json", "logs.txt", "metrics.txt", "config.json"} {
		found := false
		for name := range files {
			if strings.HasSuffix(name, "/"+want) {
				found = true
			}
		}
		if !found {
			t.Errorf("bundle lacks %s: %v", want, keys(files))
		}
	}
	for name, data := range files {
		switch {
		case strings.HasSuffix(name, "/nodes/"+e.node+"/logs.txt") && !strings.Contains(data, "rules in sync"):
			t.Errorf("%s lacks the proxy's log lines:\n%.500s", name, data)
		case strings.HasSuffix(name, "/metrics.txt") && !strings.Contains(data, "sync_proxy_rules"):
			t.Errorf("%s lacks the sync metrics", name)
		case strings.HasSuffix(name, "/reports.json") && !strings.Contains(data, backendAddrs[0]):
			t.Errorf("%s lacks web's programmed endpoint", name)
		case strings.HasSuffix(name, "/errors.txt"):
			t.Errorf("%s: %s", name, data)
		}
		if strings.Contains(data, reader) {
			t.Errorf("%s holds the reader's token", name)
		}
	}
}

// applyShippedRBAC creates every object of installer/linux/rbac.yaml and a
// ServiceAccount "stranger" without any role, and waits until the proxy's
// identity may ask for access reviews.
func applyShippedRBAC(t *testing.T, e *env) {
	t.Helper()
	all := shippedRBACObjects(t)
	for _, o := range all.serviceAccounts {
		create(t, func() error {
			_, err := e.admin.CoreV1().ServiceAccounts(o.Namespace).Create(e.ctx, o, metav1.CreateOptions{})
			return err
		})
	}
	for _, o := range all.clusterRoles {
		create(t, func() error {
			_, err := e.admin.RbacV1().ClusterRoles().Create(e.ctx, o, metav1.CreateOptions{})
			return err
		})
	}
	for _, o := range all.clusterRoleBindings {
		create(t, func() error {
			_, err := e.admin.RbacV1().ClusterRoleBindings().Create(e.ctx, o, metav1.CreateOptions{})
			return err
		})
	}
	stranger := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stranger", Namespace: "kube-system"}}
	create(t, func() error {
		_, err := e.admin.CoreV1().ServiceAccounts("kube-system").Create(e.ctx, stranger, metav1.CreateOptions{})
		return err
	})
	cfg, err := e.api.UserConfig(harness.CrossproxyUser)
	if err != nil {
		t.Fatal(err)
	}
	waitAuthorized(t, e, kubernetes.NewForConfigOrDie(cfg), authzv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"})
}

// statusRow is one row of `crossproxy status -o json`.
type statusRow struct {
	Node    string
	Healthy bool
	Reasons []string
	Status  *debug.NodeStatus
}

// waitStatus runs `crossproxy status -o json` as the harness admin until it
// exits 0 with one node whose proxy has programmed a Service, or fails the
// test at the deadline.
func waitStatus(t *testing.T, kubeconfig string, limit time.Duration) []statusRow {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out, code := cli(t, "status", "--kubeconfig", kubeconfig, "-o", "json")
		var rows []statusRow
		_ = json.Unmarshal([]byte(out), &rows)
		if code == 0 && len(rows) == 1 && rows[0].Status != nil && rows[0].Status.Programmed.Services >= 1 {
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: exit %d after %s, want one healthy node programming a Service:\n%s", code, limit, out)
		}
		time.Sleep(time.Second)
	}
}

func create(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// proxyPod creates the proxy's Pod on e.node as the DaemonSet's, named
// name, Running and Ready at ip.
func (e *env) proxyPod(name, ip, secure string) {
	e.t.Helper()
	_, port, _ := net.SplitHostPort(secure)
	p, _ := strconv.Atoi(port)
	no := false
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/name": "crossproxy"}},
		Spec: v1.PodSpec{
			NodeName: e.node, HostNetwork: true, ServiceAccountName: "crossproxy", AutomountServiceAccountToken: &no,
			Containers: []v1.Container{{Name: "crossproxy", Image: "crossproxy:test", Ports: []v1.ContainerPort{
				{Name: "healthz", ContainerPort: 10256}, {Name: debug.SecurePortName, ContainerPort: int32(p)}}}},
		},
	}
	pod, err := e.admin.CoreV1().Pods("kube-system").Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create the proxy pod: %v", err)
	}
	pod.Status = v1.PodStatus{Phase: v1.PodRunning, PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}}, HostIP: ip,
		Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}
	if _, err := e.admin.CoreV1().Pods("kube-system").UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("proxy pod status: %v", err)
	}
}

// mint asks the API server for a token of kube-system/sa for audience.
func mint(t *testing.T, e *env, sa, audience string) string {
	t.Helper()
	exp := int64(600)
	tr, err := e.admin.CoreV1().ServiceAccounts("kube-system").CreateToken(e.ctx, sa,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s: %v", sa, err)
	}
	return tr.Status.Token
}

// secureGet asks the endpoint directly, as a client on the node would.
func secureGet(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the endpoint's certificate is self-signed, as the API server's pod proxy accepts it
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// cli runs the crossproxy binary and returns its output and exit code.
func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBERNETES_SERVICE_HOST=") // the operator's machine, not a pod
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("crossproxy %v: %v", args, err)
	return "", -1
}

// hostAddress is this host's first global IPv4 address.
func hostAddress(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 || i.Flags&net.FlagLoopback != 0 || strings.HasPrefix(i.Name, "xpk") {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	t.Fatal("this host has no global IPv4 address for the proxy pod (the API server does not proxy to loopback)")
	return ""
}

func freePort(t *testing.T, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
