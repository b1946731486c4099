//go:build integration && linux

package integration

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAPIServerOutage: with the apiserver stopped the rules stay in force
// and crossproxy keeps running; after it is back, changes made then arrive.
func TestAPIServerOutage(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	svc := e.service("web")
	slice := e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(svc), backendAddrs[0])

	start := time.Now()
	if err := e.api.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver stopped in %v", time.Since(start))
	// Long enough for watches to break and client-go to start retrying.
	for i := range 15 {
		if b, err := e.lab.backendOf(addr(svc)); err != nil || b != backendAddrs[0] {
			t.Fatalf("during outage, connection %d: backend %q err %v", i, b, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case <-e.proxy.done:
		t.Fatalf("crossproxy exited during the outage: %v", e.proxy.err)
	default:
	}
	waitHTTP(t, "http://"+e.health+"/livez", 200)

	start = time.Now()
	if err := e.api.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver started in %v", time.Since(start))
	start = time.Now()
	defer func() { t.Logf("change after restart applied in %v", time.Since(start)) }()
	slice.Endpoints = e.endpointSlice("web", "web-1", backendAddrs[1]).Endpoints
	e.updateSlice(slice)
	e.lab.waitBackends(t, addr(svc), backendAddrs[1])
	web2 := e.service("web2")
	e.createSlice(e.endpointSlice("web2", "web2-1", backendAddrs[2]))
	e.lab.waitBackends(t, addr(web2), backendAddrs[2])
}

// TestProxyRestartKeepsTraffic: stopping crossproxy leaves the rules in
// force, and a new crossproxy takes over without flushing them: an
// established connection keeps working and no new connection fails.
func TestProxyRestartKeepsTraffic(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	svc := e.service("web")
	e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0], backendAddrs[1]))
	e.lab.waitBackends(t, addr(svc), backendAddrs[0], backendAddrs[1])

	established, err := e.lab.dial(addr(svc), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer established.Close()

	var attempts, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			attempts.Add(1)
			if _, err := e.lab.backendOf(addr(svc)); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	e.proxy.stop()
	if err := established.ping("while stopped"); err != nil {
		t.Fatalf("established connection with crossproxy stopped: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	before := e.lab.nft(t)
	e.startProxy()
	waitHTTP(t, "http://"+e.health+"/healthz", 200)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if err := established.ping("after restart"); err != nil {
		t.Fatalf("established connection after restart: %v", err)
	}
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d of %d new connections failed across the restart (first: %v)", n, attempts.Load(), firstErr.Load())
	}
	if attempts.Load() < 20 {
		t.Fatalf("only %d connections tried across the restart", attempts.Load())
	}
	t.Logf("%d connections across the restart, none failed", attempts.Load())
	if after := e.lab.nft(t); after != before {
		// Same objects, same rules: the restart changed nothing.
		t.Logf("ruleset changed across the restart (same objects):\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestProxyStartsWhileAPIServerDown: a proxy that starts while the API server
// is unreachable leaves the rules of its predecessor in force (no flush
// before the first complete listing) and syncs once the API is back.
func TestProxyStartsWhileAPIServerDown(t *testing.T) {
	e := newEnv(t)
	e.startProxy()
	svc := e.service("web")
	slice := e.createSlice(e.endpointSlice("web", "web-1", backendAddrs[0]))
	e.lab.waitBackends(t, addr(svc), backendAddrs[0])

	e.proxy.stop()
	if err := e.api.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	e.startProxy()
	for i := range 20 {
		if b, err := e.lab.backendOf(addr(svc)); err != nil || b != backendAddrs[0] {
			t.Fatalf("connection %d with the new proxy waiting for the API: backend %q err %v", i, b, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	select {
	case <-e.proxy.done:
		t.Fatalf("crossproxy exited while the API server was down: %v", e.proxy.err)
	default:
	}
	if err := e.api.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	slice.Endpoints = e.endpointSlice("web", "web-1", backendAddrs[1]).Endpoints
	e.updateSlice(slice)
	e.lab.waitBackends(t, addr(svc), backendAddrs[1])
	waitHTTP(t, "http://"+e.health+"/healthz", 200)
}
