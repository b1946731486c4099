package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/debug"
	"github.com/crossproxy/crossproxy/platform/logging"
)

// logLines is how many of its last log lines the proxy keeps for the
// secure endpoint (`crossproxy bundle`).
const logLines = 500

// runDebug holds the two optional explain endpoints of `crossproxy run`:
// the loopback one (--debug-address, unauthenticated, for a shell on the
// node) and the secure one (--secure-address, TLS, every request
// authorized through the API server, for `crossproxy status`, remote
// `explain` and `bundle`). It lives apart from cmd_run.go so the run command
// only has to call addRunDebugFlags, attachLog and wire.
type runDebug struct {
	address string

	secureAddress string
	certFile      string
	keyFile       string
	audience      string

	ring *logging.Ring
}

// addRunDebugFlags adds the endpoints' flags to the run command.
func addRunDebugFlags(cmd *cobra.Command) *runDebug {
	d := &runDebug{}
	f := cmd.Flags()
	f.StringVar(&d.address, "debug-address", "", "serve the explain data of this proxy (crossproxy explain --debug-url) on this loopback address, e.g. "+
		debug.DefaultAddress+", unauthenticated; off when empty")
	f.StringVar(&d.secureAddress, "secure-address", "", fmt.Sprintf("serve status, explain data, logs, config and metrics over TLS on this address (e.g. :%d) to callers the API server "+
		"authorizes for get %s.%s on this node (what crossproxy status, explain --node and bundle read through the API server); off when empty",
		debug.DefaultSecurePort, debug.AccessResource, debug.AccessGroup))
	f.StringVar(&d.certFile, "secure-cert-file", "", "TLS certificate of --secure-address (with --secure-key-file); without both, a self-signed one is generated at start")
	f.StringVar(&d.keyFile, "secure-key-file", "", "TLS key of --secure-cert-file")
	f.StringVar(&d.audience, "secure-audience", debug.DefaultAudience, "the audience a bearer token must be issued for to be accepted by --secure-address")
	return d
}

// attachLog starts keeping the logger's last lines when the secure endpoint
// is on (it serves them).
func (d *runDebug) attachLog(log *logrus.Logger) {
	if d == nil || d.secureAddress == "" {
		return
	}
	d.ring = logging.NewRing(logLines)
	log.AddHook(d.ring)
}

// wire returns the sink the object sources must feed: next itself when both
// endpoints are off, else a debug.Store in front of it. When on, it records
// the runner's syncs and serves on goroutines of wg until ctx ends. A
// non-loopback --debug-address, a secure endpoint without an API server
// (standalone mode: nobody to authorize with) or an unusable certificate is
// an error; a failure to listen later is logged and does not stop the
// proxy, whose job is the data plane.
func (d *runDebug) wire(ctx context.Context, wg *sync.WaitGroup, ro *runOptions, next platform.ObjectSink, backend platform.Backend, runner *platform.Runner,
	log logrus.FieldLogger) (platform.ObjectSink, error) {
	if d == nil || (d.address == "" && d.secureAddress == "") {
		return next, nil
	}
	if d.address != "" {
		if err := debug.CheckLoopback(d.address); err != nil {
			return nil, fmt.Errorf("flag --debug-address: %w", err)
		}
	}
	store := debug.NewStore(next)
	h := &debug.Handler{NodeName: ro.nodeName, Objects: store, Backend: backend, Log: log}
	runner.OnSync(h.Observe)
	if d.address != "" {
		wg.Go(func() {
			if err := debug.Serve(ctx, d.address, h, log, nil); err != nil {
				log.WithError(err).Error("debug endpoint stopped")
			}
		})
	}
	if d.secureAddress == "" {
		return store, nil
	}
	rk := ro.kube
	if rk.client == nil {
		return nil, fmt.Errorf("flag --secure-address: needs the API server to authorize callers, and standalone mode (--manifests) has none")
	}
	cert, err := debug.ServerCert(d.certFile, d.keyFile, ro.nodeName)
	if err != nil {
		return nil, fmt.Errorf("flag --secure-address: %w", err)
	}
	sum := &debug.Summary{NodeName: ro.nodeName, Version: version, Backend: rk.cfg.Mode, Healthz: rk.healthz}
	sum.Start()
	runner.OnSync(sum.Observe)
	secure := &debug.Secure{Handler: h, Summary: sum, Logs: d.ring.Lines, Config: rk.cfg, Metrics: rk.metrics.Handler()}
	auth := &debug.Auth{
		Tokens:   rk.client.AuthenticationV1().TokenReviews(),
		Access:   rk.client.AuthorizationV1().SubjectAccessReviews(),
		Audience: d.audience,
		NodeName: ro.nodeName,
		Log:      log,
	}
	wg.Go(func() {
		if err := debug.ServeSecure(ctx, d.secureAddress, cert, auth, secure, log, nil); err != nil {
			log.WithError(err).Error("secure endpoint stopped")
		}
	})
	return store, nil
}

// healthz is the /healthz verdict for the status summary, and why it fails.
// The status exists once observe has run; before, the proxy is starting.
func (rk *runKube) healthz() (bool, string) {
	if rk.status == nil {
		return true, ""
	}
	if live := rk.status.Live(); !live.Healthy && live.PendingSince != nil {
		waited := live.CurrentTime.Sub(*live.PendingSince).Round(time.Second)
		return false, fmt.Sprintf("an update has waited %s for a sync, more than twice the sync period", waited)
	}
	if !rk.status.NodeEligible() {
		return false, "the node is not eligible for traffic: its Node object is not known yet, is being deleted, or is tainted ToBeDeletedByClusterAutoscaler"
	}
	return true, ""
}
