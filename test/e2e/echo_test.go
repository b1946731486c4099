//go:build e2e && linux

package e2e

import (
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
)

// echoEnv, when set, makes the test binary an echo server named by its value;
// echoPortsEnv lists the ports it answers on (TCP and UDP, IPv4 and IPv6).
const (
	echoEnv      = "E2E_ECHO_NAME"
	echoPortsEnv = "E2E_ECHO_PORTS"
)

// runEchoServer answers every TCP connection and UDP datagram with
// "<name> <source address as seen>", so tests see which endpoint answered and
// whether the source was masqueraded. On every port but the first the name is
// "<name>@<port>", so tests see which target port a connection reached.
func runEchoServer() {
	name := os.Getenv(echoEnv)
	var wg sync.WaitGroup
	for i, p := range strings.Split(os.Getenv(echoPortsEnv), ",") {
		name := name
		if i > 0 {
			name += "@" + p
		}
		tl, err := net.Listen("tcp", ":"+p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		ul, err := net.ListenPacket("udp", ":"+p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				c, err := tl.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
				}()
			}
		}()
		go func() {
			defer wg.Done()
			buf := make([]byte, 1500)
			for {
				_, from, err := ul.ReadFrom(buf)
				if err != nil {
					return
				}
				_, _ = ul.WriteTo([]byte(fmt.Sprintf("%s %s\n", name, from)), from)
			}
		}()
	}
	fmt.Println("ready")
	wg.Wait()
}
