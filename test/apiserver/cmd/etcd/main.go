// Command etcd runs a single-member embedded etcd server for the integration
// tests, so the harness needs no etcd release binary.
package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the etcd data")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on and advertise")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on and advertise")
	flag.Parse()
	if err := run(*dataDir, *clientURL, *peerURL); err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}

func run(dataDir, clientURL, peerURL string) error {
	if dataDir == "" {
		return fmt.Errorf("--data-dir is required")
	}
	cu, err := url.Parse(clientURL)
	if err != nil {
		return fmt.Errorf("parse --listen-client-url: %w", err)
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return fmt.Errorf("parse --listen-peer-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	cfg.Name = "harness"
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	// A test etcd needs no fsync durability; unsafe mode keeps it fast on
	// a shared machine.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		return fmt.Errorf("etcd not ready after 60s")
	}
	fmt.Println("etcd ready on", clientURL)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case s := <-sig:
		fmt.Println("etcd stopping on", s)
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd serve: %w", err)
	}
}
