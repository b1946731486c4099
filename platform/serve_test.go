package platform

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestServeHTTPStopsWithItsContext: a request in flight when the context
// ends still gets its answer, ServeHTTP returns nil only after it, and the
// address is free again at once.
func TestServeHTTPStopsWithItsContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	inHandler, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(inHandler)
		<-release
		io.WriteString(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(ctx, l, h) }()

	body := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			body <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body <- string(b)
	}()
	<-inHandler
	cancel()
	// Shutdown has begun once the listener refuses new connections; from
	// then on a ServeHTTP that did not wait would already have returned,
	// however slow the machine.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts connections 5 s after the context ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-served:
		t.Fatalf("ServeHTTP returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if got := <-body; got != "done" {
		t.Fatalf("request in flight got %q, want done", got)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeHTTP after its context ended: %v", err)
	}
	l2, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("address still bound after ServeHTTP returned: %v", err)
	}
	l2.Close()
}

// TestServeHTTPReportsAFailedListener: serving that stops on its own is an error.
func TestServeHTTPReportsAFailedListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := ServeHTTP(context.Background(), l, http.NotFoundHandler()); err == nil {
		t.Fatal("ServeHTTP on a closed listener returned nil")
	}
}
