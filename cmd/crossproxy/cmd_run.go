package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/manifest"
)

func init() { addCommand(newRunCommand) }

// runOptions is everything `crossproxy run` is configured with.
type runOptions struct {
	nodeName     string
	manifests    []string
	pollInterval time.Duration
	runner       platform.RunnerConfig
	backend      platform.BackendConfig
	logLevel     string
	logFormat    string
	coreOptions  func() (core.Options, error)
	resolvedCore core.Options
	logger       *logrus.Logger
	debug        *runDebug // --debug-address (run_debug.go)
}

func newRunCommand() *cobra.Command {
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
	f.StringVar(&ro.nodeName, "hostname-override", "", "name of this node's Node object (default: the host name)")
	f.StringVar(&ro.nodeName, "node", "", "alias of --hostname-override")
	f.StringSliceVar(&ro.manifests, "manifests", nil, "standalone mode: follow Service, EndpointSlice and Node objects in these files or directories")
	f.DurationVar(&ro.pollInterval, "manifest-poll-interval", 500*time.Millisecond, "standalone mode: how often the manifest files are checked for changes")
	f.DurationVar(&ro.runner.SyncPeriod, "sync-period", time.Hour, "period of full syncs, which repair rules changed behind the proxy's back")
	f.DurationVar(&ro.runner.MinSyncPeriod, "min-sync-period", time.Second, "shortest time between two syncs; changes arriving faster are coalesced")
	f.StringVar(&ro.backend.TableName, "nftables-table", "crossproxy", "Linux: the nftables table crossproxy owns")
	f.BoolVar(&ro.backend.LocalhostNodePorts, "localhost-nodeports", false, "Linux: answer NodePorts on 127.0.0.1 too (sets route_localnet)")
	f.StringVar(&ro.backend.NetNSPath, "netns", "", "Linux: program the rules in this network namespace (path such as /run/netns/NAME) instead of the current one")
	f.StringVar(&ro.backend.NetworkName, "network-name", "", "Windows: the HNS network the load balancers attach to")
	f.StringVar(&ro.backend.SourceVIP, "source-vip", "", "Windows: source address for load-balanced traffic on overlay networks")
	f.BoolVar(&ro.backend.EnableDSR, "enable-dsr", false, "Windows: use direct server return where HNS supports it")
	f.StringVar(&ro.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&ro.logFormat, "log-format", "text", "log format: text or json")
	ro.coreOptions = addCoreOptionFlags(cmd)
	ro.debug = addRunDebugFlags(cmd)
	return cmd
}

// setup validates the options and builds the logger.
func (ro *runOptions) setup() error {
	log := logrus.New()
	log.SetOutput(os.Stderr)
	level, err := logrus.ParseLevel(ro.logLevel)
	if err != nil {
		return fmt.Errorf("flag --log-level: %w", err)
	}
	log.SetLevel(level)
	switch ro.logFormat {
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return fmt.Errorf("flag --log-format: %q is not text or json", ro.logFormat)
	}
	ro.logger = log
	if ro.nodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("flag --hostname-override: not set and the host name is unknown: %w", err)
		}
		ro.nodeName = host
	}
	ro.backend.NodeName = ro.nodeName
	opts, err := ro.coreOptions()
	if err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		return fmt.Errorf("invalid options: %w", err)
	}
	ro.resolvedCore = opts
	return nil
}

// run starts the source, the backend and the sync loop, and blocks until ctx ends.
func (ro *runOptions) run(ctx context.Context) error {
	if err := ro.setup(); err != nil {
		return err
	}
	log := ro.logger.WithField("node", ro.nodeName)
	tracker, err := core.NewTracker(ro.resolvedCore)
	if err != nil {
		return fmt.Errorf("core options: %w", err)
	}
	backend, err := newBackend(ro.backend, log)
	if err != nil {
		return fmt.Errorf("start backend: %w", err)
	}
	runner := platform.NewRunner(ro.runner, tracker, backend, log)
	runner.OnSync(func(res platform.SyncResult) {
		entry := log.WithFields(logrus.Fields{"sync": res.ID, "full": res.Full, "duration": res.Duration.String()})
		if res.Err != nil {
			return // the runner logs failures
		}
		for _, p := range res.State.Problems {
			entry.WithField("service", p.Service.String()).Debug(p.String())
		}
		entry.WithField("ports", len(res.State.Ports)).Info("rules in sync")
	})

	// The debug endpoint, when enabled, records the objects on their way to the tracker.
	sink, err := ro.debug.wire(ctx, tracker, backend, runner, ro.nodeName, log)
	if err != nil {
		return err
	}

	if len(ro.manifests) == 0 {
		return errors.New("no source: give --manifests (standalone mode); API-server mode needs --kubeconfig or in-cluster config")
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
	go w.Run(ctx)
	return runner.Run(ctx)
}
