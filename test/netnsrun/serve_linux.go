package netnsrun

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

// ServeTCP listens on port of every address in addrs inside the namespace
// named ns, and hands each accepted connection with the address it came to
// to handle, on the listener's own goroutine (handle starts one of its own
// for a long conversation). The listeners close when the test ends, and the
// test waits for their loops.
func ServeTCP(t testing.TB, ns string, addrs []string, port int, handle func(c net.Conn, addr string)) {
	t.Helper()
	var ls []net.Listener
	err := Do(ns, func() error {
		for _, a := range addrs {
			ln, err := net.Listen("tcp", net.JoinHostPort(a, fmt.Sprint(port)))
			if err != nil {
				return err
			}
			ls = append(ls, ln)
		}
		return nil
	})
	if err != nil {
		for _, ln := range ls {
			ln.Close()
		}
		t.Fatalf("listeners in %s: %v", ns, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, ln := range ls {
			ln.Close()
		}
		wg.Wait()
	})
	for i, ln := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				handle(c, addrs[i])
			}
		}()
	}
}
