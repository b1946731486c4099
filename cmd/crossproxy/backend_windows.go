//go:build windows

package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"

	"github.com/crossproxy/crossproxy/platform"
	hns "github.com/crossproxy/crossproxy/platform_windows"
)

// hnsOverride, when set (by `crossproxy service run --fake-hns-network`),
// replaces the real HNS with another implementation: the Wine service test
// runs the real sync loop against the in-memory fake this way.
var hnsOverride hns.HNS

// ledgerName is the ledger's file name; the fake uses its own so a test run
// never leaves entries a real run would read.
var ledgerName = "hns-owned.json"

// ledgerPath is where the HNS backend records the load balancers it owns.
func ledgerPath() string {
	dir := os.Getenv("ProgramData")
	if dir == "" {
		dir = `C:\ProgramData`
	}
	return filepath.Join(dir, "crossproxy", ledgerName)
}

// newBackend returns the HNS backend for this node. Without --network-name it
// takes the network from KUBE_NETWORK, as kube-proxy's Windows mode does, so
// existing node setups carry over.
func newBackend(cfg platform.BackendConfig, log logrus.FieldLogger) (platform.Backend, error) {
	if cfg.NetworkName == "" {
		cfg.NetworkName = os.Getenv("KUBE_NETWORK")
	}
	c := hns.Config{NetworkName: cfg.NetworkName, EnableDSR: cfg.EnableDSR, Ledger: hns.FileLedger{Path: ledgerPath()}, Notifier: cfg.Notifier}
	if cfg.SourceVIP != "" {
		a, err := netip.ParseAddr(cfg.SourceVIP)
		if err != nil {
			return nil, fmt.Errorf("hns backend: flag --source-vip: %w", err)
		}
		c.SourceVIP = a
	}
	var h hns.HNS = hns.HCN{}
	if hnsOverride != nil {
		h = hnsOverride
	}
	return hns.New(h, c, log.WithField("backend", "hns"))
}
