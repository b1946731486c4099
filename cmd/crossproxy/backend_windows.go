//go:build windows

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/platform"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// ledgerFile is the file, in dataDir, where the HNS backend records the load
// balancers it owns.
const ledgerFile = "hns-owned.json"

// dataDir is crossproxy's directory under %ProgramData% (the ledger, the
// service's log).
func dataDir() string {
	dir := os.Getenv("ProgramData")
	if dir == "" {
		dir = `C:\ProgramData`
	}
	return filepath.Join(dir, "crossproxy")
}

// newBackend returns the HNS backend for this node. Without --network-name it
// takes the network from KUBE_NETWORK, as kube-proxy's Windows mode does, so
// existing node setups carry over.
func newBackend(cfg platform.BackendConfig, log logrus.FieldLogger) (platform.Backend, error) {
	if cfg.NetworkName == "" {
		cfg.NetworkName = os.Getenv("KUBE_NETWORK")
	}
	h, ledger := nodeHNS()
	c := hns.Config{NetworkName: cfg.NetworkName, EnableDSR: cfg.EnableDSR, Ledger: hns.FileLedger{Path: filepath.Join(dataDir(), ledger)}, Notifier: cfg.Notifier,
		ForwardHealthCheckVIP: cfg.ForwardHealthCheckVIP, RootEndpointName: cfg.RootHNSEndpointName, HealthzPort: cfg.HealthzPort,
		Repairs: cfg.Repairs, SourceVIPOrigin: cfg.SourceVIPOrigin, Concurrency: cfg.HNSConcurrency}
	// The CNI configuration names the network when no flag does, and an
	// overlay node without a source VIP reserves one through the pods' IPAM
	// (host-local), as the CNI does for pods.
	c.CNI, c.IPAM = nodeCNI(cfg, os.Getenv("CNI_PATH"), log)
	// Read again by the backend until a network is settled from it and at
	// every full sync: a HostProcess CNI is usually installed after
	// crossproxy starts. The backend logs what it takes.
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	c.CNISource = func() (*hns.CNIConfig, hns.IPAM) {
		conf, ipam := nodeCNI(cfg, os.Getenv("CNI_PATH"), quiet)
		if conf == nil {
			return nil, nil
		}
		return conf, ipam
	}
	if cfg.SourceVIP != "" {
		a, err := netip.ParseAddr(cfg.SourceVIP)
		if err != nil {
			return nil, fmt.Errorf("hns backend: flag --source-vip: %w", err)
		}
		c.SourceVIP = a
	}
	c.HostMAC = hostMAC
	b, err := hns.New(h, c, log.WithField("backend", "hns"))
	if err != nil {
		return nil, err
	}
	if cfg.Cleanup {
		return b, nil // cleanup takes the network from the flag or the ledger
	}
	// Refuse to start with a configuration kube-proxy refuses (no HNS V2 API;
	// overlay without a source VIP or remote subnet support). HNS not
	// answering yet (boot) is not a reason: the sync loop asks again.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Preflight(ctx); errors.Is(err, hns.ErrInvalid) {
		return nil, err
	} else if err != nil {
		log.WithError(err).Warn("HNS not ready yet; the sync loop retries")
	}
	return b, nil
}

// hostMAC returns the MAC of the host interface that holds addr, in the form
// kube-proxy finds and sends it for the overlay source VIP endpoint.
func hostMAC(addr netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for _, i := range ifs {
		addrs, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == addr && len(i.HardwareAddr) > 0 {
				return i.HardwareAddr.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no interface with address %s and a MAC", addr)
}
