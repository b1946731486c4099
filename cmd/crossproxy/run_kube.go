package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/crossproxy/crossproxy/core"
	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
	"github.com/crossproxy/crossproxy/platform/events"
	"github.com/crossproxy/crossproxy/platform/health"
	"github.com/crossproxy/crossproxy/platform/kube"
	"github.com/crossproxy/crossproxy/platform/metrics"
)

// runKube is the API-server side of `crossproxy run`: the config file, the
// client, informers, health and metrics servers and events. It lives apart
// from cmd_run.go so the run command only calls addRunKubeFlags, apply and
// start.
type runKube struct {
	configFile       string
	kubeconfig       string
	qps              float32
	burst            int
	healthzAddress   string
	metricsAddress   string
	configSyncPeriod time.Duration

	cfg     config.Config
	client  kubernetes.Interface
	events  *events.Recorder
	lookup  func(types.NamespacedName) *v1.Service
	status  *health.Status
	metrics *metrics.Metrics
}

// addRunKubeFlags adds the config-file, API-server, health and metrics flags.
func addRunKubeFlags(cmd *cobra.Command) *runKube {
	rk := &runKube{}
	def := config.Default(runtime.GOOS)
	f := cmd.Flags()
	f.StringVar(&rk.configFile, "config", "", "configuration file: a kube-proxy KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) or a CrossproxyConfiguration; flags given explicitly override it")
	f.StringVar(&rk.kubeconfig, "kubeconfig", "", "kubeconfig file of the API server (default: $KUBECONFIG, else in-cluster config)")
	f.Float32Var(&rk.qps, "kube-api-qps", 0, "API client queries per second (0: client-go default)")
	f.IntVar(&rk.burst, "kube-api-burst", 0, "API client burst (0: client-go default)")
	f.StringVar(&rk.healthzAddress, "healthz-bind-address", def.HealthzBindAddress, "host:port of /healthz and /livez (kube-proxy's meaning); empty disables")
	f.StringVar(&rk.metricsAddress, "metrics-bind-address", def.MetricsBindAddress, "host:port of /metrics (Prometheus); empty disables")
	f.DurationVar(&rk.configSyncPeriod, "config-sync-period", def.ConfigSyncPeriod, "informer resync period")
	return rk
}

// apply merges defaults, the config file and the flags given explicitly (in
// that order of precedence, last wins) into ro and rk.cfg. It runs before the
// logger exists, so what it has to say is returned as notes.
func (rk *runKube) apply(changed func(flag string) bool, ro *runOptions) (notes []string, err error) {
	cfg := config.Default(runtime.GOOS)
	if rk.configFile != "" {
		if cfg, err = config.Load(rk.configFile, runtime.GOOS); err != nil {
			return nil, hostProcessConfigHint(rk.configFile, os.Getenv("CONTAINER_SANDBOX_MOUNT_POINT"), err)
		}
		for _, ig := range cfg.Ignored {
			notes = append(notes, "config field ignored: "+ig.String())
		}
		notes = append(notes, cfg.Notes...)
	}
	flagOpts, err := ro.coreOptions()
	if err != nil {
		return nil, err
	}
	if rk.configFile == "" {
		cfg.Core = flagOpts
	} else {
		mergeCoreFlags(&cfg.Core, flagOpts, changed)
	}
	str := func(flag string, dst *string, v string) {
		if changed(flag) {
			*dst = v
		}
	}
	str("kubeconfig", &cfg.Kubeconfig, rk.kubeconfig)
	str("hostname-override", &cfg.HostnameOverride, ro.nodeName)
	str("node", &cfg.HostnameOverride, ro.nodeName)
	str("healthz-bind-address", &cfg.HealthzBindAddress, rk.healthzAddress)
	str("metrics-bind-address", &cfg.MetricsBindAddress, rk.metricsAddress)
	str("log-level", &cfg.LogLevel, ro.logLevel)
	str("log-format", &cfg.LogFormat, ro.logFormat)
	str("nftables-table", &cfg.Backend.TableName, ro.backend.TableName)
	str("network-name", &cfg.Backend.NetworkName, ro.backend.NetworkName)
	str("source-vip", &cfg.Backend.SourceVIP, ro.backend.SourceVIP)
	if changed("localhost-nodeports") {
		cfg.Backend.LocalhostNodePorts = ro.backend.LocalhostNodePorts
	}
	if changed("enable-dsr") {
		cfg.Backend.EnableDSR = ro.backend.EnableDSR
	}
	if changed("kube-api-qps") {
		cfg.QPS = rk.qps
	}
	if changed("kube-api-burst") {
		cfg.Burst = rk.burst
	}
	if changed("sync-period") {
		cfg.Runner.SyncPeriod = ro.runner.SyncPeriod
	}
	if changed("full-sync-period") {
		cfg.Runner.FullSyncPeriod = ro.runner.FullSyncPeriod
	}
	if changed("min-sync-period") {
		cfg.Runner.MinSyncPeriod = ro.runner.MinSyncPeriod
	}
	if changed("config-sync-period") {
		cfg.ConfigSyncPeriod = rk.configSyncPeriod
	}
	if err := cfg.Validate(runtime.GOOS); err != nil {
		return nil, err
	}
	// Standalone mode (labs, e2e tests that run several proxies at once)
	// serves health and metrics only when asked to, so default ports never
	// collide.
	if len(ro.manifests) > 0 && rk.configFile == "" {
		if !changed("healthz-bind-address") {
			cfg.HealthzBindAddress = ""
		}
		if !changed("metrics-bind-address") {
			cfg.MetricsBindAddress = ""
		}
	}
	mergeHNSFlags(changed, &cfg, ro.backend)
	// The flag-only settings stay as the flags say.
	cfg.Backend.NetNSPath = ro.backend.NetNSPath
	cfg.Runner.MaxBackoff = ro.runner.MaxBackoff

	ro.nodeName = cfg.HostnameOverride
	ro.logLevel, ro.logFormat = cfg.LogLevel, cfg.LogFormat
	ro.runner = cfg.Runner
	ro.backend = cfg.Backend
	ro.coreOptions = func() (core.Options, error) { return cfg.Core, nil }
	rk.cfg = cfg
	return notes, nil
}

// mergeCoreFlags copies into opts the core options whose flags were given.
func mergeCoreFlags(opts *core.Options, flags core.Options, changed func(string) bool) {
	if changed("proxy-name") {
		opts.ProxyName = flags.ProxyName
	}
	if changed("ip-families") {
		opts.IPFamilies = flags.IPFamilies
	}
	if changed("nodeport-addresses") {
		opts.NodePortAddresses = flags.NodePortAddresses
	}
	if changed("masquerade-all") {
		opts.MasqueradeAll = flags.MasqueradeAll
	}
	if changed("cluster-cidr") {
		opts.LocalDetect.CIDRs = flags.LocalDetect.CIDRs
		if !changed("detect-local-mode") && opts.LocalDetect.Mode == core.LocalDetectNone {
			opts.LocalDetect.Mode = core.LocalDetectClusterCIDR
		}
	}
	if changed("detect-local-mode") {
		opts.LocalDetect.Mode = flags.LocalDetect.Mode
	}
	if changed("pod-bridge-interface") {
		opts.LocalDetect.BridgeInterface = flags.LocalDetect.BridgeInterface
	}
	if changed("pod-interface-name-prefix") {
		opts.LocalDetect.InterfaceNamePrefix = flags.LocalDetect.InterfaceNamePrefix
	}
}

// connect builds the API client and the event recorder; it must run before
// the backend is built, which takes the recorder as its Notifier.
func (rk *runKube) connect(ro *runOptions, log logrus.FieldLogger) error {
	rc, err := kube.ClientConfig(rk.cfg.Kubeconfig, rk.cfg.QPS, rk.cfg.Burst)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("API client: %w", err)
	}
	rk.client = client
	rk.events = events.New(client, ro.nodeName, log)
	rk.events.Lookup = func(k types.NamespacedName) *v1.Service {
		if rk.lookup != nil {
			return rk.lookup(k)
		}
		return nil
	}
	ro.backend.Notifier = rk.events
	log.WithFields(logrus.Fields{"server": rc.Host}).Info("following the API server")
	return nil
}

// observe attaches health and metrics to the runner and starts their servers,
// which serve until ctx ends; wg waits for them. A server that cannot listen
// stops the start: an operator who configured a probe port relies on it.
func (rk *runKube) observe(ctx context.Context, wg *sync.WaitGroup, runner *platform.Runner, hc *health.NodePorts, log logrus.FieldLogger) error {
	rk.status = health.NewStatus(2 * runner.Config().SyncPeriod)
	if rk.metrics == nil {
		rk.metrics = metrics.New()
	}
	if hc != nil {
		// As kube-proxy: a health-check node port fails while the proxy
		// itself is unhealthy, whatever its local endpoint count.
		hc.ProxyHealthy = func() bool { return rk.status.Live().Healthy }
	}
	runner.OnQueued(func(at time.Time) {
		rk.status.QueuedUpdate(at)
		rk.metrics.Queued(at)
	})
	runner.OnSync(func(res platform.SyncResult) {
		rk.metrics.ObserveSync(res)
		if rk.events != nil {
			others := map[string]string{}
			for _, o := range res.OtherProxies {
				others[o.Name] = strings.Join(o.Evidence, ", ")
			}
			rk.events.OtherProxies(others)
		}
		if res.Err != nil {
			return
		}
		rk.status.Updated(res.Start.Add(res.Duration))
		if hc != nil {
			if err := hc.SyncState(res.State); err != nil {
				log.WithError(err).WithField("sync", res.ID).Warn("health-check node ports")
			}
		}
		if rk.events != nil {
			rk.events.Problems(res.State.Problems)
		}
	})
	if err := serve(ctx, wg, "healthz", rk.cfg.HealthzBindAddress, rk.status.Handler(), log); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", rk.metrics.Handler())
	return serve(ctx, wg, "metrics", rk.cfg.MetricsBindAddress, mux, log)
}

// serve listens on addr (nothing when empty) and serves h on a goroutine of
// wg until ctx ends (platform.ServeHTTP).
func serve(ctx context.Context, wg *sync.WaitGroup, name, addr string, h http.Handler, log logrus.FieldLogger) error {
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s server on %s: %w", name, addr, err)
	}
	log.WithField("address", l.Addr().String()).Infof("serving %s", name)
	wg.Go(func() {
		if err := platform.ServeHTTP(ctx, l, h); err != nil {
			log.WithError(err).Errorf("%s server stopped", name)
		}
	})
	return nil
}

// follow runs the informers into sink until ctx ends; the first Trigger comes
// once the initial listing is complete.
func (rk *runKube) follow(ctx context.Context, ro *runOptions, sink platform.ObjectSink, runner *platform.Runner, log logrus.FieldLogger) error {
	src := &kube.Source{
		Client:       rk.client,
		NodeName:     ro.nodeName,
		ProxyName:    rk.cfg.Core.ProxyName,
		Sink:         sink,
		OnChange:     runner.Trigger,
		ResyncPeriod: rk.cfg.ConfigSyncPeriod,
		Log:          log,
	}
	if rk.status != nil {
		src.OnNode = rk.status.SetNode
	}
	rk.lookup = src.Service
	return src.Run(ctx)
}

// logNotes writes what apply had to say once the logger exists.
func logNotes(log logrus.FieldLogger, cfg config.Config, notes []string) {
	if cfg.Source != "" {
		log.WithFields(logrus.Fields{"file": cfg.Source, "kind": cfg.Kind, "mode": cfg.Mode}).Info("configuration loaded")
	}
	for _, n := range notes {
		log.Warn(strings.TrimSpace(n))
	}
}
