//go:build windows

// This file is not part of any package of this repository: build.sh adds it
// to k8s.io/kubernetes/pkg/proxy/winkernel with `go test -overlay`, so the
// oracle can reach winkernel's internal constructor (the one kube-proxy's own
// tests use) without copying any kube-proxy code.

package winkernel

import (
	"net"
	"time"

	v1 "k8s.io/api/core/v1"

	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	"k8s.io/kubernetes/pkg/proxy/healthcheck"
	"k8s.io/kubernetes/pkg/proxy/runner"
)

// NewOracleProxier builds a proxier over hcnImpl (winkernel's HCN mock) as
// newProxierInternal does for kube-proxy's tests: no health servers, no wait
// for the overlay network, the given host MAC for the source-VIP endpoint and
// healthz port (kube-proxy takes it from healthzBindAddress; the
// health-check VIP of a Service without a healthCheckNodePort uses it).
// Its runner is never started: event handlers only queue a sync (as they do
// in kube-proxy), and the oracle runs each sync itself with OracleSync.
func NewOracleProxier(ipFamily v1.IPFamily, nodeName string, nodeIP net.IP, hcnImpl HcnService, hostMac string, healthzPort int, config kubeproxyconfig.KubeProxyWinkernelConfiguration) (*Proxier, error) {
	p, err := newProxierInternal(ipFamily, nodeName, nodeIP, healthcheck.NewFakeServiceHealthServer(), nil, healthzPort, hcnImpl, oracleMac(hostMac), config, false)
	if err != nil {
		return nil, err
	}
	p.syncRunner = runner.NewBoundedFrequencyRunner("winoracle", p.syncProxyRules, time.Hour, time.Hour, time.Hour)
	return p, nil
}

// OracleSync runs one sync now (kube-proxy's runner would run it later).
func (proxier *Proxier) OracleSync() error { return proxier.syncProxyRules() }

type oracleMac string

func (m oracleMac) GetHostMac(net.IP) string { return string(m) }
