//go:build integration && linux

// Package integration proves crossproxy against a real kube-apiserver
// (test/harness) with the Linux backend programming a network namespace the
// test creates: API changes must show up as packets going where they should.
package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/test/harness"
)

// binary is the crossproxy built for this run.
var binary string

func TestMain(m *testing.M) { harness.MainWithCrossproxy(m, "integration tests", "xpk-bin-", &binary) }

// env is one test's world: an apiserver, a lab and an admin client.
type env struct {
	t      testing.TB
	api    *harness.Server
	lab    *lab
	admin  kubernetes.Interface
	node   string
	ctx    context.Context
	proxy  *proxy
	user   string
	health string
	mport  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, api: harness.New(t, harness.Options{}), lab: newLab(t), ctx: context.Background(), user: harness.AdminUser}
	e.admin = kubernetes.NewForConfigOrDie(e.api.AdminConfig())
	e.node = "xpk-node-" + e.lab.ID
	e.createNode()
	e.lab.serveBackends(t, 8080)
	return e
}

func (e *env) createNode() {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}}}
	n, err := e.admin.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create node: %v", err)
	}
	n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: nodeAddr}}
	if _, err := e.admin.CoreV1().Nodes().UpdateStatus(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("node status: %v", err)
	}
}

// service creates a ClusterIP Service (port 80 → 8080) and returns its address.
func (e *env) service(name string, mutate ...func(*v1.Service)) *v1.Service {
	e.t.Helper()
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.ServiceSpec{
			Ports: []v1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: v1.ProtocolTCP}},
		},
	}
	for _, m := range mutate {
		m(svc)
	}
	out, err := e.admin.CoreV1().Services("default").Create(e.ctx, svc, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create service %s: %v", name, err)
	}
	return out
}

func addr(svc *v1.Service) string { return net.JoinHostPort(svc.Spec.ClusterIP, "80") }

// endpointSlice builds a slice for service with the given backend addresses,
// all ready and on this node, with a trigger-time annotation of now.
func (e *env) endpointSlice(service, name string, addrs ...string) *discovery.EndpointSlice {
	port, proto := int32(8080), v1.ProtocolTCP
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			Labels:      map[string]string{discovery.LabelServiceName: service},
			Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		ready := true
		node := e.node
		s.Endpoints = append(s.Endpoints, discovery.Endpoint{Addresses: []string{a}, Conditions: discovery.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	return s
}

func (e *env) createSlice(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	e.t.Helper()
	out, err := e.admin.DiscoveryV1().EndpointSlices("default").Create(e.ctx, s, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create endpointslice %s: %v", s.Name, err)
	}
	return out
}

func (e *env) updateSlice(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	e.t.Helper()
	cur, err := e.admin.DiscoveryV1().EndpointSlices("default").Get(e.ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get endpointslice %s: %v", s.Name, err)
	}
	s.ResourceVersion = cur.ResourceVersion
	out, err := e.admin.DiscoveryV1().EndpointSlices("default").Update(e.ctx, s, metav1.UpdateOptions{})
	if err != nil {
		e.t.Fatalf("update endpointslice %s: %v", s.Name, err)
	}
	return out
}

// proxy is a running crossproxy process.
type proxy struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProxy runs crossproxy against the apiserver as e.user, programming
// the lab's node namespace, with health and metrics on loopback.
func (e *env) startProxy(extra ...string) *proxy {
	e.t.Helper()
	kc, err := e.api.Kubeconfig(e.user)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.health == "" {
		e.health, e.mport = freeAddr(e.t), freeAddr(e.t)
	}
	args := append([]string{"run",
		"--kubeconfig", kc,
		"--hostname-override", e.node,
		"--netns", e.lab.NetNS(),
		"--ip-families", "IPv4",
		"--min-sync-period", "100ms",
		"--sync-period", "10s",
		"--full-sync-period", "10s",
		"--healthz-bind-address", e.health,
		"--metrics-bind-address", e.mport,
		"--log-level", "debug",
	}, extra...)
	return startRaw(e, args...)
}

// startRaw runs crossproxy with exactly args.
func startRaw(e *env, args ...string) *proxy {
	e.t.Helper()
	return startProcess(e, "crossproxy", binary, args...)
}

// startProcess runs path with args as the env's proxy (name labels its log
// file and the log tail printed when the test fails), stopped when the test
// ends; a proxy started through nsenter keeps nsenter's process id, as
// nsenter executes it in place.
func startProcess(e *env, name, path string, args ...string) *proxy {
	e.t.Helper()
	logPath := filepath.Join(e.api.Dir, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	p := &proxy{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	e.proxy = p
	e.t.Cleanup(func() {
		p.stop()
		if e.t.Failed() {
			data, _ := os.ReadFile(logPath)
			s := string(data)
			if len(s) > 6000 {
				s = s[len(s)-6000:]
			}
			e.t.Logf("%s log %s (tail):\n%s", name, logPath, s)
		}
	})
	return p
}

// stop sends SIGTERM and waits: crossproxy leaves its rules in place.
func (p *proxy) stop() { harness.Terminate(p.cmd.Process, p.done) }

func (p *proxy) logText() string {
	data, _ := os.ReadFile(p.log)
	return string(data)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// httpGet returns status and body of a GET on loopback.
func httpGet(url string) (int, string, http.Header, error) {
	return httpGetWith(&http.Client{Timeout: 2 * time.Second}, url)
}

// httpGetWith is httpGet through c (for example a client of another namespace).
func httpGetWith(c *http.Client, url string) (int, string, http.Header, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, nil
}

// waitHTTP polls url until it answers with code.
func waitHTTP(t testing.TB, url string, code int) string {
	t.Helper()
	return waitHTTPWith(t, &http.Client{Timeout: 2 * time.Second}, url, code)
}

// waitHTTPWith is waitHTTP through c.
func waitHTTPWith(t testing.TB, c *http.Client, url string, code int) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		got, body, _, err := httpGetWith(c, url)
		if err == nil && got == code {
			return body
		}
		last = fmt.Sprintf("%d %q %v", got, body, err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: want %d, last %s", url, code, last)
	return ""
}

// metric returns the value of the first sample line of name (with labels as
// written) from /metrics.
func metric(t testing.TB, base, series string) (float64, bool) {
	t.Helper()
	_, body, _, err := httpGet("http://" + base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, series)), 64)
			return v, err == nil
		}
	}
	return 0, false
}
