package core

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Tracker keeps the Services, EndpointSlices and Node of one node and turns
// them into NodeStates incrementally: informer handlers call the Set/Upsert/
// Delete methods, the sync loop calls Snapshot, which recomputes only the
// Services touched since the previous Snapshot and reports what changed so a
// backend can sync partially. It is safe for concurrent use.
type Tracker struct {
	mu   sync.Mutex
	opts Options
	env  *env

	services    map[types.NamespacedName]*v1.Service
	slicesBySvc map[types.NamespacedName][]*discovery.EndpointSlice // sorted by name, replaced on change
	sliceOwner  map[types.NamespacedName]string                     // slice → its Service's name (in the slice's namespace)
	sliceNotes  map[types.NamespacedName]sliceNote                  // slices matched to no Service, and why
	results     map[types.NamespacedName]*serviceResult
	// claims says which Service port keeps each frontend destination.
	claims claims
	// withLists names the Services whose result has problems, an ignore
	// reason or a health check, so those lists rebuild without a full scan.
	withLists map[types.NamespacedName]struct{}
	// extraProblems are problems not tied to one Service (duplicate objects in Compute).
	extraProblems []Problem

	dirty      map[types.NamespacedName]struct{}
	envDirty   bool // recompute every Service (node or options changed)
	listsDirty bool
	full       bool
	svcChanges int
	epChanges  int
	triggers   []time.Time

	state *NodeState
}

// sliceNote is why a slice belongs to no Service.
type sliceNote struct {
	problem *Problem
	ignored *IgnoredObject
}

// NewTracker returns an empty Tracker; its first Snapshot reports Full. Until
// SetNode is called the node is unknown: nothing is local and there are no
// NodePort addresses.
func NewTracker(opts Options) (*Tracker, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("core options: %w", err)
	}
	return newTracker(opts), nil
}

func newTracker(opts Options) *Tracker {
	return &Tracker{
		opts:        opts,
		env:         newEnv(opts, nil),
		services:    map[types.NamespacedName]*v1.Service{},
		slicesBySvc: map[types.NamespacedName][]*discovery.EndpointSlice{},
		sliceOwner:  map[types.NamespacedName]string{},
		sliceNotes:  map[types.NamespacedName]sliceNote{},
		results:     map[types.NamespacedName]*serviceResult{},
		claims:      claims{},
		withLists:   map[types.NamespacedName]struct{}{},
		dirty:       map[types.NamespacedName]struct{}{},
		envDirty:    true,
		listsDirty:  true,
		full:        true,
	}
}

// Compute builds the NodeState of node from scratch (state, render and
// explain use it; so do tests). It fails only for invalid options or a nil
// node: bad objects become NodeState.Problems and the rest still works.
func Compute(opts Options, node *v1.Node, services []*v1.Service, slices []*discovery.EndpointSlice) (*NodeState, error) {
	if node == nil {
		return nil, errors.New("compute node state: node is nil")
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("compute node state: options: %w", err)
	}
	t := newTracker(opts)
	t.presize(len(services), len(slices))
	t.setNode(node)
	for i, s := range services {
		if s == nil {
			t.extraProblems = append(t.extraProblems, Problem{Kind: "Service", Field: fmt.Sprintf("services[%d]", i), Reason: "nil object"})
			continue
		}
		k := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if _, dup := t.services[k]; dup {
			t.extraProblems = append(t.extraProblems, Problem{Kind: "Service", Object: k.String(), Field: "metadata.name", Reason: "duplicate object; the first one is used", Service: k})
			continue
		}
		t.upsertService(s)
	}
	seen := make(map[types.NamespacedName]bool, len(slices))
	for i, s := range slices {
		if s == nil {
			t.extraProblems = append(t.extraProblems, Problem{Kind: "EndpointSlice", Field: fmt.Sprintf("slices[%d]", i), Reason: "nil object"})
			continue
		}
		k := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		if seen[k] {
			t.extraProblems = append(t.extraProblems, Problem{Kind: "EndpointSlice", Object: k.String(), Field: "metadata.name", Reason: "duplicate object; the first one is used"})
			continue
		}
		seen[k] = true
		t.upsertSlice(s)
	}
	st, _ := t.snapshot(false)
	return st, nil
}

// presize makes room for a known number of objects, so a full computation
// does not grow its maps step by step.
func (t *Tracker) presize(services, slices int) {
	t.services = make(map[types.NamespacedName]*v1.Service, services)
	t.slicesBySvc = make(map[types.NamespacedName][]*discovery.EndpointSlice, services)
	t.sliceOwner = make(map[types.NamespacedName]string, slices)
	t.results = make(map[types.NamespacedName]*serviceResult, services)
	t.dirty = make(map[types.NamespacedName]struct{}, services)
}

// SetNode records this node's Node object. A change that matters (name,
// labels, addresses, pod CIDRs) recomputes every Service and makes the next
// Snapshot Full; status heartbeats change nothing.
func (t *Tracker) SetNode(node *v1.Node) {
	if node == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setNode(node)
}

func (t *Tracker) setNode(node *v1.Node) {
	ne := newEnv(t.opts, node)
	ne.places = t.env.places
	if reflect.DeepEqual(ne, t.env) {
		return
	}
	ne.places = nil
	t.env = ne
	t.envDirty, t.full = true, true
}

// UpsertService adds or replaces a Service.
func (t *Tracker) UpsertService(svc *v1.Service) {
	if svc == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upsertService(svc)
	t.svcChanges++
}

func (t *Tracker) upsertService(svc *v1.Service) {
	k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	t.services[k] = svc
	t.dirty[k] = struct{}{}
}

// DeleteService removes a Service; only its namespace and name are read.
func (t *Tracker) DeleteService(svc *v1.Service) {
	if svc == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	k := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	delete(t.services, k)
	t.dirty[k] = struct{}{}
	t.svcChanges++
}

// UpsertSlice adds or replaces an EndpointSlice and records its
// last-change-trigger-time for the network programming latency metric.
func (t *Tracker) UpsertSlice(s *discovery.EndpointSlice) {
	if s == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.upsertSlice(s)
	t.epChanges++
	if v, ok := s.Annotations[AnnotationTriggerTime]; ok {
		if ts, err := time.Parse(time.RFC3339Nano, v); err == nil {
			t.triggers = append(t.triggers, ts)
		}
	}
}

func (t *Tracker) upsertSlice(s *discovery.EndpointSlice) {
	key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	t.removeSlice(key)
	svcName, labelled := s.Labels[discovery.LabelServiceName]
	switch {
	case IgnoredSlice(s) != "":
		t.setSliceNote(key, sliceNote{ignored: &IgnoredObject{Kind: "EndpointSlice", Object: key.String(), Reason: IgnoredSlice(s)}})
	case !labelled || svcName == "":
		t.setSliceNote(key, sliceNote{problem: &Problem{Kind: "EndpointSlice", Object: key.String(),
			Field:  fmt.Sprintf("metadata.labels[%q]", discovery.LabelServiceName),
			Reason: "missing or empty, so the slice belongs to no Service; slice skipped"}})
	default:
		owner := types.NamespacedName{Namespace: s.Namespace, Name: svcName}
		old := t.slicesBySvc[owner]
		i, _ := slices.BinarySearchFunc(old, s.Name, func(x *discovery.EndpointSlice, name string) int { return cmp.Compare(x.Name, name) })
		t.slicesBySvc[owner] = slices.Insert(slices.Clip(old), i, s)
		t.sliceOwner[key] = svcName
		t.dirty[owner] = struct{}{}
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func (t *Tracker) setSliceNote(key types.NamespacedName, n sliceNote) {
	t.sliceNotes[key] = n
	t.listsDirty = true
}

// removeSlice forgets a slice wherever it was filed.
func (t *Tracker) removeSlice(key types.NamespacedName) {
	if _, ok := t.sliceNotes[key]; ok {
		delete(t.sliceNotes, key)
		t.listsDirty = true
	}
	name, ok := t.sliceOwner[key]
	if !ok {
		return
	}
	owner := types.NamespacedName{Namespace: key.Namespace, Name: name}
	delete(t.sliceOwner, key)
	old := t.slicesBySvc[owner]
	if i, found := slices.BinarySearchFunc(old, key.Name, func(x *discovery.EndpointSlice, name string) int { return cmp.Compare(x.Name, name) }); found {
		if len(old) == 1 {
			delete(t.slicesBySvc, owner)
		} else {
			t.slicesBySvc[owner] = slices.Delete(slices.Clone(old), i, i+1)
		}
	}
	t.dirty[owner] = struct{}{}
}

// DeleteSlice removes an EndpointSlice; only its namespace and name are read.
func (t *Tracker) DeleteSlice(s *discovery.EndpointSlice) {
	if s == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeSlice(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
	t.epChanges++
}

// Pending reports whether changes wait for a Snapshot.
func (t *Tracker) Pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty) > 0 || t.envDirty || t.listsDirty || t.full || t.svcChanges > 0 || t.epChanges > 0
}

// ForceFull makes the next Snapshot report Full, so a backend whose last sync
// failed reconciles everything.
func (t *Tracker) ForceFull() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.full = true
}

// Snapshot returns the current NodeState and what changed since the previous
// Snapshot (the first one is Full). The NodeState is never modified
// afterwards; unchanged ServicePorts are the same pointers as before.
func (t *Tracker) Snapshot() (*NodeState, Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.snapshot(true)
}

func (t *Tracker) snapshot(track bool) (*NodeState, Changes) {
	ch := Changes{Full: t.full, ServiceChanges: t.svcChanges, EndpointChanges: t.epChanges, TriggerTimes: t.triggers}
	if track {
		ch.Ports = map[PortKey]struct{}{}
	}
	if t.envDirty {
		for k := range t.services {
			t.dirty[k] = struct{}{}
		}
		for k := range t.results {
			t.dirty[k] = struct{}{}
		}
		t.envDirty, t.listsDirty = false, true
	}
	w := &portsWriter{track: track, ch: &ch}
	if t.state != nil {
		w.ports = t.state.Ports
	} else {
		w.ports, w.owned = make(map[PortKey]*ServicePort, len(t.dirty)), true
	}
	for k, nr := range t.recompute() {
		old := t.results[k]
		if nr != nil {
			t.claims.publish(nr, k)
		}
		w.replace(old, nr)
		if hasLists(old) || hasLists(nr) {
			t.listsDirty = true
		}
		if hasLists(nr) {
			t.withLists[k] = struct{}{}
		} else {
			delete(t.withLists, k)
		}
		if nr == nil {
			delete(t.results, k)
		} else {
			t.results[k] = nr
		}
	}
	// A cleared map keeps its table: after the first snapshot that is room
	// for every Service, so a large one is replaced instead.
	if len(t.dirty) > 1024 {
		t.dirty = make(map[types.NamespacedName]struct{})
	} else {
		clear(t.dirty)
	}

	st := &NodeState{
		Node:              t.env.node,
		Families:          t.env.families,
		LocalDetect:       t.env.localDetect,
		NodePortAddresses: t.env.nodePort,
		Ports:             w.ports,
	}
	if t.state != nil && !t.listsDirty {
		st.HealthChecks, st.Problems, st.Ignored = t.state.HealthChecks, t.state.Problems, t.state.Ignored
	} else {
		st.HealthChecks, st.Problems, st.Ignored = t.buildLists()
		t.listsDirty = false
	}
	slices.SortFunc(ch.StaleUDP, func(a, b StaleEndpoint) int {
		return cmp.Or(comparePortKey(a.Key, b.Key), a.Endpoint.Compare(b.Endpoint))
	})
	slices.SortFunc(ch.ActivatedUDP, func(a, b ActivatedPort) int { return comparePortKey(a.Key, b.Key) })
	t.state = st
	t.full, t.svcChanges, t.epChanges, t.triggers = false, 0, 0, nil
	return st, ch
}

// recompute computes the dirty Services again and moves their frontend
// claims. It returns the new result of every Service to publish (nil: the
// Service is gone): the dirty ones and every Service that shares a frontend
// destination with one of them, whose claim may have changed hands.
func (t *Tracker) recompute() map[types.NamespacedName]*serviceResult {
	fresh := make(map[types.NamespacedName]*serviceResult, len(t.dirty))
	affected := map[types.NamespacedName]struct{}{}
	for k := range t.dirty {
		var nr *serviceResult
		if svc := t.services[k]; svc != nil {
			nr = computeService(t.env, svc, t.slicesBySvc[k])
		}
		fresh[k] = nr
		var oldRaw, newRaw []*ServicePort
		var created time.Time
		if old := t.results[k]; old != nil {
			oldRaw = old.raw
		}
		if nr != nil {
			newRaw, created = nr.raw, nr.created
		}
		t.claims.move(k, oldRaw, newRaw, created, affected)
	}
	for k := range affected {
		if _, ok := fresh[k]; !ok && t.results[k] != nil {
			again := *t.results[k]
			fresh[k] = &again
		}
	}
	return fresh
}

// portsWriter writes one snapshot's Ports map. A returned NodeState is never
// modified, so the first change copies the previous map (its cost:
// BenchmarkTrackerSliceUpdate10k, test/results/core.md) and an unchanged
// state shares it.
type portsWriter struct {
	ports map[PortKey]*ServicePort
	owned bool // ports may be written: it is not shared with a returned NodeState
	track bool // record what changed in ch
	ch    *Changes
}

func (w *portsWriter) own() {
	if !w.owned {
		w.ports, w.owned = maps.Clone(w.ports), true
	}
}

// replace swaps a Service's ports from its old result to nr (either nil):
// an unchanged port keeps its old value, so the backends can compare by
// pointer; a changed or gone one is recorded with its UDP consequences.
func (w *portsWriter) replace(old, nr *serviceResult) {
	var oldPorts map[PortKey]*ServicePort
	if old != nil && len(old.ports) > 0 {
		oldPorts = make(map[PortKey]*ServicePort, len(old.ports))
		for _, p := range old.ports {
			oldPorts[p.Key] = p
		}
	}
	if nr != nil {
		for i, np := range nr.ports {
			op := oldPorts[np.Key]
			delete(oldPorts, np.Key)
			if op != nil && reflect.DeepEqual(op, np) {
				nr.ports[i] = op
				continue
			}
			w.own()
			w.ports[np.Key] = np
			if w.track {
				w.ch.Ports[np.Key] = struct{}{}
				w.ch.StaleUDP = append(w.ch.StaleUDP, staleUDP(op, np)...)
				if a := activatedUDP(op, np); a != nil {
					w.ch.ActivatedUDP = append(w.ch.ActivatedUDP, *a)
				}
			}
		}
	}
	for key, op := range oldPorts {
		w.own()
		delete(w.ports, key)
		if w.track {
			w.ch.Ports[key] = struct{}{}
			w.ch.StaleUDP = append(w.ch.StaleUDP, staleUDP(op, nil)...)
		}
	}
}

func hasLists(r *serviceResult) bool {
	return r != nil && (len(r.problems) > 0 || len(r.conflicts) > 0 || r.ignored != nil || r.health != nil)
}

// buildLists assembles the sorted health checks, problems and ignored objects.
func (t *Tracker) buildLists() ([]HealthCheck, []Problem, []IgnoredObject) {
	var hcs []HealthCheck
	probs := slices.Clone(t.env.problems)
	probs = append(probs, t.extraProblems...)
	var ign []IgnoredObject
	for k := range t.withLists {
		r := t.results[k]
		if r.health != nil {
			hcs = append(hcs, *r.health)
		}
		probs = append(probs, r.problems...)
		probs = append(probs, r.conflicts...)
		if r.ignored != nil {
			ign = append(ign, *r.ignored)
		}
	}
	for _, n := range t.sliceNotes {
		if n.problem != nil {
			probs = append(probs, *n.problem)
		}
		if n.ignored != nil {
			ign = append(ign, *n.ignored)
		}
	}
	slices.SortFunc(hcs, func(a, b HealthCheck) int {
		return cmp.Or(cmp.Compare(a.Service.Namespace, b.Service.Namespace), cmp.Compare(a.Service.Name, b.Service.Name))
	})
	slices.SortFunc(probs, func(a, b Problem) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Reason, b.Reason))
	})
	probs = slices.CompactFunc(probs, func(a, b Problem) bool { return a == b })
	slices.SortFunc(ign, func(a, b IgnoredObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object))
	})
	if len(probs) == 0 {
		probs = nil
	}
	return hcs, probs, ign
}

// activatedUDP reports a UDP port that uses endpoints now (np) and used none
// before (op, nil when the port is new), with the addresses of its endpoints.
func activatedUDP(op, np *ServicePort) *ActivatedPort {
	if np.Protocol != v1.ProtocolUDP || (op != nil && len(op.ClusterEndpoints)+len(op.LocalEndpoints) > 0) {
		return nil
	}
	var addrs []netip.Addr
	for _, set := range [][]Endpoint{np.ClusterEndpoints, np.LocalEndpoints} {
		for _, ep := range set {
			addrs = append(addrs, ep.Addr)
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	return &ActivatedPort{Key: np.Key, Frontends: np.Frontends, Endpoints: addrs}
}

// staleUDP lists the endpoints a UDP port used before (op) and no longer uses
// (np, nil when the port is gone), with the old frontends clients talked to.
func staleUDP(op, np *ServicePort) []StaleEndpoint {
	if op == nil || op.Protocol != v1.ProtocolUDP {
		return nil
	}
	still := map[netip.AddrPort]bool{}
	if np != nil {
		for _, set := range [][]Endpoint{np.ClusterEndpoints, np.LocalEndpoints} {
			for _, ep := range set {
				still[ep.AddrPort()] = true
			}
		}
	}
	var out []StaleEndpoint
	for _, set := range [][]Endpoint{op.ClusterEndpoints, op.LocalEndpoints} {
		for _, ep := range set {
			ap := ep.AddrPort()
			if still[ap] {
				continue
			}
			still[ap] = true // report once
			out = append(out, StaleEndpoint{Key: op.Key, Frontends: op.Frontends, Endpoint: ap})
		}
	}
	return out
}
