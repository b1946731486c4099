package netnsrun

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on an OS thread switched into the namespace named name (as made
// by `ip netns add`), then switches the thread back. Sockets fn opens stay in
// that namespace. The thread is kept rather than retired because a retired
// thread kills the children it started with Pdeathsig (the suites start
// crossproxy that way); only when switching back fails is it left locked, so
// Go retires it instead of running other code in the wrong namespace. fn runs
// on another goroutine, so it must report failures by its error, not t.Fatal.
func Do(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("get current network namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open network namespace %s: %w", name, err)
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- fmt.Errorf("leave network namespace %s: %w (after: %v)", name, err, ferr)
			return // still locked: the thread is retired with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
