package platform

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	"github.com/crossproxy/crossproxy/core"
)

// StateSource is what the Runner needs from the core's change tracker: a
// snapshot of the desired state with what changed since the previous one, and a
// way to demand a full reconcile. core.Tracker satisfies it.
type StateSource interface {
	Snapshot() (*core.NodeState, core.Changes)
	ForceFull()
}

// SyncResult describes one finished sync, for metrics, health and logs.
type SyncResult struct {
	// ID numbers syncs from 1 in this process; logs carry it as "sync".
	ID       uint64
	Full     bool
	Start    time.Time
	Duration time.Duration
	Err      error
	// State is never modified (core.Tracker.Snapshot), so an observer may
	// keep it and read it from any goroutine after its callback returns.
	State   *core.NodeState
	Changes core.Changes
	// Repair names what others changed of the programmed rules (found by
	// the backend's DriftWatcher or DriftChecker) that made this sync a
	// full one; nil for an ordinary sync.
	Repair []string
	// OtherProxies are the other Service proxies the backend last found on
	// this node (OtherProxyDetector), carried in every result so observers
	// keep a gauge; nil when there are none or the backend cannot tell.
	OtherProxies []OtherProxy
}

// RunnerConfig tunes a Runner. Zero values take kube-proxy's defaults, except
// MinSyncPeriod, whose zero value paces syncs by their cost.
type RunnerConfig struct {
	// MinSyncPeriod, when given (above zero), is the shortest time between
	// two syncs: changes arriving faster are coalesced into one sync, as
	// kube-proxy's --min-sync-period does. Zero, the default, paces syncs by
	// what they cost instead (see Runner): with a change costing tens of
	// microseconds, kube-proxy's 1 s would be the whole of a change's
	// latency. As in kube-proxy, 0 in a configuration file means "the
	// default", so only an operator who writes a period gets a fixed one;
	// a caller that fills in defaults must therefore leave this zero when
	// neither the file nor a flag gives it.
	MinSyncPeriod time.Duration
	// SyncPeriod is the longest time between two syncs when nothing changes
	// (default 30 s, kube-proxy's syncPeriod). Such a sync is partial and
	// cheap; it keeps sync_proxy_rules_last_timestamp_seconds fresh, and
	// /healthz uses 2 x SyncPeriod as its timeout, as kube-proxy does.
	SyncPeriod time.Duration
	// FullSyncPeriod is the period of full syncs, which rewrite everything
	// crossproxy owns and so repair rules changed behind its back (default 1 h).
	FullSyncPeriod time.Duration
	// MaxBackoff caps the retry delay after failed syncs, which doubles from
	// MinSyncPeriod, or from 1 s when MinSyncPeriod is zero (default 1 min):
	// a failing backend is not retried at the pace of cheap syncs.
	MaxBackoff time.Duration
	// Clock is the time the Runner schedules by (nil: the wall clock); a
	// backend's tests step a fake one to prove its drift bound through the
	// Runner.
	Clock clock.Clock
	// ReleaseMemory, when set, runs before and after each full sync, the
	// proxy's memory peak. The binary sets debug.FreeOSMemory: collecting
	// first lets the heap grow from what is live, collecting after hands the
	// batch's pages back to the OS (test/results/scale.md). It is the
	// program's memory policy, not the runner's, so it is not a default.
	ReleaseMemory func()
}

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.MinSyncPeriod < 0 {
		c.MinSyncPeriod = 0 // paced, as zero
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
// writes a partial view over working rules; then it coalesces triggers (see
// below), retries failures with exponential backoff and a forced full sync,
// syncs at least every SyncPeriod and fully every FullSyncPeriod. Stopping it
// leaves the rules in place: a restart or upgrade must not interrupt traffic.
//
// Without a MinSyncPeriod (the default) the Runner paces syncs by their
// cost, because a change costs tens of microseconds on Linux at 100k
// Services (test/results/scale.md) and a fixed second of batching was the
// whole of a change's latency. It keeps a bucket of two syncs, as kube-proxy's
// BoundedFrequencyRunner does, but refills it once per interval of ten times
// the recent syncs' moving average cost (each sync's wall time from its
// drift check to its last observer: on a node short of CPU a sync takes
// longer and the pace slows with it), at least 5 ms and at most 1 s, where
// kube-proxy refills once per --min-sync-period. So a change after a quiet
// interval syncs at once, and so does a second one right after it; under a
// storm of changes, syncs come once per interval, each taking all the
// changes since the last, and the sync loop is busy at most a tenth of the
// time until syncs cost more than 100 ms, when the 1 s ceiling, kube-proxy's
// default period, holds them as kube-proxy would. A sync may start only with
// a token in the bucket, so the bucket is full again at most two intervals
// after it and a pending change waits at most one interval after the last
// sync's start: never longer than kube-proxy's default period. A full sync
// counts for at most 100 ms in the average, so that the first sync at 100k
// Services (seconds) does not hold the syncs after it at the ceiling for a
// dozen seconds. An explicit MinSyncPeriod replaces all of this with
// kube-proxy's fixed period, as before.
type Runner struct {
	cfg     RunnerConfig
	source  StateSource
	backend Backend
	log     logrus.FieldLogger

	trigger chan struct{}
	// clock is the wall clock; tests step a fake one.
	clock clock.Clock
	// release is RunnerConfig.ReleaseMemory, or nothing.
	release func()

	mu        sync.Mutex
	observers []func(SyncResult)
	queued    []func(time.Time)

	syncID atomic.Uint64

	// drift holds what the backend's watcher reported since the last sync
	// (at most maxDrift descriptions; driftMore counts the rest).
	driftMu   sync.Mutex
	drift     []string
	driftMore int

	// others are the other proxies found at othersAt (Runner goroutine only).
	others   []OtherProxy
	othersAt time.Time
	// checkedAt is when the backend's DriftChecker last ran (Runner
	// goroutine only): the next check is due SyncPeriod after it.
	checkedAt time.Time
	// pace holds syncs back when MinSyncPeriod is zero (Runner goroutine
	// only).
	pace pacer
}

// Pacing by cost, the default (RunnerConfig.MinSyncPeriod zero); see Runner.
const (
	// paceFactor is the interval between syncs under a storm in multiples of
	// their average cost: the sync loop is busy at most 1/paceFactor of the
	// time, a tenth of a core, and a change waits about ten syncs' cost.
	paceFactor = 10
	// paceFloor keeps syncs that cost almost nothing (a few Services) from
	// running once per change under a storm: what a sync leaves to others
	// and its measured cost misses (the collection of the garbage its
	// snapshot made, the kernel's work after the transaction) stays bounded
	// at 200 syncs a second.
	paceFloor = 5 * time.Millisecond
	// paceCeiling is kube-proxy's default --min-sync-period: pacing never
	// holds a change longer than kube-proxy would. It is also the first
	// retry delay after a failed sync, as with kube-proxy's default.
	paceCeiling = time.Second
	// paceBurst syncs may run back to back after a quiet interval, as
	// kube-proxy's runner lets two through: the updates of one event (a pod
	// added, then ready) rarely come in one batch.
	paceBurst = 2
)

// pacer is a bucket of paceBurst syncs refilled once per interval, the
// interval following the syncs' moving average cost.
type pacer struct {
	// avg is the moving average of the recent syncs' cost, weighting the
	// newest a quarter, so that one slow sync (a collection, a busy node)
	// does not alone set the pace. Each sample counts for at most
	// paceCeiling/paceFactor: beyond that the interval is the ceiling
	// anyway, and a full sync of seconds would otherwise hold the ceiling
	// for dozens of syncs after it.
	avg time.Duration
	// full is when the bucket will be full again if no more syncs run: each
	// sync moves it one interval past the later of itself and the sync's
	// start.
	// Keeping the time rather than a count lets a sync whose timer woke late
	// still take its place in the pace (the lateness does not add up).
	full time.Time
}

// interval is the time one sync's token takes to come back.
func (p *pacer) interval() time.Duration {
	return min(max(paceFactor*p.avg, paceFloor), paceCeiling)
}

// due is the earliest start of the next sync: when at least one of the
// bucket's paceBurst tokens is back.
func (p *pacer) due() time.Time {
	return p.full.Add(-(paceBurst - 1) * p.interval())
}

// synced takes a token for the sync that started at start and cost cost,
// after adding its cost to the average, so that a sync that suddenly costs
// more spaces the next one by its own cost at once.
func (p *pacer) synced(start time.Time, cost time.Duration) {
	cost = min(max(cost, 0), paceCeiling/paceFactor)
	p.avg += (cost - p.avg) / 4
	if p.full.Before(start) {
		p.full = start
	}
	p.full = p.full.Add(p.interval())
}

// maxDrift bounds the descriptions of outside changes a sync keeps: a storm
// of them (a ruleset flushed object by object) is one repair.
const maxDrift = 8

// NewRunner returns a Runner that applies source's state to backend.
func NewRunner(cfg RunnerConfig, source StateSource, backend Backend, log logrus.FieldLogger) *Runner {
	release := cfg.ReleaseMemory
	if release == nil {
		release = func() {}
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Runner{
		cfg:     cfg.withDefaults(),
		source:  source,
		backend: backend,
		log:     log,
		trigger: make(chan struct{}, 1),
		clock:   clk,
		release: release,
	}
}

// Config returns the effective configuration (defaults applied).
func (r *Runner) Config() RunnerConfig { return r.cfg }

// OnSync registers f to be called after every sync, successful or not, from
// the Runner's goroutine. Register before Run.
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
// data plane as it is; a sync failing with ErrNodeUnfit ends it with that
// error.
func (r *Runner) Run(ctx context.Context) error {
	if w, ok := r.backend.(DriftWatcher); ok {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() {
			if err := w.WatchDrift(ctx, r.noteDrift); err != nil && ctx.Err() == nil {
				r.log.WithError(err).Warn("cannot follow changes made to the rules from outside; each sync still checks for them")
			}
		})
	}
	var (
		started  bool      // a first sync has been attempted
		pending  bool      // a sync is wanted
		lastSync time.Time // start of the last attempt (see heldSince)
		// heldSince is when the pending sync was first wanted. A sync that
		// MinSyncPeriod held back counts as started when the period let it
		// (lastSync + MinSyncPeriod), not when the timer woke: else each
		// sync's wake-up latency pushes the next one back, and under changes
		// arriving once per MinSyncPeriod, as a firewall that reloads every
		// second, the lag grows with every sync (test/results/faults.md,
		// fault 5). Syncs stay MinSyncPeriod apart on average.
		heldSince time.Time
		lastFull  time.Time // start of the last successful full sync
		retryAt   time.Time // when failing: not before this
		failures  int
		carry     core.Changes // conntrack cleanup a failed sync still owes
	)
	timer := r.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := r.clock.Now()
		wait := time.Hour // idle until the first trigger
		if started {
			wait = min(lastFull.Add(r.cfg.FullSyncPeriod).Sub(now), lastSync.Add(r.cfg.SyncPeriod).Sub(now))
			if d, ok := r.driftCheckIn(now); ok {
				wait = min(wait, d)
			}
		}
		if pending {
			due := r.syncDue(lastSync)
			if retryAt.After(due) {
				due = retryAt
			}
			if d := due.Sub(now); d < wait {
				wait = d
			}
		}
		if d := retryAt.Sub(now); d > wait {
			// Nothing syncs before retryAt: waking sooner (a periodic sync or
			// drift check already due) would only spin.
			wait = d
		}
		take := func() { // a trigger: a sync is wanted
			if !pending {
				r.notifyQueued(r.clock.Now())
				heldSince = r.clock.Now()
			}
			pending = true
		}
		if wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				r.log.Info("sync loop stopped; rules left in place")
				return nil
			case <-r.trigger:
				take()
				if !timer.Stop() {
					select {
					case <-timer.C():
					default:
					}
				}
				continue
			case <-timer.C():
			}
		} else {
			// Due now: no round trip through the timer, where a trigger
			// arriving as it fires may win the select, again and again
			// under a storm. A trigger already sent is this sync's.
			select {
			case <-ctx.Done():
				r.log.Info("sync loop stopped; rules left in place")
				return nil
			case <-r.trigger:
				take()
			default:
			}
		}
		now = r.clock.Now()
		checkDue := false
		if started {
			d, ok := r.driftCheckIn(now)
			checkDue = ok && d <= 0
			full := !now.Before(lastFull.Add(r.cfg.FullSyncPeriod))
			if full {
				r.source.ForceFull()
			}
			if full || checkDue || !now.Before(lastSync.Add(r.cfg.SyncPeriod)) {
				if !pending {
					r.notifyQueued(now)
					heldSince = now
				}
				pending = true
			}
		}
		// A due drift check is not held back by MinSyncPeriod or the pace: it
		// comes once per SyncPeriod, and waiting would stretch the repair
		// bound.
		if !pending || (!checkDue && now.Before(r.syncDue(lastSync))) || now.Before(retryAt) {
			continue
		}
		if gate := lastSync.Add(r.cfg.MinSyncPeriod); r.cfg.MinSyncPeriod > 0 && started && heldSince.Before(gate) && !now.Before(gate) &&
			now.Sub(gate) < r.cfg.MinSyncPeriod/10 && retryAt.IsZero() {
			lastSync = gate // held back by MinSyncPeriod: see heldSince
		} else {
			lastSync = now // paced syncs keep their place in pacer.full
		}
		started = true
		res := r.syncOnce(ctx, carry)
		r.pace.synced(now, r.clock.Now().Sub(now))
		if res.Err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(res.Err, ErrNodeUnfit) {
				r.log.WithError(res.Err).Error("sync loop stopped: this node cannot run the data plane")
				return res.Err
			}
			failures++
			base := r.cfg.MinSyncPeriod
			if base == 0 {
				base = paceCeiling
			}
			backoff := base << min(failures-1, 16)
			if backoff > r.cfg.MaxBackoff {
				backoff = r.cfg.MaxBackoff
			}
			retryAt = now.Add(backoff)
			carry = core.Changes{StaleUDP: res.Changes.StaleUDP, ActivatedUDP: res.Changes.ActivatedUDP}
			r.source.ForceFull()
			r.log.WithError(res.Err).WithFields(logrus.Fields{"sync": res.ID, "retryIn": backoff.String()}).Warn("sync failed; previous rules stay in force, next attempt is a full sync")
			continue
		}
		failures, retryAt, carry, pending = 0, time.Time{}, core.Changes{}, false
		if res.Full {
			lastFull = now
		}
	}
}

// syncDue is the earliest start of a pending sync after one that started
// at lastSync: MinSyncPeriod after it when one was given, else when the
// pace lets it.
func (r *Runner) syncDue(lastSync time.Time) time.Time {
	if r.cfg.MinSyncPeriod > 0 {
		return lastSync.Add(r.cfg.MinSyncPeriod)
	}
	return r.pace.due()
}

// syncOnce takes a snapshot and applies it, reporting to observers. carry
// holds the conntrack cleanup of failed syncs: the UDP endpoints that went
// away and the UDP ports that got their first endpoints, which no later
// Snapshot reports again.
func (r *Runner) syncOnce(ctx context.Context, carry core.Changes) SyncResult {
	repair := r.checkDrift(ctx)
	state, changes := r.source.Snapshot()
	if len(carry.StaleUDP) > 0 {
		changes.StaleUDP = append(slices.Clone(carry.StaleUDP), changes.StaleUDP...)
	}
	if len(carry.ActivatedUDP) > 0 {
		changes.ActivatedUDP = append(slices.Clone(carry.ActivatedUDP), changes.ActivatedUDP...)
	}
	if changes.Full && len(repair) == 0 {
		// A full sync is the proxy's memory peak (the whole encoded batch
		// on top of the caches); full syncs are rare, and neither release
		// counts in their duration. A repair skips the collection before
		// it: the node is without its rules until the sync is done.
		r.release()
	}
	r.checkOtherProxies(ctx)
	res := SyncResult{ID: r.syncID.Add(1), Full: changes.Full, Start: r.clock.Now(), State: state, Changes: changes, Repair: repair,
		OtherProxies: r.others}
	log := r.log.WithFields(logrus.Fields{"sync": res.ID, "full": res.Full, "ports": len(changes.Ports)})
	if len(repair) > 0 {
		log.WithField("changed", strings.Join(repair, "; ")).Warn("rules changed from outside; repairing them with a full sync")
	}
	log.Debug("sync start")
	res.Err = r.backend.Sync(ctx, state, changes)
	res.Duration = r.clock.Now().Sub(res.Start)
	if res.Full {
		r.release()
	}
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

// noteDrift is the backend's DriftWatcher callback: it keeps what others
// changed for the next sync and asks for one (MinSyncPeriod or the pace
// still applies, so a storm of changes is one repair per period or
// interval). An empty description only asks for a sync, whose checkDrift
// looks for itself.
func (r *Runner) noteDrift(what string) {
	if what != "" {
		r.driftMu.Lock()
		if len(r.drift) < maxDrift {
			r.drift = append(r.drift, what)
		} else {
			r.driftMore++
		}
		r.driftMu.Unlock()
	}
	r.Trigger()
}

// checkDrift gathers what others changed of the programmed rules, from the
// watcher's reports and the backend's own check, and makes the coming sync
// full when there is any. A check that fails makes it full too: rules that
// cannot be verified are rewritten rather than reported in sync.
func (r *Runner) checkDrift(ctx context.Context) []string {
	r.driftMu.Lock()
	found := r.drift
	if r.driftMore > 0 {
		found = append(found, fmt.Sprintf("%d more changes", r.driftMore))
	}
	r.drift, r.driftMore = nil, 0
	r.driftMu.Unlock()
	if c, ok := r.backend.(DriftChecker); ok && r.driftCheckNow(r.clock.Now()) {
		r.checkedAt = r.clock.Now()
		more, err := c.CheckDrift(ctx)
		if err != nil {
			more = []string{fmt.Sprintf("rules could not be checked (%v)", err)}
		}
		found = append(found, more...)
	}
	if len(found) > 0 {
		r.source.ForceFull()
	}
	return found
}

// driftCheckIn says how long until the backend's drift check is due
// (SyncPeriod after the last one, whatever syncs came between; zero or less:
// due now), and false when the backend has no DriftChecker. The first check
// comes with the first sync.
func (r *Runner) driftCheckIn(now time.Time) (time.Duration, bool) {
	if _, ok := r.backend.(DriftChecker); !ok {
		return 0, false
	}
	if r.checkedAt.IsZero() {
		return 0, true
	}
	return r.checkedAt.Add(r.cfg.SyncPeriod).Sub(now), true
}

// driftCheckNow says whether the sync starting now runs the backend's drift
// check: always for a check that costs nothing, only when due for one that
// lists objects (ListingDriftChecker).
func (r *Runner) driftCheckNow(now time.Time) bool {
	if _, listing := r.backend.(ListingDriftChecker); !listing {
		return true
	}
	d, _ := r.driftCheckIn(now)
	return d <= 0
}

// checkOtherProxies asks the backend for other Service proxies on the node
// at the first sync and then once per SyncPeriod, and logs when one appears
// or goes: once each, not at every check.
func (r *Runner) checkOtherProxies(ctx context.Context) {
	d, ok := r.backend.(OtherProxyDetector)
	now := r.clock.Now()
	if !ok || (!r.othersAt.IsZero() && now.Sub(r.othersAt) < r.cfg.SyncPeriod) {
		return
	}
	found, err := d.OtherProxies(ctx)
	if err != nil {
		// Keep what was known: a failed look proves nothing either way.
		r.log.WithError(err).Debug("look for other Service proxies on this node")
		return
	}
	r.othersAt = now
	was := map[string]bool{}
	for _, o := range r.others {
		was[o.Name] = true
	}
	is := map[string]bool{}
	for _, o := range found {
		is[o.Name] = true
		if !was[o.Name] {
			r.log.WithFields(logrus.Fields{"proxy": o.Name, "found": strings.Join(o.Evidence, ", ")}).Warn(
				"another Service proxy programs this node: both translate the same Service addresses, each its own way; stop it (see the migration section of the installer README)")
		}
	}
	for _, o := range r.others {
		if !is[o.Name] {
			r.log.WithField("proxy", o.Name).Info("the other Service proxy is gone from this node")
		}
	}
	r.others = found
}

func (r *Runner) notifyQueued(at time.Time) {
	r.mu.Lock()
	fs := slices.Clone(r.queued)
	r.mu.Unlock()
	for _, f := range fs {
		f(at)
	}
}
