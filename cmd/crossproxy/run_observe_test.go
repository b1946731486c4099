package main

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
	"github.com/crossproxy/crossproxy/platform/health"
	"github.com/crossproxy/crossproxy/platform/metrics"
)

// flakyBackend fails every Sync while fail is set.
type flakyBackend struct {
	fail  atomic.Bool
	syncs atomic.Int64
}

func (b *flakyBackend) Name() string { return "flaky" }
func (b *flakyBackend) Sync(context.Context, *core.NodeState, core.Changes) error {
	b.syncs.Add(1)
	if b.fail.Load() {
		return errors.New("netlink: operation not permitted")
	}
	return nil
}
func (b *flakyBackend) Cleanup(context.Context) error { return nil }
func (b *flakyBackend) Close() error                  { return nil }

func (b *flakyBackend) Programmed(context.Context, types.NamespacedName) (*platform.ProgrammedService, error) {
	return nil, nil
}

// TestObserveReportsFailingSyncs: while syncs fail, the pending update ages
// past 2 x sync period and /livez turns unhealthy, failures are counted by
// reason; a successful sync makes it healthy again.
func TestObserveReportsFailingSyncs(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	tracker, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
	if err != nil {
		t.Fatal(err)
	}
	backend := &flakyBackend{}
	backend.fail.Store(true)
	runner := platform.NewRunner(platform.RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 100 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}, tracker, backend, log)
	rk := &runKube{cfg: config.Default("linux"), metrics: metrics.New()}
	rk.cfg.HealthzBindAddress, rk.cfg.MetricsBindAddress = "", ""
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := rk.observe(ctx, &wg, runner, nil, log); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	runner.Trigger()

	waitUntil(t, "livez unhealthy while syncs fail", func() bool { return !rk.status.Live().Healthy })
	var failures float64
	mfs, _ := rk.metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "crossproxy_sync_failures_total" {
			for _, m := range mf.GetMetric() {
				failures += m.GetCounter().GetValue()
			}
		}
	}
	if failures < 1 || backend.syncs.Load() < 2 {
		t.Fatalf("failures counted %v, syncs tried %d", failures, backend.syncs.Load())
	}

	backend.fail.Store(false)
	waitUntil(t, "livez healthy after a successful sync", func() bool { return rk.status.Live().Healthy })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func waitUntil(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestObserveWiresProxyHealthIntoNodePorts: the health-check node ports
// answer 503 while the proxy itself is unhealthy, as kube-proxy's
// serviceProxyHealthy, so a cloud load balancer stops sending to a node
// whose rules are stale.
func TestObserveWiresProxyHealthIntoNodePorts(t *testing.T) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	tracker, err := core.NewTracker(core.Options{IPFamilies: []v1.IPFamily{v1.IPv4Protocol}})
	if err != nil {
		t.Fatal(err)
	}
	runner := platform.NewRunner(platform.RunnerConfig{MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 50 * time.Millisecond}, tracker, &flakyBackend{}, log)
	rk := &runKube{cfg: config.Default("linux"), metrics: metrics.New()}
	rk.cfg.HealthzBindAddress, rk.cfg.MetricsBindAddress = "", ""
	hc := &health.NodePorts{Log: log}
	var wg sync.WaitGroup // no server: both bind addresses are empty
	if err := rk.observe(context.Background(), &wg, runner, hc, log); err != nil {
		t.Fatal(err)
	}
	if hc.ProxyHealthy == nil {
		t.Fatal("NodePorts.ProxyHealthy not wired to the proxy's liveness")
	}
	// No sync has run: the start is pending; past 2 x sync period the proxy is unhealthy.
	waitUntil(t, "node ports see the proxy unhealthy", func() bool { return !hc.ProxyHealthy() })
	rk.status.Updated(time.Now())
	if !hc.ProxyHealthy() {
		t.Error("node ports do not see the proxy healthy after a sync")
	}
}
