package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/debug"
)

// runDebug is the optional debug endpoint of `crossproxy run` (off unless
// --debug-address is given). It lives apart from cmd_run.go so the run
// command only has to call addRunDebugFlags and wire.
type runDebug struct {
	address string
}

// addRunDebugFlags adds --debug-address to the run command.
func addRunDebugFlags(cmd *cobra.Command) *runDebug {
	d := &runDebug{}
	cmd.Flags().StringVar(&d.address, "debug-address", "", "serve the explain data of this proxy (crossproxy explain --debug-url) on this loopback address, e.g. "+
		debug.DefaultAddress+"; off when empty")
	return d
}

// wire returns the sink the object sources must feed: next itself when the
// endpoint is off, else a debug.Store in front of it. When on, it records the
// runner's syncs and serves on a goroutine of wg until ctx ends. A
// non-loopback address is an error; a failure to listen later is logged and
// does not stop the proxy, whose job is the data plane.
func (d *runDebug) wire(ctx context.Context, wg *sync.WaitGroup, next platform.ObjectSink, backend platform.Backend, runner *platform.Runner,
	nodeName string, log logrus.FieldLogger) (platform.ObjectSink, error) {
	if d == nil || d.address == "" {
		return next, nil
	}
	if err := debug.CheckLoopback(d.address); err != nil {
		return nil, fmt.Errorf("flag --debug-address: %w", err)
	}
	store := debug.NewStore(next)
	h := &debug.Handler{NodeName: nodeName, Objects: store, Backend: backend, Log: log}
	runner.OnSync(h.Observe)
	wg.Go(func() {
		if err := debug.Serve(ctx, d.address, h, log, nil); err != nil {
			log.WithError(err).Error("debug endpoint stopped")
		}
	})
	return store, nil
}
