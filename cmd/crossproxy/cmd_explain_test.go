package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/explain"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// explainManifests is node n1 (zone a), Service default/web whose targetPort
// "http" matches no port of its slice web-7x2k (the slice names its port "web"),
// and Service default/ok that is healthy.
const explainManifests = `
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/zone: a}}
status: {addresses: [{type: InternalIP, address: 192.168.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  selector: {app: web}
  ports: [{name: http, port: 80, protocol: TCP, targetPort: http}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-7x2k, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: web, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.5], nodeName: n1, zone: a, conditions: {ready: true}}]
---
apiVersion: v1
kind: Service
metadata: {name: ok, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.11
  clusterIPs: [10.96.0.11]
  selector: {app: ok}
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: ok-1, namespace: default, labels: {kubernetes.io/service-name: ok}}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [10.244.1.6], nodeName: n1, zone: a}]
`

func writeManifests(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(explainManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runCLI runs crossproxy with args and returns stdout and the exit status.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(args)
	err := root.Execute()
	code := 0
	if err != nil {
		code = exitCode(err)
	}
	return out.String(), code
}

// The table name keeps the command away from any real crossproxy rules of the host.
const absentTable = "xpd-explain-test-absent"

func TestExplainManifestsNamesFirstMismatch(t *testing.T) {
	dir := writeManifests(t)
	out, code := runCLI(t, "explain", "default/web", "--manifests", dir, "--node", "n1", "--ip-families", "IPv4",
		"--nftables-table", absentTable, "--output", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s", code, out)
	}
	var rep explain.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not a JSON report: %v\n%s", err, out)
	}
	want := `targetPort http matches no port in slice web-7x2k (Service port "http"/TCP; slice ports: "web" 8080/TCP)`
	if rep.FirstMismatch == nil || rep.FirstMismatch.Layer != 2 || rep.FirstMismatch.Message != want {
		t.Fatalf("first mismatch %+v, want layer 2 %q", rep.FirstMismatch, want)
	}
	if !rep.Computed.Available || rep.Computed.Zone != "a" || len(rep.Computed.Ports) != 1 ||
		rep.Computed.Source != "computed by explain from the manifests with the options given" ||
		rep.Computed.Ports[0].Frontends[0].Verdict != "reject" {
		t.Errorf("computed layer: %+v", rep.Computed)
	}

	text, code := runCLI(t, "explain", "default/web", "--manifests", dir, "--node", "n1", "--ip-families", "IPv4",
		"--nftables-table", absentTable)
	if code != 1 || !strings.Contains(text, "FIRST MISMATCH (layer 2, published): "+want) {
		t.Errorf("text output (exit %d):\n%s", code, text)
	}

	// An unknown node leaves layer 3 unavailable; the published mismatch is still found.
	out, code = runCLI(t, "explain", "web", "--manifests", dir, "--node", "n9", "--nftables-table", absentTable, "-o", "json")
	rep = explain.Report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.Computed.Unavailable != `node "n9" not found` {
		t.Errorf("unknown node: exit %d, err %v, computed %+v", code, err, rep.Computed)
	}
}

func TestExplainErrorsExitTwo(t *testing.T) {
	dir := writeManifests(t)
	for name, args := range map[string][]string{
		"bad output":       {"explain", "default/web", "--manifests", dir, "--output", "yaml"},
		"bad service":      {"explain", "default/", "--manifests", dir},
		"missing manifest": {"explain", "default/web", "--manifests", filepath.Join(dir, "nope.yaml")},
		"bad flag value":   {"explain", "default/web", "--manifests", dir, "--ip-families", "IPv5"},
		"no debug server":  {"explain", "default/web", "--debug-url", "http://127.0.0.1:1"},
	} {
		if _, code := runCLI(t, args...); code != 2 {
			t.Errorf("%s: exit %d, want 2", name, code)
		}
	}
}

// perfectBackend reports exactly what state asks for, or nothing for removed endpoints.
type perfectBackend struct {
	state *core.NodeState
	drop  bool
}

func (b *perfectBackend) Name() string                                              { return "perfect" }
func (b *perfectBackend) Sync(context.Context, *core.NodeState, core.Changes) error { return nil }
func (b *perfectBackend) Cleanup(context.Context) error                             { return nil }
func (b *perfectBackend) Close() error                                              { return nil }

func (b *perfectBackend) Programmed(_ context.Context, svc types.NamespacedName) (*platform.ProgrammedService, error) {
	ps := &platform.ProgrammedService{Service: svc}
	for _, sp := range b.state.SortedPorts() {
		if sp.Key.Service != svc {
			continue
		}
		for _, f := range sp.Frontends {
			pf := platform.ProgrammedFrontend{Kind: f.Kind, Addr: f.Addr, Port: f.Port, Protocol: sp.Protocol}
			if !b.drop {
				for _, e := range sp.InternalEndpoints() {
					pf.Endpoints = append(pf.Endpoints, e.AddrPort())
				}
			}
			ps.Frontends = append(ps.Frontends, pf)
		}
	}
	return ps, nil
}

func TestExplainDebugURL(t *testing.T) {
	set, err := manifest.Load(writeManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
	if err != nil {
		t.Fatal(err)
	}
	store := debug.NewStore(tr)
	node, _ := set.Node("n1")
	store.SetNode(node)
	for _, s := range set.Services {
		store.UpsertService(s)
	}
	for _, s := range set.Slices {
		store.UpsertSlice(s)
	}
	state, _ := tr.Snapshot()
	log := logrus.New()
	log.SetOutput(io.Discard)
	b := &perfectBackend{state: state}
	h := &debug.Handler{NodeName: "n1", Objects: store, Backend: b, Log: log}
	h.Observe(platform.SyncResult{ID: 1, State: state})
	srv := httptest.NewServer(h)
	defer srv.Close()

	out, code := runCLI(t, "explain", "default/ok", "--debug-url", srv.URL)
	if code != 0 || !strings.Contains(out, "OK: all four layers agree") || !strings.Contains(out, "4. programmed in perfect") {
		t.Fatalf("healthy service through the debug endpoint: exit %d\n%s", code, out)
	}
	b.drop = true
	out, code = runCLI(t, "explain", "default/ok", "--debug-url", srv.URL, "-o", "json")
	var rep explain.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	want := "programmed rules miss 1 endpoint that the computed state has, for ClusterIP 10.96.0.11:80/TCP: 10.244.1.6:8080"
	if code != 1 || rep.FirstMismatch == nil || rep.FirstMismatch.Message != want {
		t.Fatalf("exit %d, first mismatch %+v, want %q", code, rep.FirstMismatch, want)
	}
}

func TestExplainConfigFile(t *testing.T) {
	dir := writeManifests(t)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfg := `apiVersion: crossproxy.io/v1alpha1
kind: CrossproxyConfiguration
hostnameOverride: n1
ipFamilies: [IPv4]
clusterCIDRs: [10.244.0.0/16]
detectLocalMode: ClusterCIDR
nftables:
  table: ` + absentTable + "\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runCLI(t, "explain", "default/web", "--manifests", dir, "--config", cfgPath, "-o", "json")
	var rep explain.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	// The node name and the families come from the file.
	if code != 1 || rep.Node != "n1" || !rep.Computed.Available || strings.Join(rep.Computed.Families, ",") != "IPv4" {
		t.Errorf("exit %d, node %q, computed %+v", code, rep.Node, rep.Computed)
	}
	// Flags given explicitly win over the file.
	out, _ = runCLI(t, "explain", "default/web", "--manifests", dir, "--config", cfgPath, "--ip-families", "IPv4,IPv6", "-o", "json")
	rep = explain.Report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Node != "n1" || strings.Join(rep.Computed.Families, ",") != "IPv4,IPv6" {
		t.Errorf("--ip-families over the file: err %v, node %q, computed %+v", err, rep.Node, rep.Computed)
	}
	out, _ = runCLI(t, "explain", "default/web", "--manifests", dir, "--config", cfgPath, "--node", "n9", "-o", "json")
	rep = explain.Report{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Node != "n9" || rep.Computed.Available {
		t.Errorf("--node over the file: err %v, node %q, computed %+v", err, rep.Node, rep.Computed)
	}
	if _, code := runCLI(t, "explain", "default/web", "--manifests", dir, "--config", filepath.Join(dir, "missing.yaml")); code != 2 {
		t.Errorf("missing config file: exit %d, want 2", code)
	}
}
