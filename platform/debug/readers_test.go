package debug

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/internal/testobj"
	"github.com/crossproxy/crossproxy/platform"
)

// readingBackend reads every port of every state, as a full sync does.
type readingBackend struct{ fakeBackend }

func (b *readingBackend) Sync(_ context.Context, st *core.NodeState, _ core.Changes) error {
	n := 0
	for _, p := range st.Ports {
		n += len(p.ClusterEndpoints)
	}
	_ = n
	return nil
}

// TestDebugReadersWhileSyncing runs the real Runner, Tracker and debug
// Handler while slices change every 200 µs and requests read the last synced
// state: readers hold states while newer ones are computed, which is safe
// only because a NodeState is never modified. make test-unit runs it with
// -race, which reports any write to a map a reader still iterates.
func TestDebugReadersWhileSyncing(t *testing.T) {
	const services = 50
	node := testobj.Node("n1", "", "192.168.0.1")
	opts := core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}}
	tr, err := core.NewTracker(opts)
	if err != nil {
		t.Fatal(err)
	}
	var syncs atomic.Int64
	store := NewStore(tr)
	store.SetNode(node)
	svcs := make([]*v1.Service, services)
	slices := make([]*discovery.EndpointSlice, services)
	for i := range svcs {
		ip := fmt.Sprintf("10.96.0.%d", i+1)
		svcs[i] = testobj.Service("default", fmt.Sprintf("s%d", i), ip)
		svcs[i].Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
		store.UpsertService(svcs[i])
	}
	slice := func(i, gen int) *discovery.EndpointSlice {
		s := testobj.Slice("default", fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d", i))
		for j := range 1 + gen%3 {
			s.Endpoints = append(s.Endpoints, testobj.Endpoint(fmt.Sprintf("10.244.%d.%d", i, j+1), "n1"))
		}
		return s
	}
	for i := range slices {
		slices[i] = slice(i, 0)
		store.UpsertSlice(slices[i])
	}

	runner := platform.NewRunner(platform.RunnerConfig{MinSyncPeriod: time.Millisecond, SyncPeriod: time.Hour}, tr, &readingBackend{}, quiet())
	h := &Handler{NodeName: "n1", Objects: store, Backend: &fakeBackend{err: platform.ErrUnsupported}, Log: quiet()}
	runner.OnSync(h.Observe)
	synced := make(chan struct{}, 1)
	runner.OnSync(func(platform.SyncResult) {
		syncs.Add(1)
		select {
		case synced <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = runner.Run(ctx) }()
	runner.Trigger()
	<-synced

	stop := make(chan struct{})
	var readers sync.WaitGroup
	errs := make(chan error, 10)
	// A slow reader walks the whole map with pauses, as a long request does.
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, _ := h.lastState()
			n := 0
			for k, p := range st.Ports {
				if p.Key != k {
					errs <- fmt.Errorf("port %v filed under %v", p.Key, k)
				}
				if n++; n%10 == 0 {
					time.Sleep(200 * time.Microsecond)
				}
			}
			if n != services {
				errs <- fmt.Errorf("a state read by a request had %d ports, want %d", n, services)
				return
			}
		}
	}()
	// Requests through the HTTP handler: the whole state, and one Service.
	readers.Add(1)
	go func() {
		defer readers.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, StatePath, nil))
			var st core.NodeState
			if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || len(st.Ports) != services {
				errs <- fmt.Errorf("state request: %d ports, %v", len(st.Ports), err)
				return
			}
			h.Report(context.Background(), types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("s%d", i%services)})
		}
	}()

	deadline := time.Now().Add(1500 * time.Millisecond)
	for gen := 1; time.Now().Before(deadline); gen++ {
		i := gen % services
		slices[i] = slice(i, gen)
		store.UpsertSlice(slices[i])
		runner.Trigger()
		time.Sleep(200 * time.Microsecond)
	}
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The incremental path must reach Compute's state of the final objects.
	want, err := core.Compute(opts, node, svcs, slices)
	if err != nil {
		t.Fatal(err)
	}
	wj, _ := json.Marshal(want)
	var gj []byte
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		runner.Trigger()
		got, _ := h.lastState()
		gj, _ = json.Marshal(got)
		if string(gj) == string(wj) {
			break
		}
	}
	cancel()
	wg.Wait()
	if string(wj) != string(gj) {
		t.Fatalf("last synced state differs from Compute of the final objects:\n got %s\nwant %s", gj, wj)
	}
	if n := syncs.Load(); n < 10 {
		t.Fatalf("only %d syncs ran while the readers read; the test proved nothing", n)
	}
	t.Logf("%d syncs while readers read", syncs.Load())
}
