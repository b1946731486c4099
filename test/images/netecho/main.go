// Command netecho is the test cluster's workload image: `serve` answers HTTP
// with the pod's name (so a test sees which backend a Service picked) and the
// client address it saw (so a test sees masquerading); `client` opens a new
// connection to a URL at a fixed rate and prints how many succeeded and
// failed, so a rolling upgrade of the proxy can be measured from a real pod.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netecho serve|client|get [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "client":
		err = client(ctx, os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "netecho:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	addr := fs.String("listen", ":8080", "HTTP listen address")
	_ = fs.Parse(args)
	name, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		fmt.Fprintf(w, "%s %s\n", name, host)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Printf("netecho: %s serving on %s\n", name, *addr)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		return fmt.Errorf("serve %s: %w", *addr, err)
	}
	return nil
}

// fetch does one request on a new connection and returns the body.
func fetch(url string, timeout time.Duration) (string, error) {
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ExitOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "request timeout")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("get: want one URL")
	}
	body, err := fetch(fs.Arg(0), *timeout)
	if err != nil {
		return err
	}
	fmt.Println(body)
	return nil
}

// client prints "netecho-client ok=N failed=M" once a second and at exit, and
// every failure with its time and error, so the counts survive in the
// container log.
func client(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("client", flag.ExitOnError)
	interval := fs.Duration("interval", 50*time.Millisecond, "time between connections")
	timeout := fs.Duration("timeout", 2*time.Second, "per-request timeout")
	_ = fs.Parse(args)
	if fs.NArg() != 1 {
		return fmt.Errorf("client: want one URL")
	}
	url := fs.Arg(0)
	var ok, failed int
	report := time.NewTicker(time.Second)
	defer report.Stop()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Printf("netecho-client ok=%d failed=%d final\n", ok, failed)
			return nil
		case <-report.C:
			fmt.Printf("netecho-client ok=%d failed=%d\n", ok, failed)
		case <-tick.C:
			if _, err := fetch(url, *timeout); err != nil {
				failed++
				fmt.Printf("netecho-client failure %s: %v\n", time.Now().UTC().Format(time.RFC3339Nano), err)
			} else {
				ok++
			}
		}
	}
}
