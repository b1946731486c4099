package debug

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

// NodeStatus is one proxy's answer to StatusPath: what `crossproxy status`
// shows for its node. Healthy and Reasons are the proxy's own verdict; the
// status command adds what only it can see (no pod, pod not ready, endpoint
// unreachable).
type NodeStatus struct {
	Node      string    `json:"node"`
	OS        string    `json:"os"`
	Arch      string    `json:"arch"`
	Version   string    `json:"version"`
	GoVersion string    `json:"goVersion"`
	Backend   string    `json:"backend"`
	Started   time.Time `json:"started"`
	// Now is the proxy's clock when it answered, so ages are its own.
	Now time.Time `json:"now"`

	Healthy bool `json:"healthy"`
	// Reasons say why the proxy is not healthy, most serious first.
	Reasons []string `json:"reasons,omitempty"`
	// Warnings are worth a look but do not make the node unhealthy.
	Warnings []string `json:"warnings,omitempty"`

	LastSync     *SyncSummary `json:"lastSync,omitempty"`
	LastFull     *SyncSummary `json:"lastFullSync,omitempty"`
	LastPartial  *SyncSummary `json:"lastPartialSync,omitempty"`
	LastFailure  *SyncSummary `json:"lastFailure,omitempty"`
	Syncs        uint64       `json:"syncs"`
	SyncFailures uint64       `json:"syncFailures"`
	// FailingSince counts the failures since the last success.
	FailingSince  uint64       `json:"consecutiveFailures"`
	DriftRepairs  uint64       `json:"driftRepairs"`
	LastRepair    *SyncSummary `json:"lastRepair,omitempty"`
	OtherProxies  []string     `json:"otherProxies,omitempty"`
	InputProblems []string     `json:"inputProblems,omitempty"`
	Programmed    Counts       `json:"programmed"`
	// Healthz is the proxy's /healthz verdict (kube-proxy's rule: an update
	// pending for longer than twice the sync period, or the node going away).
	Healthz       bool   `json:"healthz"`
	HealthzReason string `json:"healthzReason,omitempty"`
}

// SyncSummary is one sync as status shows it.
type SyncSummary struct {
	ID       uint64        `json:"id"`
	At       time.Time     `json:"at"`
	Full     bool          `json:"full"`
	Duration time.Duration `json:"durationNanoseconds"`
	Error    string        `json:"error,omitempty"`
	Repair   []string      `json:"repair,omitempty"`
}

// Counts are the objects in force after the last successful sync.
type Counts struct {
	Services     int `json:"services"`
	ServicePorts int `json:"servicePorts"`
	Frontends    int `json:"frontends"`
	Endpoints    int `json:"endpoints"`
}

// maxListed bounds the problems and repairs a status carries: the count
// says how many more there are, `explain` and the bundle say which.
const maxListed = 10

// Summary keeps what a NodeStatus reports; register Observe with
// Runner.OnSync. Everything else it needs is given at construction.
type Summary struct {
	NodeName string
	Version  string
	Backend  string
	// Healthz returns the /healthz verdict and, when unhealthy, why; nil
	// when the proxy serves no health (standalone mode).
	Healthz func() (bool, string)
	// Clock returns the time; nil is time.Now.
	Clock func() time.Time

	mu           sync.Mutex
	started      time.Time
	last         *SyncSummary
	lastFull     *SyncSummary
	lastPartial  *SyncSummary
	lastFailure  *SyncSummary
	lastRepair   *SyncSummary
	syncs        uint64
	failures     uint64
	failingSince uint64
	repairs      uint64
	others       []string
	// state is the last successful sync's, never modified (SyncResult):
	// Status derives the counts and problems from it when asked, so a sync
	// pays nothing for them.
	state *core.NodeState
}

func (s *Summary) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// Start records when the proxy started.
func (s *Summary) Start() {
	s.mu.Lock()
	s.started = s.now()
	s.mu.Unlock()
}

// Observe records one finished sync.
func (s *Summary) Observe(res platform.SyncResult) {
	sum := &SyncSummary{ID: res.ID, At: res.Start.Add(res.Duration), Full: res.Full, Duration: res.Duration, Repair: res.Repair}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	s.others = s.others[:0]
	for _, o := range res.OtherProxies {
		s.others = append(s.others, o.String())
	}
	if res.Err != nil {
		sum.Error = res.Err.Error()
		s.failures++
		s.failingSince++
		s.lastFailure = sum
		return
	}
	s.failingSince = 0
	s.last = sum
	if res.Full {
		s.lastFull = sum
	} else {
		s.lastPartial = sum
	}
	if len(res.Repair) > 0 {
		s.repairs++
		s.lastRepair = sum
	}
	s.state = res.State
}

// counts are the objects in force in st, and its problems as text.
func counts(st *core.NodeState) (Counts, []string) {
	if st == nil {
		return Counts{}, nil
	}
	problems := make([]string, 0, len(st.Problems))
	for _, p := range st.Problems {
		problems = append(problems, p.String())
	}
	c := Counts{ServicePorts: len(st.Ports)}
	svcs := map[types.NamespacedName]bool{}
	for _, sp := range st.Ports {
		svcs[sp.Key.Service] = true
		c.Frontends += len(sp.Frontends)
		c.Endpoints += len(sp.ClusterEndpoints)
	}
	c.Services = len(svcs)
	return c, problems
}

// Status is the node's status now.
func (s *Summary) Status() NodeStatus {
	now := s.now()
	st := NodeStatus{
		Node: s.NodeName, OS: runtime.GOOS, Arch: runtime.GOARCH, Version: s.Version, GoVersion: runtime.Version(),
		Backend: s.Backend, Now: now, Healthz: true,
	}
	if s.Healthz != nil {
		st.Healthz, st.HealthzReason = s.Healthz()
	}
	s.mu.Lock()
	st.Started = s.started
	st.LastSync, st.LastFull, st.LastPartial, st.LastFailure, st.LastRepair = s.last, s.lastFull, s.lastPartial, s.lastFailure, s.lastRepair
	st.Syncs, st.SyncFailures, st.FailingSince, st.DriftRepairs = s.syncs, s.failures, s.failingSince, s.repairs
	st.OtherProxies = append([]string(nil), s.others...)
	state := s.state
	s.mu.Unlock()
	var problems []string
	st.Programmed, problems = counts(state)
	st.InputProblems = capList(problems)
	nProblems := len(problems)

	if len(st.OtherProxies) > 0 {
		st.Reasons = append(st.Reasons, "another Service proxy programs this node too: "+st.OtherProxies[0])
	}
	if st.FailingSince > 0 {
		st.Reasons = append(st.Reasons, fmt.Sprintf("the last %d sync(s) failed: %s", st.FailingSince, st.LastFailure.Error))
	}
	if st.LastSync == nil && st.FailingSince == 0 {
		st.Reasons = append(st.Reasons, "no sync yet: the proxy is still listing Services and EndpointSlices")
	}
	if !st.Healthz {
		st.Reasons = append(st.Reasons, "/healthz fails: "+st.HealthzReason)
	}
	if nProblems > 0 {
		st.Warnings = append(st.Warnings, fmt.Sprintf("%d input problem(s), first: %s", nProblems, st.InputProblems[0]))
	}
	if r := st.LastRepair; r != nil && now.Sub(r.At) < time.Hour {
		st.Warnings = append(st.Warnings, fmt.Sprintf("rules repaired %s ago after outside changes: %v", now.Sub(r.At).Round(time.Second), r.Repair))
	}
	st.Healthy = len(st.Reasons) == 0
	return st
}

func capList(l []string) []string {
	if len(l) <= maxListed {
		return append([]string(nil), l...)
	}
	out := append([]string(nil), l[:maxListed]...)
	return append(out, fmt.Sprintf("... and %d more", len(l)-maxListed))
}
