// Command echo is the demo lab's pod and client. As a pod
// (`echo serve -name web-a1 -listen :8080`) it answers every TCP connection and
// UDP datagram with its name and the source address it saw, which is what
// shows whether a Service masqueraded the client. As a client
// (`echo get ADDR [-n N]`) it asks ADDR and prints each answer, or "timeout" /
// "refused" when nothing answers, so the demo can show drops and rejects too.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: echo serve -name NAME [-listen :8080] | echo get ADDR [-n N] [-udp] [-timeout D]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q (serve or get)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	name := fs.String("name", "", "the name to answer with")
	listen := fs.String("listen", ":8080", "address to listen on (TCP and UDP)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" {
		return errors.New("serve: -name is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen tcp %s: %w", *listen, err)
	}
	pc, err := net.ListenPacket("udp", *listen)
	if err != nil {
		return fmt.Errorf("listen udp %s: %w", *listen, err)
	}
	go func() {
		<-ctx.Done()
		lis.Close()
		pc.Close()
	}()
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(answer(*name, from)), from)
		}
	}()
	for {
		c, err := lis.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write([]byte(answer(*name, c.RemoteAddr())))
		}()
	}
}

// answer is the line a pod sends: its name and the client address it saw.
func answer(name string, from net.Addr) string {
	host := from.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return fmt.Sprintf("%s saw %s\n", name, host)
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	n := fs.Int("n", 1, "number of requests, each on a new connection")
	udp := fs.Bool("udp", false, "use UDP instead of TCP")
	timeout := fs.Duration("timeout", time.Second, "how long to wait for an answer")
	if len(args) == 0 {
		return errors.New("get: ADDR is required")
	}
	addr := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	for i := 0; i < *n; i++ {
		fmt.Println(ask(addr, *udp, *timeout))
	}
	return nil
}

// ask makes one request and describes the outcome in one line.
func ask(addr string, udp bool, timeout time.Duration) string {
	network := "tcp"
	if udp {
		network = "udp"
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return describe(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if udp {
		if _, err := c.Write([]byte("hello\n")); err != nil {
			return describe(err)
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && line == "" {
		return describe(err)
	}
	return strings.TrimSpace(line)
}

func describe(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout (no answer)"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	return "error: " + err.Error()
}
