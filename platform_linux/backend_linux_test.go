package nft

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testenv"
	"github.com/crossproxy/crossproxy/platform"
)

// testNS creates a fresh network namespace (removed at cleanup) or skips
// when not root.
func testNS(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	name := fmt.Sprintf("xpl-u-%d-%d", os.Getpid(), rand.Intn(1_000_000))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return name
}

func nftIn(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newTestBackend(t testing.TB, ns string) *Backend {
	t.Helper()
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	b, err := New(platform.BackendConfig{NetNSPath: "/run/netns/" + ns, LocalhostNodePorts: true}, log)
	if err != nil {
		t.Fatal(err)
	}
	b.sysctl = &fakeSysctl{vals: map[string]string{}}
	return b
}

func TestBackendFullAndPartialSync(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	st := testState(t)
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatalf("full sync: %v", err)
	}
	got := nftIn(t, ns, "list", "ruleset")
	for _, want := range []string{"10.96.0.10 . tcp . 80 . 0x00000000 : 10.244.1.5 . 8080", "10.96.0.53 . udp . 53", "ip saddr 198.51.100.0/24 goto fw-"} {
		if !strings.Contains(got, want) && !strings.Contains(got, strings.Replace(want, "goto fw-", "goto ext-", 1)) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
	// Empty-set verdicts read back: reject without endpoints, drop for a
	// Local policy without a local endpoint.
	empty, err := b.Programmed(ctx, types.NamespacedName{Namespace: "default", Name: "empty"})
	if err != nil || len(empty.Frontends) != 1 || empty.Frontends[0].Verdict != core.VerdictReject {
		t.Errorf("default/empty should read back as reject: %+v %v", empty, err)
	}
	lb, err := b.Programmed(ctx, types.NamespacedName{Namespace: "shop", Name: "lb"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range lb.Frontends {
		want := core.VerdictDrop
		if f.Kind == core.FrontendClusterIP {
			want = core.VerdictNone
		}
		if f.Verdict != want {
			t.Errorf("shop/lb %s: verdict %q, want %q (%+v)", f.Kind, f.Verdict, want, f)
		}
	}

	// One endpoint more for default/web http v4: a partial sync.
	k := key("default", "web", "http", "TCP", "IPv4")
	p := *st.Ports[k]
	p.ClusterEndpoints = append(append([]core.Endpoint(nil), p.ClusterEndpoints...), ep("10.244.3.3", 8080, false))
	st.Ports[k] = &p
	// And default/empty goes away.
	gone := key("default", "empty", "", "TCP", "IPv4")
	delete(st.Ports, gone)
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}, gone: {}}}); err != nil {
		t.Fatalf("partial sync: %v", err)
	}
	if s := b.LastSync(); s.Full || s.Commands == 0 {
		t.Errorf("expected a partial sync with commands, got %+v", s)
	}
	got = nftIn(t, ns, "list", "ruleset")
	if !strings.Contains(got, "10.96.0.10 . tcp . 80 . 0x00000002 : 10.244.3.3 . 8080") || !strings.Contains(got, "10.244.3.3 . 10.244.3.3") {
		t.Errorf("partial sync not applied:\n%s", got)
	}
	if strings.Contains(got, "default/empty") || strings.Contains(got, "10.96.0.30") {
		t.Errorf("removed port still present:\n%s", got)
	}

	prog, err := b.Programmed(ctx, types.NamespacedName{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(prog.Frontends) != 4 || len(prog.Notes) != 1 {
		t.Fatalf("want 4 frontends and a localhost NodePort note for default/web, got %+v %v", prog.Frontends, prog.Notes)
	}
	for _, f := range prog.Frontends {
		if len(f.Endpoints) == 0 {
			t.Errorf("frontend %+v has no endpoints", f)
		}
		if f.Kind == core.FrontendClusterIP && f.Addr.Is4() && len(f.Endpoints) != 3 {
			t.Errorf("ClusterIP frontend endpoints: %v", f.Endpoints)
		}
	}

	// A table deleted behind crossproxy's back: the partial sync fails, the
	// next full sync repairs it.
	nftIn(t, ns, "flush", "ruleset")
	if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}}); err == nil {
		p2 := *st.Ports[k]
		p2.ClusterEndpoints = p2.ClusterEndpoints[:1]
		st.Ports[k] = &p2
		if err := b.Sync(ctx, st, core.Changes{Ports: map[core.PortKey]struct{}{k: {}}}); err == nil {
			t.Fatal("partial sync into a deleted table should fail")
		}
	}
	if err := b.Sync(ctx, st, core.Changes{}); err != nil {
		t.Fatalf("repairing full sync: %v", err)
	}
	if s := b.LastSync(); !s.Full {
		t.Errorf("sync after a failure should be full: %+v", s)
	}
	nftIn(t, ns, "list", "chain", "inet", "crossproxy-0", "nat-prerouting")

	if err := b.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if out := nftIn(t, ns, "list", "ruleset"); strings.TrimSpace(out) != "" {
		t.Errorf("cleanup left:\n%s", out)
	}
}

// TestFailedBatchChangesNothing sends a batch whose last command the kernel
// refuses: the error names that command, and nothing of the batch is in force.
func TestFailedBatchChangesNothing(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	if err := b.Sync(ctx, testState(t), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	before := nftIn(t, ns, "list", "ruleset")
	// default/dns has ClientIP affinity, so chains of its own in a shard.
	webPort := b.applied.objects(key("default", "dns", "dns", "UDP", "IPv4"))
	web := webPort.Chains[0]
	shard := shardTable("crossproxy", webPort.Shard)
	bad := &batch{Ops: []Op{
		flushChainOp{Table: shard, Chain: web},
		addChainOp{Table: shard, Chain: &Chain{Name: "half-written"}},
		addRuleOp{Table: shard, Chain: web, Rule: Rule{Verdict{Kind: verdictGoto, Chain: "no-such-chain"}}},
	}}
	err := b.apply(bad)
	if err == nil {
		t.Fatal("the kernel accepted a goto to a missing chain")
	}
	if !strings.Contains(err.Error(), "add rule inet "+shard+" "+web.Name+" goto no-such-chain") {
		t.Errorf("error does not name the refused command: %v", err)
	}
	if after := nftIn(t, ns, "list", "ruleset"); after != before {
		t.Errorf("a refused batch changed the table:\n%s", after)
	}
}

type fakeConntrack struct {
	cleared   []core.StaleEndpoint
	activated []core.ActivatedPort
}

func (f *fakeConntrack) ClearStale(s []core.StaleEndpoint) (int, error) {
	f.cleared = append(f.cleared, s...)
	return len(s), nil
}

func (f *fakeConntrack) ClearActivated(p []core.ActivatedPort) (int, error) {
	f.activated = append(f.activated, p...)
	return len(p), nil
}
func (f *fakeConntrack) List(map[frontendKey]bool) ([]platform.Connection, error) { return nil, nil }

// TestBatchOverManyChunks sends a full sync larger than several batch chunks
// (about 2.9 MiB: 5,000 Services x 10 endpoints), then a batch whose refused
// command lies in its last chunk: the first must program every rule, the
// second must be refused as a whole, naming that command, with the table
// unchanged. Both prove the chunks reach the kernel as one batch.
func TestBatchOverManyChunks(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	st := scaleStateN(5000, 10)
	if err := b.Sync(context.Background(), st, core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	full := b.LastSync()
	enc, err := b.encoder.encode(planRuleset(build(st, b.cfg), map[string]inventory{}, false))
	if err != nil {
		t.Fatal(err)
	}
	if chunks, size := enc.all(); len(chunks) < 3 || size < 2*batchChunk {
		t.Fatalf("a full sync of 5,000 Services encoded to %d bytes in %d chunks; the test needs several", size, len(chunks))
	}
	ruleset := nftIn(t, ns, "list", "ruleset")
	if n := strings.Count(ruleset, " . 8080"); n != 50000 {
		t.Fatalf("%d endpoint elements programmed, want 50,000 (%d commands sent)", n, full.Commands)
	}

	// Write every endpoint element again, then refer to a missing chain at the end.
	bad := &batch{}
	for k := range b.applied.Ports {
		for _, se := range b.applied.objects(k).Shared {
			if se.set.Kind == SetEndpoints {
				bad.add(delElementsOp{Table: "crossproxy", Set: *se.set, Elements: []element{se.e}})
				bad.add(addElementsOp{Table: "crossproxy", Set: *se.set, Elements: []element{se.e}})
			}
		}
	}
	last := &Chain{Name: shared("IPv4").services}
	bad.add(addRuleOp{Table: "crossproxy", Chain: last, Rule: Rule{Verdict{Kind: verdictGoto, Chain: "no-such-chain"}}})
	err = b.apply(bad)
	if err == nil {
		t.Fatal("the kernel accepted a goto to a missing chain")
	}
	if !strings.Contains(err.Error(), "goto no-such-chain") {
		t.Errorf("error does not name the refused command: %v", err)
	}
	if after := nftIn(t, ns, "list", "ruleset"); after != ruleset {
		t.Error("a refused multi-chunk batch changed the table")
	}
}

// cancelAfterEntry is a context whose Err is nil at Sync's entry check and
// context.Canceled at every later check: the deadline passed during the sync.
type cancelAfterEntry struct {
	context.Context
	calls atomic.Int32
}

func (c *cancelAfterEntry) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// TestSyncHonoursContextAfterEntry: a sync whose context ends while the
// ruleset is being built sends nothing, and the next sync still works.
func TestSyncHonoursContextAfterEntry(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	err := b.Sync(&cancelAfterEntry{Context: context.Background()}, testState(t), core.Changes{Full: true})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("sync with a context that ended: %v, want context.Canceled", err)
	}
	if got := nftIn(t, ns, "list", "ruleset"); strings.TrimSpace(got) != "" {
		t.Fatalf("a canceled sync sent rules:\n%s", got)
	}
	if err := b.Sync(context.Background(), testState(t), core.Changes{}); err != nil {
		t.Fatal(err)
	}
	if !b.LastSync().Full {
		t.Error("the sync after a canceled first sync should be full")
	}
}

// TestCloseReleasesHandles: Close releases the namespace handle and the batch
// socket, and a closed Backend refuses to work rather than fall back to the
// current namespace.
func TestCloseReleasesHandles(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	if err := b.Sync(ctx, testState(t), core.Changes{Full: true}); err != nil {
		t.Fatal(err)
	}
	nsFD, sockFD := b.ns.fd, b.batches.fd
	if nsFD < 0 || sockFD < 0 {
		t.Fatalf("namespace fd %d, socket fd %d: both should be open after a sync", nsFD, sockFD)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{nsFD, sockFD} {
		if _, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil {
			// The number may have been reused by another open; it must not
			// be the namespace or a netlink socket we hold.
			if target, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); strings.HasPrefix(target, "net:") || strings.HasPrefix(target, "socket:") {
				t.Errorf("fd %d still open after Close: %s", fd, target)
			}
		}
	}
	for name, err := range map[string]error{
		"sync":    b.Sync(ctx, testState(t), core.Changes{Full: true}),
		"cleanup": b.Cleanup(ctx),
	} {
		if !errors.Is(err, errClosed) {
			t.Errorf("%s after Close: %v, want %v", name, err, errClosed)
		}
	}
	if _, err := b.Programmed(ctx, types.NamespacedName{Namespace: "default", Name: "web"}); !errors.Is(err, errClosed) {
		t.Errorf("programmed after Close: %v", err)
	}
	if _, err := b.Listen("tcp", "127.0.0.1:0"); !errors.Is(err, errClosed) {
		t.Errorf("listen after Close: %v", err)
	}
	// The sysctl and conntrack helpers share the backend's handle: closed
	// with it, they fail instead of acting on the current namespace.
	if _, err := (procSysctl{ns: b.ns}).Get("net.ipv4.ip_forward"); !errors.Is(err, errClosed) {
		t.Errorf("sysctl after Close: %v", err)
	}
	if _, err := (&netlinkConntrack{ns: b.ns}).List(map[frontendKey]bool{}); !errors.Is(err, errClosed) {
		t.Errorf("conntrack after Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNamespaceSwitchNeverOnCallersThread: the switch into the namespace runs
// on a thread of its own, so the caller's (the sync loop's) thread never
// changes namespace, even if switching back were to fail.
func TestNamespaceSwitchNeverOnCallersThread(t *testing.T) {
	ns := testNS(t)
	n, err := openNetNS("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer n.close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	caller := unix.Gettid()
	self, _ := os.Readlink("/proc/thread-self/ns/net")
	var inside, there string
	if err := n.do(func() error {
		inside = fmt.Sprint(unix.Gettid())
		there, _ = os.Readlink("/proc/thread-self/ns/net")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if inside == fmt.Sprint(caller) {
		t.Error("fn ran on the caller's thread")
	}
	if there == self {
		t.Errorf("fn ran in the caller's namespace %s", self)
	}
	if now, _ := os.Readlink("/proc/thread-self/ns/net"); now != self {
		t.Errorf("caller's thread moved from %s to %s", self, now)
	}
}

// TestRefusedFullSyncNamesTheCommand has the kernel refuse a streamed full
// sync (a regular chain where crossproxy's base chain of that name goes: the
// kernel does not turn one into the other) and checks the error names the
// refused command, planned again for the purpose; the next full sync
// recreates the table and succeeds.
func TestRefusedFullSyncNamesTheCommand(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	nftIn(t, ns, "add", "table", "inet", "crossproxy")
	nftIn(t, ns, "add", "chain", "inet", "crossproxy", "dispatch-prerouting")
	err := b.Sync(context.Background(), testState(t), core.Changes{Full: true})
	if err == nil {
		t.Fatal("the kernel made a regular chain a base chain")
	}
	if !strings.Contains(err.Error(), "add chain inet crossproxy dispatch-prerouting") {
		t.Fatalf("error does not name the refused command: %v", err)
	}
	if err := b.Sync(context.Background(), testState(t), core.Changes{Full: true}); err != nil {
		t.Fatalf("full sync after the refusal: %v", err)
	}
	if out := nftIn(t, ns, "list", "chain", "inet", "crossproxy", "dispatch-prerouting"); !strings.Contains(out, "hook prerouting") {
		t.Fatalf("the chain was not recreated:\n%s", out)
	}
}

// TestFullSyncDropsPortWithChains: a full sync over rules already in the
// kernel, without a port that had chains of its own (its frontends were
// elements of a shard's verdict map, goto its chain). The full sync deletes
// that map and adds it again rather than flushing it; the kernel must let
// the port's chain go in the same batch, on every kernel the matrix runs.
func TestFullSyncDropsPortWithChains(t *testing.T) {
	ns := testNS(t)
	b := newTestBackend(t, ns)
	ctx := context.Background()
	st := testState(t)
	if err := b.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatalf("first full sync: %v", err)
	}
	if got := nftIn(t, ns, "list", "ruleset"); !strings.Contains(got, "goto svc-") {
		t.Fatalf("the test state has no port in a shard:\n%s", got)
	}
	for k, p := range st.Ports {
		if p.Affinity.ClientIP || len(p.SourceRanges) > 0 {
			delete(st.Ports, k)
		}
	}
	b2 := newTestBackend(t, ns) // a restarted proxy: it knows nothing of the rules
	if err := b2.Sync(ctx, st, core.Changes{Full: true}); err != nil {
		t.Fatalf("full sync without the ports that had chains: %v", err)
	}
	got := nftIn(t, ns, "list", "ruleset")
	if strings.Contains(got, "chain svc-") || strings.Contains(got, "goto svc-") {
		t.Errorf("the ports' chains are still there:\n%s", got)
	}
	if !strings.Contains(got, "10.96.0.10 . tcp . 80 . 0x00000000 : 10.244.1.5 . 8080") {
		t.Errorf("the other ports' endpoints are gone:\n%s", got)
	}
}
