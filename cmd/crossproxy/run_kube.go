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
	configFile string

	// cfg is the configuration that applies: defaults, the config file, the
	// flags given explicitly (apply).
	cfg     config.Config
	client  kubernetes.Interface
	events  *events.Recorder
	lookup  func(types.NamespacedName) *v1.Service
	status  *health.Status
	metrics *metrics.Metrics
}

// addRunKubeFlags adds --config; the settings it and the flags share are
// the option tables' (options.go). The metrics the proxy serves are made
// here, once: the backend counts its repairs in them before they are served.
func addRunKubeFlags(cmd *cobra.Command) *runKube {
	rk := &runKube{metrics: metrics.New()}
	cmd.Flags().StringVar(&rk.configFile, "config", "", "configuration file: a kube-proxy KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1) or a CrossproxyConfiguration; flags given explicitly override it")
	return rk
}

// apply merges defaults, the config file and the flags given explicitly (in
// that order of precedence, last wins) into rk.cfg and ro's settings. It
// runs before the logger exists, so what it has to say is returned as notes.
func (rk *runKube) apply(ro *runOptions) (notes []string, err error) {
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
	changed := ro.opts.changed
	ro.opts.merge(&cfg)
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
	hnsSettings(changed, &cfg)

	ro.nodeName = cfg.HostnameOverride
	ro.logLevel, ro.logFormat = cfg.LogLevel, cfg.LogFormat
	ro.runner = cfg.Runner
	ro.backend = cfg.Backend
	ro.resolvedCore = cfg.Core
	rk.cfg = cfg
	return notes, nil
}

// connect builds the API client and the event recorder; it must run before
// the backend is built, which takes the recorder as its Notifier.
func (rk *runKube) connect(ro *runOptions, log logrus.FieldLogger) error {
	rc, err := kube.ClientConfig(rk.cfg.Kubeconfig, rk.cfg.QPS, rk.cfg.Burst)
	if err != nil {
		return err
	}
	kube.FastReconnect(rc, log)
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
