package platform

import (
	"context"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/core"
)

// StateSource is what the Runner needs from the core's change tracker: a
// snapshot of the desired state with what changed since the previous one, and a
// way to demand a full reconcile. core.Tracker satisfies it.
type StateSource interface {
	Snapshot() (*core.NodeState, core.Changes)
	ForceFull()
}

// StateRecycler is a StateSource that can reuse the memory of a NodeState
// nothing reads any more (core.Tracker.Recycle): the next Snapshot then
// updates the old Ports map in place instead of copying every entry, which
// at 10,000 Services is most of the cost of a one-slice change. The Runner
// hands back a state only once no observer retains it (SyncResult.Retain).
type StateRecycler interface {
	Recycle(*core.NodeState)
}

// SyncResult describes one finished sync, for metrics, health and logs.
type SyncResult struct {
	// ID numbers syncs from 1 in this process; logs carry it as "sync".
	ID       uint64
	Full     bool
	Start    time.Time
	Duration time.Duration
	Err      error
	State    *core.NodeState
	Changes  core.Changes
	// Retain lets an observer keep reading State after its OnSync callback
	// returns, and must be called during the callback (or while an earlier
	// Retain of the same state is still held). The Runner recycles the
	// memory of a state that nothing retains (StateRecycler), so an observer
	// that keeps State without Retain may later read a changed Ports map.
	// release is safe to call more than once. Observers that read State only
	// inside their callback need not call Retain.
	Retain func() (release func())
}

// RunnerConfig tunes a Runner. Zero values take kube-proxy's defaults.
type RunnerConfig struct {
	// MinSyncPeriod is the shortest time between two syncs: changes arriving
	// faster are coalesced into one sync (default 1 s).
	MinSyncPeriod time.Duration
	// SyncPeriod is the longest time between two syncs when nothing changes
	// (default 30 s, kube-proxy's syncPeriod). Such a sync is partial and
	// cheap; it keeps sync_proxy_rules_last_timestamp_seconds fresh, and
	// /healthz uses 2 x SyncPeriod as its timeout, as kube-proxy does.
	SyncPeriod time.Duration
	// FullSyncPeriod is the period of full syncs, which rewrite everything
	// crossproxy owns and so repair rules changed behind its back (default 1 h).
	FullSyncPeriod time.Duration
	// MaxBackoff caps the retry delay after failed syncs (default 1 min).
	MaxBackoff time.Duration
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.MinSyncPeriod <= 0 {
		c.MinSyncPeriod = time.Second
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = 30 * time.Second
	}
	if c.FullSyncPeriod <= 0 {
		c.FullSyncPeriod = time.Hour
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = time.Minute
	}
	return c
}

// Runner is the sync loop shared by both backends. It waits for the first
// Trigger (sent by a source once its initial listing is complete), so it never
// writes a partial view over working rules; then it coalesces triggers by
// MinSyncPeriod, retries failures with exponential backoff and a forced full
// sync, syncs at least every SyncPeriod and fully every FullSyncPeriod. Stopping it leaves the rules in
// place: a restart or upgrade must not interrupt traffic.
type Runner struct {
	cfg     RunnerConfig
	source  StateSource
	backend Backend
	log     logrus.FieldLogger

	trigger chan struct{}
	now     func() time.Time

	mu        sync.Mutex
	observers []func(SyncResult)
	queued    []func(time.Time)

	syncID atomic.Uint64

	// holdMu guards holds: how many retainers each Ports map has, keyed by
	// the map's identity, because consecutive NodeStates share one map when
	// nothing changed in between and a map is what gets recycled.
	holdMu sync.Mutex
	holds  map[unsafe.Pointer]int
	// prev and last are the two latest snapshots, owned by Run's goroutine.
	prev, last *core.NodeState
}

// NewRunner returns a Runner that applies source's state to backend.
func NewRunner(cfg RunnerConfig, source StateSource, backend Backend, log logrus.FieldLogger) *Runner {
	return &Runner{
		cfg:     cfg.withDefaults(),
		source:  source,
		backend: backend,
		log:     log,
		trigger: make(chan struct{}, 1),
		now:     time.Now,
		holds:   map[unsafe.Pointer]int{},
	}
}

// Config returns the effective configuration (defaults applied).
func (r *Runner) Config() RunnerConfig { return r.cfg }

// OnSync registers f to be called after every sync, successful or not, from
// the Runner's goroutine. Register before Run. f may read res.State only
// until it returns, unless it calls res.Retain.
func (r *Runner) OnSync(f func(SyncResult)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observers = append(r.observers, f)
}

// OnQueued registers f to be called when a change is queued while none was
// pending (health: kube-proxy reports unhealthy when an update waits too long).
func (r *Runner) OnQueued(f func(time.Time)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queued = append(r.queued, f)
}

// Trigger asks for a sync. It never blocks; many triggers before the next sync
// collapse into one.
func (r *Runner) Trigger() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Run loops until ctx is done. It returns nil on cancellation and leaves the
// data plane as it is.
func (r *Runner) Run(ctx context.Context) error {
	var (
		started  bool      // a first sync has been attempted
		pending  bool      // a sync is wanted
		lastSync time.Time // start of the last attempt
		lastFull time.Time // start of the last successful full sync
		retryAt  time.Time // when failing: not before this
		failures int
		carry    []core.StaleEndpoint // stale UDP endpoints of a failed sync
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := r.now()
		wait := time.Hour // idle until the first trigger
		if started {
			wait = min(lastFull.Add(r.cfg.FullSyncPeriod).Sub(now), lastSync.Add(r.cfg.SyncPeriod).Sub(now))
		}
		if pending {
			due := lastSync.Add(r.cfg.MinSyncPeriod)
			if retryAt.After(due) {
				due = retryAt
			}
			if d := due.Sub(now); d < wait {
				wait = d
			}
		}
		if wait < 0 {
			wait = 0
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			r.log.Info("sync loop stopped; rules left in place")
			return nil
		case <-r.trigger:
			if !pending {
				r.notifyQueued(r.now())
			}
			pending = true
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			continue
		case <-timer.C:
		}
		now = r.now()
		if started {
			full := !now.Before(lastFull.Add(r.cfg.FullSyncPeriod))
			if full {
				r.source.ForceFull()
			}
			if full || !now.Before(lastSync.Add(r.cfg.SyncPeriod)) {
				if !pending {
					r.notifyQueued(now)
				}
				pending = true
			}
		}
		if !pending || now.Before(lastSync.Add(r.cfg.MinSyncPeriod)) || now.Before(retryAt) {
			continue
		}
		started = true
		lastSync = now
		res := r.syncOnce(ctx, carry)
		if res.Err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failures++
			backoff := r.cfg.MinSyncPeriod << min(failures-1, 16)
			if backoff > r.cfg.MaxBackoff {
				backoff = r.cfg.MaxBackoff
			}
			retryAt = now.Add(backoff)
			carry = res.Changes.StaleUDP
			r.source.ForceFull()
			r.log.WithError(res.Err).WithFields(logrus.Fields{"sync": res.ID, "retryIn": backoff.String()}).Warn("sync failed; previous rules stay in force, next attempt is a full sync")
			continue
		}
		failures, retryAt, carry, pending = 0, time.Time{}, nil, false
		if res.Full {
			lastFull = now
		}
	}
}

// syncOnce takes a snapshot and applies it, reporting to observers.
func (r *Runner) syncOnce(ctx context.Context, carry []core.StaleEndpoint) SyncResult {
	r.recycle()
	state, changes := r.source.Snapshot()
	r.prev, r.last = r.last, state
	if len(carry) > 0 {
		changes.StaleUDP = append(append([]core.StaleEndpoint(nil), carry...), changes.StaleUDP...)
	}
	res := SyncResult{ID: r.syncID.Add(1), Full: changes.Full, Start: r.now(), State: state, Changes: changes,
		Retain: func() func() { return r.retain(state) }}
	// The Runner itself retains the state while the backend and the observers read it.
	defer r.retain(state)()
	log := r.log.WithFields(logrus.Fields{"sync": res.ID, "full": res.Full, "ports": len(changes.Ports)})
	log.Debug("sync start")
	res.Err = r.backend.Sync(ctx, state, changes)
	res.Duration = r.now().Sub(res.Start)
	if res.Err == nil {
		log.WithField("duration", res.Duration.String()).Debug("sync done")
	}
	r.mu.Lock()
	observers := slices.Clone(r.observers)
	r.mu.Unlock()
	for _, f := range observers {
		f(res)
	}
	return res
}

// retain counts one more reader of st's Ports map; the returned func undoes it once.
func (r *Runner) retain(st *core.NodeState) func() {
	if st == nil || st.Ports == nil {
		return func() {}
	}
	key := mapID(st.Ports)
	r.holdMu.Lock()
	r.holds[key]++
	r.holdMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.holdMu.Lock()
			defer r.holdMu.Unlock()
			if r.holds[key]--; r.holds[key] <= 0 {
				delete(r.holds, key)
			}
		})
	}
}

// recycle hands the state before the latest back to a StateRecycler source
// when nothing retains its Ports map and the latest state does not share it.
// The source itself refuses anything but the state before its latest, so a
// state it still uses is never reused.
func (r *Runner) recycle() {
	rec, ok := r.source.(StateRecycler)
	if !ok || r.prev == nil || r.prev.Ports == nil || r.last == nil || mapID(r.prev.Ports) == mapID(r.last.Ports) {
		return
	}
	r.holdMu.Lock()
	defer r.holdMu.Unlock()
	// No new retainer can appear once the count is zero: Retain is only
	// called by a holder of the same map. Holding holdMu across Recycle
	// keeps that true even for a careless caller.
	if r.holds[mapID(r.prev.Ports)] > 0 {
		return
	}
	rec.Recycle(r.prev)
	r.prev = nil
}

// mapID is the identity of a Ports map: two NodeStates with equal IDs share one map.
func mapID(m map[core.PortKey]*core.ServicePort) unsafe.Pointer {
	return reflect.ValueOf(m).UnsafePointer()
}

func (r *Runner) notifyQueued(at time.Time) {
	r.mu.Lock()
	fs := slices.Clone(r.queued)
	r.mu.Unlock()
	for _, f := range fs {
		f(at)
	}
}
