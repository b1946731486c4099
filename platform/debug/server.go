package debug

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/explain"
)

// DefaultAddress is the address the README suggests for --debug-address. Its
// port is free of kube-proxy's metrics (10249) and healthz (10256) and of the
// kubelet's and control plane's well-known ports.
const DefaultAddress = "127.0.0.1:10253"

// explainPath serves one Service's explain report: ?service=NAMESPACE/NAME,
// &output=text for text instead of JSON.
const explainPath = "/debug/explain"

// StatePath serves the whole computed NodeState of the last successful sync as JSON.
const StatePath = "/debug/state"

// Handler serves the running proxy's explain data: layers 1 and 2 from the
// Store the sources feed, layer 3 from the runner's last successful sync, and
// layer 4 read back from the backend at request time.
type Handler struct {
	NodeName string
	Objects  *Store
	Backend  platform.Backend
	Log      logrus.FieldLogger

	mu    sync.RWMutex
	state *core.NodeState // never modified: requests read it without the lock
	sync  uint64
}

// Observe records the state of each successful sync; register it with
// Runner.OnSync. A failed sync keeps the previous state: its rules are the
// ones still in force.
func (h *Handler) Observe(res platform.SyncResult) {
	if res.Err != nil || res.State == nil {
		return
	}
	h.mu.Lock()
	h.state, h.sync = res.State, res.ID
	h.mu.Unlock()
}

// lastState returns the last successful sync's state and its sync ID.
func (h *Handler) lastState() (*core.NodeState, uint64) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.state, h.sync
}

// Report builds the explain report of svc as this proxy sees it, the other
// Service proxies on the node looked for now.
func (h *Handler) Report(ctx context.Context, svc types.NamespacedName) *explain.Report {
	return h.report(ctx, svc, h.otherProxies(ctx))
}

// otherProxies looks for other Service proxies on the node, as a local
// explain does: a second proxy is the first mismatch of every Service. A
// failed look reports none (it proves nothing either way).
func (h *Handler) otherProxies(ctx context.Context) []platform.OtherProxy {
	d, ok := h.Backend.(platform.OtherProxyDetector)
	if !ok {
		return nil
	}
	found, err := d.OtherProxies(ctx)
	if err != nil {
		h.Log.WithError(err).Debug("debug: look for other Service proxies")
		return nil
	}
	return found
}

func (h *Handler) report(ctx context.Context, svc types.NamespacedName, others []platform.OtherProxy) *explain.Report {
	in := explain.Input{Service: svc, NodeName: h.NodeName, OtherProxies: others}
	if h.Objects != nil {
		in.Object, in.Slices = h.Objects.Objects(svc)
	}
	st, id := h.lastState()
	if st == nil {
		in.StateUnavailable = "the proxy has not finished its first sync"
	}
	in.State, in.StateSource = st, fmt.Sprintf("the running proxy's last successful sync (%d)", id)
	if h.Backend == nil {
		in.ProgrammedUnavailable = "the proxy runs without a data plane"
	} else {
		in.Backend = h.Backend.Name()
		ps, err := h.Backend.Programmed(ctx, svc)
		if err != nil {
			in.ProgrammedUnavailable = fmt.Sprintf("read %s: %v", h.Backend.Name(), err)
			in.ProgrammedFailed = !errors.Is(err, platform.ErrUnsupported)
		} else {
			in.Programmed = ps
		}
	}
	return explain.Build(in)
}

// ServeHTTP answers explainPath and StatePath; anything else gets a short index.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	switch r.URL.Path {
	case explainPath:
		h.serveExplain(w, r)
	case StatePath:
		st, id := h.lastState()
		if st == nil {
			http.Error(w, "no successful sync yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Crossproxy-Sync", fmt.Sprint(id))
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			h.Log.WithError(err).Debug("debug: write state")
		}
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "crossproxy debug endpoint of node %s\n  %s?service=NAMESPACE/NAME[&output=text]\n  %s\n", h.NodeName, explainPath, StatePath)
	}
}

func (h *Handler) serveExplain(w http.ResponseWriter, r *http.Request) {
	svc, err := ParseService(r.URL.Query().Get("service"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rep := h.Report(ctx, svc)
	if r.URL.Query().Get("output") == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		err = rep.WriteText(w)
	} else {
		w.Header().Set("Content-Type", "application/json")
		err = rep.WriteJSON(w)
	}
	if err != nil {
		h.Log.WithError(err).Debug("debug: write explain report")
	}
}

// ParseService reads NAMESPACE/NAME; a bare NAME means namespace default.
func ParseService(s string) (types.NamespacedName, error) {
	ns, name, found := strings.Cut(strings.TrimSpace(s), "/")
	if !found {
		ns, name = "default", ns
	}
	if ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("service %q: want NAMESPACE/NAME", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// CheckLoopback rejects addresses that are not on a loopback interface: the
// debug data names every backend of every Service and must not leave the node.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("debug address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("debug address %q: only a loopback address (127.0.0.1, ::1, localhost) is allowed", addr)
	}
	return nil
}

// Serve listens on addr (which must be loopback) and serves h until ctx ends.
// It returns once listening has failed or the server has shut down; a bound
// listener is reported through ready (may be nil) so callers and tests learn the port.
func Serve(ctx context.Context, addr string, h http.Handler, log logrus.FieldLogger, ready func(net.Addr)) error {
	if err := CheckLoopback(addr); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug endpoint: listen %s: %w", addr, err)
	}
	if ready != nil {
		ready(lis.Addr())
	}
	log.WithField("address", lis.Addr().String()).Info("debug endpoint listening")
	if err := platform.ServeHTTP(ctx, lis, h); err != nil {
		return fmt.Errorf("debug endpoint: serve: %w", err)
	}
	return nil
}

// Fetch asks a running proxy's debug endpoint (base such as
// http://127.0.0.1:10253) for the explain report of svc.
func Fetch(ctx context.Context, base string, svc types.NamespacedName) (*explain.Report, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + explainPath)
	if err != nil {
		return nil, fmt.Errorf("debug URL %q: %w", base, err)
	}
	u.RawQuery = url.Values{"service": {svc.String()}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("debug URL %q: %w", base, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	var rep explain.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return nil, fmt.Errorf("fetch %s: decode report: %w", u, err)
	}
	return &rep, nil
}
