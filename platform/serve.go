package platform

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// shutdownGrace is how long a server stopped by its context lets requests in
// flight finish before their connections are closed.
const shutdownGrace = 2 * time.Second

// ServeHTTP serves h on l until ctx ends, then shuts the server down: l is
// closed at once, requests in flight get shutdownGrace to finish, and what is
// left after that is closed. It returns only once the server has stopped, so
// a caller that waits for it knows no handler runs any more: nil when ctx
// ended, else the error that stopped serving. Every long-lived HTTP server of
// crossproxy (health, metrics, health-check node ports, debug) stops this one
// way.
func ServeHTTP(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan struct{})
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		select {
		case <-ctx.Done():
		case <-served:
			return // serving failed on its own; nothing to shut down
		}
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}()
	err := srv.Serve(l)
	close(served)
	<-shut
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
