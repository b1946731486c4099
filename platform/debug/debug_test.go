package debug

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/platform"
)

var web = types.NamespacedName{Namespace: "default", Name: "web"}

func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func objects() (*v1.Node, *v1.Service, *discovery.EndpointSlice, *discovery.EndpointSlice) {
	node := testobj.Node("n1", "a", "192.168.0.1")
	svc := testobj.Service("default", "web", "10.96.0.10")
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
	return node, svc, testobj.Slice("default", "web-a", "web", testobj.Endpoint("10.244.1.5", "n1")),
		testobj.Slice("default", "other-a", "other", testobj.Endpoint("10.244.1.9", "n1"))
}

// fakeBackend reports what it was told is programmed.
type fakeBackend struct {
	programmed *platform.ProgrammedService
	err        error
	others     []platform.OtherProxy
}

func (b *fakeBackend) OtherProxies(context.Context) ([]platform.OtherProxy, error) {
	return b.others, nil
}

func (b *fakeBackend) Name() string                                              { return "fake" }
func (b *fakeBackend) Sync(context.Context, *core.NodeState, core.Changes) error { return nil }
func (b *fakeBackend) Cleanup(context.Context) error                             { return nil }
func (b *fakeBackend) Close() error                                              { return nil }

func (b *fakeBackend) Programmed(_ context.Context, svc types.NamespacedName) (*platform.ProgrammedService, error) {
	if b.err != nil {
		return nil, b.err
	}
	ps := *b.programmed
	ps.Service = svc
	return &ps, nil
}

// fed runs the objects through a Store into a real tracker and returns both
// with the snapshot a runner would have synced.
func fed(t *testing.T) (*Store, *core.NodeState) {
	t.Helper()
	tr, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
	if err != nil {
		t.Fatal(err)
	}
	st := NewStore(tr)
	node, svc, webSlice, otherSlice := objects()
	st.SetNode(node)
	st.UpsertService(svc)
	st.UpsertSlice(webSlice)
	st.UpsertSlice(otherSlice)
	state, _ := tr.Snapshot()
	return st, state
}

func TestStoreForwardsAndRemembers(t *testing.T) {
	st, state := fed(t)
	if len(state.Ports) != 1 {
		t.Fatalf("the tracker behind the store computed %d ports, want 1", len(state.Ports))
	}
	svc, list := st.Objects(web)
	if svc == nil || len(list) != 1 || list[0].Name != "web-a" || st.Node().Name != "n1" {
		t.Fatalf("store: service %v, slices %v", svc, list)
	}
	st.DeleteSlice(list[0])
	st.DeleteService(svc)
	if svc, list = st.Objects(web); svc != nil || len(list) != 0 {
		t.Fatalf("after delete: service %v, slices %v", svc, list)
	}
}

func startServer(t *testing.T, h http.Handler) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, "127.0.0.1:0", h, quiet(), func(a net.Addr) { addrs <- a }) }()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v after shutdown", err)
		}
	})
	return base
}

func TestHandlerServesTheProxysView(t *testing.T) {
	store, state := fed(t)
	b := &fakeBackend{programmed: &platform.ProgrammedService{Frontends: []platform.ProgrammedFrontend{{
		Kind: core.FrontendClusterIP, Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP,
		Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.244.1.5:8080")}}}}}
	h := &Handler{NodeName: "n1", Objects: store, Backend: b, Log: quiet()}
	base := startServer(t, h)
	ctx := context.Background()

	// Before the first sync layer 3 is unavailable, which is not a mismatch.
	rep, err := Fetch(ctx, base, web)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Computed.Available || rep.Computed.Unavailable != "the proxy has not finished its first sync" || !rep.OK() {
		t.Fatalf("before sync: computed %+v, mismatch %v", rep.Computed, rep.FirstMismatch)
	}

	h.Observe(platform.SyncResult{ID: 1, State: state})
	rep, err = Fetch(ctx, base, web)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || !rep.Declared.Found || len(rep.Published.Slices) != 1 || len(rep.Computed.Ports) != 1 ||
		rep.Computed.Source != "the running proxy's last successful sync (1)" ||
		rep.Programmed.Backend != "fake" || len(rep.Programmed.Frontends) != 1 {
		t.Fatalf("after sync: %+v", rep)
	}

	// A failed sync keeps the last good state; the data plane is read at request time.
	h.Observe(platform.SyncResult{ID: 2, Err: errors.New("netlink: busy")})
	b.programmed.Frontends[0].Endpoints = nil
	rep, err = Fetch(ctx, base, web)
	if err != nil {
		t.Fatal(err)
	}
	want := "programmed rules miss 1 endpoint that the computed state has, for ClusterIP 10.96.0.10:80/TCP: 10.244.1.5:8080"
	if rep.FirstMismatch == nil || rep.FirstMismatch.Message != want {
		t.Fatalf("first mismatch %+v, want %q", rep.FirstMismatch, want)
	}

	// Another proxy on the node is the first mismatch, read at request
	// time as a local explain reads it; so is the list of reports.
	b.others = []platform.OtherProxy{{Name: "kube-proxy", Evidence: []string{"nftables table ip kube-proxy"}}}
	rep, err = Fetch(ctx, base, web)
	if err != nil {
		t.Fatal(err)
	}
	if rep.FirstMismatch == nil || !strings.Contains(rep.FirstMismatch.Message, "kube-proxy") {
		t.Fatalf("with kube-proxy's table: first mismatch %+v", rep.FirstMismatch)
	}
	sec := httptest.NewServer(&Secure{Handler: h, Summary: &Summary{}})
	defer sec.Close()
	resp, err := http.Get(sec.URL + ReportsPath + "?mismatch=1")
	if err != nil {
		t.Fatal(err)
	}
	var list ReportList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Reports) != 1 || list.Reports[0].Service != "default/web" {
		t.Fatalf("reports with a mismatch: %+v %v", list, err)
	}
	resp.Body.Close()
	b.others = nil

	b.err = errors.New("permission denied")
	rep, err = Fetch(ctx, base, web)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Programmed.Available || rep.Programmed.Unavailable != "read fake: permission denied" ||
		rep.FirstMismatch == nil || rep.FirstMismatch.Message != "layer 4 not read: read fake: permission denied" {
		t.Fatalf("programmed: %+v", rep.Programmed)
	}

	resp, err = http.Get(base + explainPath + "?service=default/web&output=text")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "4. programmed: unavailable (read fake: permission denied)") {
		t.Errorf("text report:\n%s", body)
	}
	resp, err = http.Get(base + StatePath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Crossproxy-Sync") != "1" || !strings.Contains(string(body), "10.96.0.10") {
		t.Errorf("state: %s %q\n%s", resp.Status, resp.Header.Get("X-Crossproxy-Sync"), body)
	}
	if _, err := Fetch(ctx, base, types.NamespacedName{Namespace: "default"}); err == nil || !strings.Contains(err.Error(), "400 Bad Request") {
		t.Errorf("bad service name: %v", err)
	}
}

func TestServeOnlyOnLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:10253", ":10253", "192.168.0.1:10253", "[::]:10253", "example.com:10253", "10253"} {
		if err := Serve(context.Background(), addr, http.NotFoundHandler(), quiet(), nil); err == nil {
			t.Errorf("Serve(%q) accepted a non-loopback address", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:10253", "[::1]:10253", "localhost:10253", DefaultAddress} {
		if err := CheckLoopback(addr); err != nil {
			t.Errorf("CheckLoopback(%q): %v", addr, err)
		}
	}
}

func TestParseService(t *testing.T) {
	for in, want := range map[string]string{"default/web": "default/web", "web": "default/web", " kube-system/dns ": "kube-system/dns"} {
		got, err := ParseService(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseService(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/web", "default/", "a/b/c"} {
		if _, err := ParseService(in); err == nil {
			t.Errorf("ParseService(%q) accepted", in)
		}
	}
}

func TestFetchReportsUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	if _, err := Fetch(ctx, "http://"+addr, web); err == nil || !strings.Contains(err.Error(), "fetch http://"+addr) {
		t.Errorf("Fetch from a closed port: %v", err)
	}
}
