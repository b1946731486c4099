package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/health"
	"github.com/crossproxy/crossproxy/platform/logging"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

// runOptions is everything `crossproxy run` is configured with: the flags
// (the option tables, options.go, plus the standalone ones) and, once setup
// has merged them over the defaults and the config file, the settings that
// apply.
type runOptions struct {
	opts         *optionSet
	manifests    []string
	pollInterval time.Duration

	// Set by setup from the merged configuration.
	nodeName     string
	runner       platform.RunnerConfig
	backend      platform.BackendConfig
	logLevel     string
	logFormat    string
	resolvedCore core.Options
	logger       *logrus.Logger
	debug        *runDebug // --debug-address (run_debug.go)
	kube         *runKube  // config file, API server, health, metrics, events (run_kube.go)
}

func newRunCommand() *cobra.Command {
	cmd, _ := newRunCommandWith()
	return cmd
}

// newRunCommandWith is the run command and the options its flags fill.
func newRunCommandWith() (*cobra.Command, *runOptions) {
	ro := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the proxy: follow Services and EndpointSlices and program this node",
		Long: `run programs this node's data plane (nftables on Linux, HNS on Windows) and keeps it in
step with the Services, EndpointSlices and Node it follows.

With --manifests it follows files instead of an API server (standalone mode, for labs
and tests): the files are polled, and a file that fails to parse is reported while the
previous objects stay in force.

Stopping run leaves the rules in place, so a restart or upgrade does not interrupt traffic;
'crossproxy cleanup' removes them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return ro.run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&ro.manifests, "manifests", nil, "standalone mode: follow Service, EndpointSlice and Node objects in these files or directories")
	f.DurationVar(&ro.pollInterval, "manifest-poll-interval", 500*time.Millisecond, "standalone mode: how often the manifest files are checked for changes")
	ro.opts = bindOptions(f, runOptionTable(), nftOptionTable(), hnsOptionTable(), coreOptionTable())
	ro.debug = addRunDebugFlags(cmd)
	ro.kube = addRunKubeFlags(cmd)
	return cmd, ro
}

// setup merges the config file and flags, validates them and builds the logger.
func (ro *runOptions) setup() error {
	notes, err := ro.kube.apply(ro)
	if err != nil {
		return err
	}
	log, err := logging.New(os.Stderr, ro.logFormat, ro.logLevel)
	if err != nil {
		return err
	}
	logging.RedirectKlog(log)
	ro.debug.attachLog(log)
	ro.logger = log
	logNotes(log, ro.kube.cfg, notes)
	if ro.nodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("flag --hostname-override: not set and the host name is unknown: %w", err)
		}
		ro.nodeName = host
	}
	ro.backend.NodeName = ro.nodeName
	if err := ro.resolvedCore.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	return nil
}

// run starts the source, the backend and the sync loop, and blocks until ctx
// ends. It returns only after every goroutine it started (servers, the
// manifest watcher) has stopped, so nothing still touches the tracker, the
// backend or a port when it returns.
func (ro *runOptions) run(ctx context.Context) error {
	if err := ro.setup(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	// The backend is closed last, once every goroutine that may use it
	// (sync loop, debug reads) has stopped; closing leaves its rules in place.
	var backend platform.Backend
	defer func() { closeBackend(backend, ro.logger) }()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: an early return stops what was started
	log := ro.logger.WithField("node", ro.nodeName)
	tracker, err := core.NewTracker(ro.resolvedCore)
	if err != nil {
		return fmt.Errorf("core options: %w", err)
	}
	if len(ro.manifests) == 0 {
		if err := ro.kube.connect(ro, log); err != nil {
			return err
		}
		defer ro.kube.events.Shutdown()
	}
	nodeSourceVIP(ctx, ro.kube.client, ro.nodeName, &ro.backend, log)
	// The backend counts drift it repairs, and a full conntrack table, in
	// the metrics served later.
	ro.backend.Repairs, ro.backend.Conntrack = ro.kube.metrics, ro.kube.metrics
	backend, err = newBackend(ro.backend, log)
	if err != nil {
		return fmt.Errorf("start backend: %w", err)
	}
	// Collecting around full syncs keeps the peak resident size near what is
	// live (test/results/scale.md).
	ro.runner.ReleaseMemory = debug.FreeOSMemory
	runner := platform.NewRunner(ro.runner, tracker, backend, log)
	var reported map[string]bool // problems already logged
	runner.OnSync(func(res platform.SyncResult) {
		entry := log.WithFields(logrus.Fields{"sync": res.ID, "full": res.Full, "duration": res.Duration.String()})
		if res.Err != nil {
			return // the runner logs failures
		}
		// Each rejected object or field is logged once as a warning, when it
		// first appears, so a bad manifest is visible without flooding the log.
		seen := make(map[string]bool, len(res.State.Problems))
		for _, p := range res.State.Problems {
			msg := p.String()
			seen[msg] = true
			if !reported[msg] {
				entry.WithField("service", p.Service.String()).Warn(msg)
			}
		}
		reported = seen
		entry.WithField("ports", len(res.State.Ports)).Info("rules in sync")
	})

	hc := &health.NodePorts{Log: log}
	if l, ok := backend.(listener); ok {
		hc.Listen = l.Listen
	}
	defer hc.Close()
	if err := ro.kube.observe(ctx, &wg, runner, hc, log); err != nil {
		return err
	}
	// The debug endpoints, when enabled, record the objects on their way to
	// the tracker; they come after observe, whose health status they report.
	sink, err := ro.debug.wire(ctx, &wg, ro, tracker, backend, runner, log)
	if err != nil {
		return err
	}
	if len(ro.manifests) == 0 {
		return runWith(ctx, runner, func(ctx context.Context) error { return ro.kube.follow(ctx, ro, sink, runner, log) })
	}
	w := &manifest.Watcher{
		Paths:    ro.manifests,
		NodeName: ro.nodeName,
		Interval: ro.pollInterval,
		Sink:     sink,
		Log:      log,
		OnChange: runner.Trigger,
	}
	if err := w.Load(); err != nil {
		return fmt.Errorf("standalone mode: %w", err)
	}
	log.WithField("manifests", ro.manifests).Info("standalone mode: following manifest files")
	// The manifests name the node; there is no Node object to watch for deletion.
	ro.kube.status.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: ro.nodeName}})
	wg.Go(func() { w.Run(ctx) })
	return runner.Run(ctx)
}

// runWith runs the sync loop and source side by side until ctx ends or the
// source fails (its initial listing never completed).
func runWith(ctx context.Context, runner *platform.Runner, source func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- source(ctx) }()
	runErr := runner.Run(ctx)
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return runErr
}

// listener is a backend that opens the node's listening sockets where it
// programs its rules (the nftables backend, in its network namespace).
type listener interface {
	Listen(network, address string) (net.Listener, error)
}

// closeBackend releases what the backend holds (netlink socket, namespace
// handle); the programmed rules stay.
func closeBackend(b platform.Backend, log logrus.FieldLogger) {
	if err := b.Close(); err != nil {
		log.WithError(err).Warn("close backend")
	}
}
