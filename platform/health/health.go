// Package health serves crossproxy's liveness and readiness with kube-proxy's
// meaning, so probes, load balancers and dashboards written for kube-proxy
// work unchanged: /livez fails when an update has waited longer than the
// health timeout (2 x the sync period), /healthz fails then too and also while
// this node is going away. It also serves the health-check node ports of
// LoadBalancer Services with externalTrafficPolicy Local, which cloud load
// balancers probe to find the nodes that have endpoints.
package health

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
)

// toBeDeletedTaint is the taint the cluster autoscaler puts on a node it is
// about to remove; kube-proxy reports such a node not eligible for traffic.
const toBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// Status tracks when the data plane was last updated and how long the oldest
// pending update has waited. It is safe for concurrent use.
type Status struct {
	timeout time.Duration
	now     func() time.Time

	mu            sync.Mutex
	lastUpdated   time.Time
	oldestPending time.Time
	node          *v1.Node
	nodeKnown     bool
}

// NewStatus returns a Status that turns unhealthy when an update has been
// pending for timeout (kube-proxy uses 2 x the sync period). A start counts as
// a pending update, so a proxy that never completes its first sync turns
// unhealthy too.
func NewStatus(timeout time.Duration) *Status {
	s := &Status{timeout: timeout, now: time.Now}
	s.oldestPending = s.now()
	return s
}

// QueuedUpdate records that a change is waiting for a sync; only the oldest
// waiting change counts.
func (s *Status) QueuedUpdate(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oldestPending.IsZero() {
		s.oldestPending = at
	}
}

// Updated records a successful sync: nothing is pending any more.
func (s *Status) Updated(at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oldestPending = time.Time{}
	s.lastUpdated = at
}

// SetNode records this node's Node object (nil when it was deleted), which
// decides whether the node is eligible for traffic.
func (s *Status) SetNode(n *v1.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.node = n
	s.nodeKnown = true
}

// Report is the JSON body of /healthz and /livez, with kube-proxy's field names.
type Report struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	Healthy      bool      `json:"healthy"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
	// PendingSince is when the oldest update still waiting was queued.
	PendingSince *time.Time `json:"pendingSince,omitempty"`
}

// Live reports whether no update has waited longer than the timeout.
func (s *Status) Live() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	r := Report{LastUpdated: s.lastUpdated, CurrentTime: now, Healthy: true}
	if !s.oldestPending.IsZero() {
		p := s.oldestPending
		r.PendingSince = &p
		if now.Sub(p) >= s.timeout {
			r.Healthy = false
		}
	}
	return r
}

// NodeEligible is false while the Node is unknown, being deleted, or tainted
// for removal by the cluster autoscaler.
func (s *Status) NodeEligible() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.nodeKnown || s.node == nil {
		return false
	}
	if s.node.DeletionTimestamp != nil {
		return false
	}
	for _, t := range s.node.Spec.Taints {
		if t.Key == toBeDeletedTaint {
			return false
		}
	}
	return true
}

// Healthz is Live plus node eligibility, as kube-proxy's /healthz.
func (s *Status) Healthz() Report {
	r := s.Live()
	eligible := s.NodeEligible()
	r.NodeEligible = &eligible
	r.Healthy = r.Healthy && eligible
	return r
}

// Handler serves /healthz and /livez.
func (s *Status) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeReport(w, s.Healthz()) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { writeReport(w, s.Live()) })
	return mux
}

func writeReport(w http.ResponseWriter, r Report) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Healthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
