package nft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
)

var (
	_ platform.Backend      = (*Backend)(nil)
	_ platform.DriftChecker = (*Backend)(nil)
	_ platform.DriftWatcher = (*Backend)(nil)
)

// Backend programs a NodeState into the kernel's nftables over netlink. It
// remembers what it applied last so a partial sync sends only the changed
// Services' objects; anything unexpected (a failed batch, a table changed from
// outside) is handled by making the next sync a full one.
type Backend struct {
	log logrus.FieldLogger
	cfg Config
	ns  *netNS
	// k is where syncs read the tables and commit their batches: netlink
	// on ns, or the in-memory model in tests.
	k kernel
	// batches is the netlink socket syncs send their batch on; nil when k
	// is not netlink (the probe, the drift watcher, the other-proxy check
	// and read-back need it).
	batches *batchConn
	sysctl  sysctl
	// Conntrack cleans up and lists connections; replaceable in tests.
	conntrack conntracker
	// ctFull reports a full conntrack table, once per episode.
	ctFull conntrackWatch

	// closed is set by Close: the namespace handle and socket are gone, and
	// every operation fails instead of running in the current namespace.
	closed atomic.Bool
	// missedNotes is set by WatchDrift when the kernel dropped change
	// notifications, so the next CheckDrift compares the tables whatever
	// the generation says.
	missedNotes atomic.Bool

	mu            sync.Mutex
	applied       *applied // nil: the next sync is full
	recreate      bool     // the last full sync failed: rebuild the table from scratch
	sysctlChecked bool
	probed        bool // the kernel has what the rulesets need (probe_linux.go)
	stats         SyncStats
	encoder       *ruleEncoder
	lastEncode    time.Duration
	lastKernel    time.Duration
	// gen and census are the ruleset generation and crossproxy's tables
	// with their object counts right after its last batch (CheckDrift);
	// census is nil when they could not be read.
	gen    uint32
	census map[string]tableCount
	// ownGen is the ruleset generation after crossproxy's last batch when
	// the tables then held exactly what crossproxy wrote: nobody committed
	// between the full sync that last wrote everything and that batch (0:
	// not known so). Unlike gen, a check that finds only others' commits
	// leaves it, so it equals the kernel's generation only while the
	// tables are crossproxy's alone (fullAsDiff).
	ownGen uint32
	// unverified names what a full sync could not vouch for: others
	// committed while the watcher was muted and crossproxy's tables do not
	// hold the chains and sets it wrote. CheckDrift reports it once.
	unverified []string

	// watchMu guards watchFD, the drift watcher's socket while watching is
	// set, which a full sync mutes (muteWatch).
	watchMu  sync.Mutex
	watching bool
	watchFD  int
	// mutedHook, when set (by tests), runs while a full sync has the
	// watcher muted, just before its batch goes out.
	mutedHook func()
}

// SyncStats describes the last sync, for logs and benchmarks.
type SyncStats struct {
	Full bool
	// AsDiff: a full sync sent as the difference from what crossproxy last
	// committed, nobody else having committed since (fullAsDiff).
	AsDiff   bool
	Commands int
	Build    time.Duration // model and plan; a full sync's includes encoding (one pass)
	Encode   time.Duration // netlink messages (partial syncs)
	Kernel   time.Duration // send and wait for the kernel's answer
	Apply    time.Duration // Encode + Kernel
	// Skipped are the changed (partial) or all (full) ports left out
	// because nftables cannot hold them.
	Skipped []Skipped
}

// New makes a Backend for the namespace in cfg (the current one if empty).
func New(cfg platform.BackendConfig, log logrus.FieldLogger) (*Backend, error) {
	ns, err := openNetNS(cfg.NetNSPath)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		log:     log.WithField("backend", "nftables"),
		cfg:     Config{Table: cfg.TableName, LocalhostNodePorts: cfg.LocalhostNodePorts},
		ns:      ns,
		encoder: newRuleEncoder(),
		batches: newBatchConn(),
	}
	b.k = &netlinkKernel{ns: ns, conn: b.batches, encoder: b.encoder}
	b.sysctl = procSysctl{ns: ns}
	b.conntrack = &netlinkConntrack{ns: ns}
	b.ctFull = conntrackWatch{report: cfg.Conntrack, every: conntrackCheckEvery}
	return b, nil
}

// Close releases the netlink socket batches go out on and the network
// namespace handle. The rules stay in force; the Backend must not be used
// afterwards.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Swap(true) {
		return nil
	}
	b.batches.close()
	return b.ns.close()
}

// lockOpen takes the backend's lock for an operation, unless the context has
// ended or the backend is closed; the caller unlocks when it returns nil.
func (b *Backend) lockOpen(ctx context.Context) error {
	b.mu.Lock()
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return err
	}
	if b.closed.Load() {
		b.mu.Unlock()
		return errClosed
	}
	return nil
}

// Listen opens a listener in the network namespace the backend programs, so
// that sockets the node answers on (health-check node ports) live where its
// NodePort addresses and rules are: with --netns that is not the namespace
// the process runs in.
func (b *Backend) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := b.ns.do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in the backend's network namespace: %w", address, err)
	}
	return l, nil
}

// errClosed is returned by every operation of a closed Backend.
var errClosed = errors.New("nftables backend is closed")

// Name is "nftables".
func (b *Backend) Name() string { return "nftables" }

// LastSync reports what the last successful sync did.
func (b *Backend) LastSync() SyncStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

func tableObj(name string) *nftables.Table {
	return &nftables.Table{Name: name, Family: nftables.TableFamilyINet}
}

// Sync makes the table match state. A full sync (first, periodic, after a
// failure) writes the whole table in one batch; otherwise only the ports in
// changes.Ports are rewritten, also in one batch.
func (b *Backend) Sync(ctx context.Context, state *core.NodeState, changes core.Changes) error {
	if err := b.lockOpen(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if !b.probed {
		if err := b.probeKernel(); err != nil {
			return err
		}
		b.probed = true
	}
	if !b.sysctlChecked {
		b.checkSysctls(state.Families)
		b.sysctlChecked = true
	}
	if b.ctFull.due(time.Now()) {
		b.ctFull.check(b.sysctl, b.log)
	}
	var err error
	if changes.Full || b.applied == nil {
		if keys, ok := b.fullAsDiff(state); ok {
			err = b.syncPartial(ctx, state, core.Changes{Ports: keys})
			if err == nil && !b.stats.Full { // not sent as a full sync after all (overflow)
				b.stats.Full, b.stats.AsDiff = true, true
			}
		} else {
			err = b.syncFull(ctx, state)
		}
	} else {
		err = b.syncPartial(ctx, state, changes)
	}
	if err != nil {
		return err
	}
	// Conntrack cleanup only once the new rules are in force; the caller
	// hands a failed sync's cleanup to the next one (platform.Backend).
	b.clearConntrack(changes)
	return nil
}

// fullAsDiff says whether a full sync of state can be the difference from
// what crossproxy last committed, and which ports that difference holds: the
// kernel must hold exactly what crossproxy wrote (no commit by anyone since
// its last batch: a foreign change census cannot see, such as a flushed
// chain, leaves the generation moved, and then the full sync rewrites
// everything as the repair of last resort), and the tables' layout (main
// table, shard count, global chains and sets) must be what it was. The ports
// are those whose core ServicePort or local detection is not the one last
// programmed (the core hands out the same pointer for an unchanged port),
// and those gone. One generation read and a pass over the ports: a periodic
// full sync with nothing changed sends no command.
func (b *Backend) fullAsDiff(state *core.NodeState) (map[core.PortKey]struct{}, bool) {
	a := b.applied
	if a == nil || b.recreate || b.ownGen == 0 {
		return nil, false
	}
	if gen, err := b.k.generation(); err != nil || gen != b.ownGen {
		return nil, false
	}
	cfg := b.cfg
	cfg.Shards = cfg.shardsFor(state)
	if cfg.Shards != a.Shards || cfg.table() != a.Table || !reflect.DeepEqual(buildGlobals(state, cfg, classUseOf(a.elems)), a.Globals) {
		return nil, false
	}
	keys := map[core.PortKey]struct{}{}
	for k, p := range state.Ports {
		ap, ok := a.Ports[k]
		if !ok || ap.port != p || !sameDetect(*ap.det, state.LocalDetect[k.Family]) {
			keys[k] = struct{}{}
		}
	}
	for k := range a.Ports {
		if _, ok := state.Ports[k]; !ok {
			keys[k] = struct{}{}
		}
	}
	return keys, true
}

// sameDetect reports whether two local-detection rules are the same.
func sameDetect(a, b core.FamilyLocalDetect) bool {
	return a.Mode == b.Mode && a.Interface == b.Interface && slices.Equal(a.CIDRs, b.CIDRs)
}

// syncFull streams the whole ruleset into one batch: each shard's ports are
// built, planned and encoded in turn (fullBuild), so the sync holds the
// encoded batch and one shard's objects, not the ruleset and its command
// list besides. The batch is still one transaction.
func (b *Backend) syncFull(ctx context.Context, state *core.NodeState) error {
	start := time.Now()
	existing, err := b.inventory()
	if err != nil {
		b.applied = nil
		return err
	}
	fb := newFullBuild(state, b.cfg)
	b.logSkipped(fb.skipped)
	next := fb.newApplied()
	w := b.k.batch(fb.commands())
	recreate := b.recreate
	written := map[string]objectCount{}
	planFull(fb.names(), countObjects(fb.tables(next.record), written), existing, recreate, w)
	built := time.Since(start)
	// A sync that ran out of time before its batch went out changes nothing:
	// the previous rules and what the backend knows of them stay as they are.
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("full sync of table inet %s not sent: %w", fb.table, err)
	}
	// Naming a refused command is rare: the commands are planned again then,
	// into a list this time (the plan is deterministic).
	describe := func(i int) string {
		ops := planRuleset(build(state, b.cfg), existing, recreate).Ops
		if w.Len() != len(ops) || i < 0 || i >= len(ops) {
			return fmt.Sprintf("command %d", i)
		}
		return describeOp(ops[i])
	}
	b.lastEncode = 0
	gen, genErr := b.k.generation()
	unmute := b.muteWatch()
	if b.mutedHook != nil {
		b.mutedHook()
	}
	err = b.commit(w, describe)
	unmute()
	if err != nil {
		b.applied, b.recreate = nil, true
		return fmt.Errorf("full sync of table inet %s: %w", fb.table, err)
	}
	next.setSizes(fb.main)
	b.applied, b.recreate = next, false
	b.rememberBaseline()
	// The tables hold exactly what this batch wrote only if nobody
	// committed between the generation read before it and the one after.
	b.ownGen = 0
	if genErr == nil && b.census != nil && b.gen == gen+1 {
		b.ownGen = b.gen
	}
	if genErr == nil && b.census != nil && b.gen != gen+1 {
		b.verifyMuted(written)
	}
	b.stats = SyncStats{Full: true, Commands: w.Len(), Build: built, Kernel: b.lastKernel, Apply: time.Since(start) - built,
		Skipped: fb.skipped}
	b.log.WithFields(logrus.Fields{"ports": len(fb.keys), "commands": w.Len(), "took": time.Since(start)}).Debug("full sync")
	return nil
}

func (b *Backend) syncPartial(ctx context.Context, state *core.NodeState, changes core.Changes) error {
	start := time.Now()
	ports := make(map[core.PortKey]*portObjects, len(changes.Ports))
	cfg := b.cfg
	cfg.Shards = b.applied.Shards
	dets := detects{}
	var skipped []Skipped
	for k := range changes.Ports {
		p := state.Ports[k]
		if p == nil {
			ports[k] = nil
			continue
		}
		if why := inexpressible(p); why != "" {
			skipped = append(skipped, Skipped{Key: k, Reason: why})
			ports[k] = nil
			continue
		}
		var prev *portSlots
		if ap, ok := b.applied.Ports[k]; ok {
			prev = ap.slots
		}
		ports[k] = buildPort(p, dets.of(state, k.Family), cfg, prev)
	}
	b.logSkipped(skipped)
	plan := planPartial(b.applied, ports)
	if was, now := classUseOf(b.applied.elems), plan.classUse(b.applied); was != now {
		// A class comes into use or goes out of it: its objects are added
		// or deleted in the same batch, the rest of the layout staying as
		// it is (when it would not, the full sync rewrites it).
		if !reflect.DeepEqual(buildGlobals(state, cfg, was), b.applied.Globals) {
			return b.syncFull(ctx, state)
		}
		plan.reclass(b.applied, buildGlobals(state, cfg, now), was, now)
	}
	if plan.Overflow != "" {
		b.log.WithFields(logrus.Fields{"set": plan.Overflow, "size": b.applied.sizes[plan.Overflow]}).
			Info("the changes would fill a set beyond its declared size: full sync, which sizes the sets anew")
		return b.syncFull(ctx, state)
	}
	built := time.Since(start)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("partial sync of %d ports not sent: %w", len(ports), err)
	}
	var encode, kernel time.Duration // nothing sent: no time in either
	if plan.Batch.Len() > 0 {
		own := b.ownGen
		if err := b.apply(plan.Batch); err != nil {
			b.applied, b.ownGen = nil, 0
			return fmt.Errorf("partial sync of %d ports: %w", len(ports), err)
		}
		encode, kernel = b.lastEncode, b.lastKernel
		b.rememberAfter(plan.Batch)
		// Still exactly crossproxy's only if this batch was the one commit
		// since the last that was.
		b.ownGen = 0
		if own != 0 && b.census != nil && b.gen == own+1 {
			b.ownGen = b.gen
		}
	}
	plan.commit(b.applied)
	b.stats = SyncStats{Commands: plan.Batch.Len(), Build: built, Encode: encode, Kernel: kernel, Apply: time.Since(start) - built,
		Skipped: skipped}
	return nil
}

// logSkipped warns about each port left out of a sync, naming it and why.
func (b *Backend) logSkipped(skipped []Skipped) {
	for _, s := range skipped {
		b.log.WithFields(logrus.Fields{"port": s.Key.String(), "reason": s.Reason}).Warn("Service port not programmed: nftables cannot hold it")
	}
}

// inventory lists crossproxy's tables with their chains and sets.
func (b *Backend) inventory() (map[string]inventory, error) { return b.k.inventory(b.cfg.table()) }

// apply commits a planned batch as one transaction.
func (b *Backend) apply(batch *batch) error {
	start := time.Now()
	kb := b.k.batch(len(batch.Ops))
	for _, op := range batch.Ops {
		kb.add(op)
	}
	b.lastEncode = time.Since(start)
	return b.commit(kb, func(i int) string {
		if i < 0 || i >= len(batch.Ops) {
			return fmt.Sprintf("command %d", i)
		}
		return describeOp(batch.Ops[i])
	})
}

// commit hands a batch to the kernel and waits for its verdict; describe(i)
// names the i-th command of a refused batch.
func (b *Backend) commit(kb kernelBatch, describe func(i int) string) error {
	start := time.Now()
	defer func() { b.lastKernel = time.Since(start) }()
	return b.k.commit(kb, describe)
}

var hooks = map[string]*nftables.ChainHook{
	"prerouting":  nftables.ChainHookPrerouting,
	"output":      nftables.ChainHookOutput,
	"postrouting": nftables.ChainHookPostrouting,
	"input":       nftables.ChainHookInput,
	"forward":     nftables.ChainHookForward,
}

func nftSet(t *nftables.Table, s Set) *nftables.Set {
	addr := nftables.TypeIPAddr
	if s.Family == v1.IPv6Protocol {
		addr = nftables.TypeIP6Addr
	}
	ns := &nftables.Set{Table: t, Name: s.Name, Size: s.Size}
	switch s.Kind {
	case SetFrontends:
		ns.KeyType = nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService)
		ns.DataType = nftables.TypeVerdict
		ns.IsMap, ns.Concatenation = true, true
	case SetKeys:
		ns.KeyType = nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService)
		ns.Concatenation = true
	case SetEndpoints:
		// The slot is typed "mark", a 32-bit host-order integer like the
		// numgen result it is compared with: nft has no slot type, and with
		// an integer field (or a typeof declaration naming one) nft 0.9.8
		// (Debian 11) aborts listing a map of two elements or more. No
		// concatenation flag or field list, as nft writes such a map (a
		// hash map needs neither).
		ns.KeyType = nftables.MustConcatSetType(addr, nftables.TypeInetProto, nftables.TypeInetService, nftables.TypeMark)
		ns.DataType = nftables.MustConcatSetType(addr, nftables.TypeInetService)
		ns.IsMap = true
	case SetAddrs:
		ns.KeyType = addr
	case SetAddrPairs:
		ns.KeyType = nftables.MustConcatSetType(addr, addr)
		ns.Concatenation = true
	case SetAffinity:
		ns.KeyType = addr
		ns.Dynamic, ns.HasTimeout, ns.Timeout = true, true, s.Timeout
	}
	return ns
}

// Cleanup deletes crossproxy's tables (and with them every chain, set and
// rule it installed) in one batch. No table is not an error.
func (b *Backend) Cleanup(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed.Load() {
		return errClosed
	}
	b.applied = nil
	existing, err := b.inventory()
	if err != nil {
		return err
	}
	batch := &batch{}
	for _, name := range sortedKeys(existing) {
		batch.add(delTableOp{Table: name})
	}
	if len(batch.Ops) == 0 {
		return nil
	}
	if err := b.apply(batch); err != nil {
		return fmt.Errorf("delete tables of %s: %w", b.cfg.table(), err)
	}
	return nil
}

// checkSysctls reports (and fixes where it can) the kernel parameters the rules need.
func (b *Backend) checkSysctls(families []v1.IPFamily) {
	for _, r := range ensureSysctls(b.sysctl, families, b.cfg.LocalhostNodePorts) {
		l := b.log.WithFields(logrus.Fields{"sysctl": r.Name, "value": r.Was})
		switch {
		case r.Err != nil:
			l.Error(r.String())
		case r.Set:
			l.Warn(r.String())
		default:
			l.Info(r.String())
		}
	}
}
