package main

import (
	"net"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/crossproxy/crossproxy/platform"
	"github.com/crossproxy/crossproxy/platform/config"
)

// addHNSRunFlags registers run's Windows-only flags that kube-proxy's
// Windows mode has under the same names, so its command lines carry over.
func addHNSRunFlags(f *pflag.FlagSet, b *platform.BackendConfig) {
	f.BoolVar(&b.ForwardHealthCheckVIP, "forward-healthcheck-vip", false,
		"Windows: forward the health-check port of each LoadBalancer ingress IP to the host (kube-proxy's flag), for cloud load balancers that probe the VIP")
	f.StringVar(&b.RootHNSEndpointName, "root-hnsendpoint-name", "",
		"Windows: the host's HNS endpoint the forwarded health checks go to (default cbr0, as kube-proxy)")
}

// mergeHNSFlags copies into cfg the Windows flags given explicitly, takes
// the health-check VIP's default port from the healthz address, and records
// where an explicit source VIP came from (the log and explain say it).
func mergeHNSFlags(changed func(string) bool, cfg *config.Config, flags platform.BackendConfig) {
	if changed("forward-healthcheck-vip") {
		cfg.Backend.ForwardHealthCheckVIP = flags.ForwardHealthCheckVIP
	}
	if changed("root-hnsendpoint-name") {
		cfg.Backend.RootHNSEndpointName = flags.RootHNSEndpointName
	}
	cfg.Backend.HealthzPort = 0
	if _, p, err := net.SplitHostPort(cfg.HealthzBindAddress); err == nil {
		if n, err := strconv.ParseUint(p, 10, 16); err == nil {
			cfg.Backend.HealthzPort = uint16(n)
		}
	}
	switch {
	case changed("source-vip"):
		cfg.Backend.SourceVIPOrigin = "flag --source-vip"
	case cfg.Backend.SourceVIP != "":
		cfg.Backend.SourceVIPOrigin = "config file"
	}
}
