package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// KubeProxyBinary is the kube-proxy v1.37.2 of `make cluster-bin`
// (test/cluster/build.sh), or "" when it is not built.
func KubeProxyBinary() string {
	dir := os.Getenv("CROSSPROXY_CLUSTER_BIN_DIR")
	if dir == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache")
		}
		dir = filepath.Join(cache, "crossproxy", "cluster-bin")
	}
	path := filepath.Join(dir, "kube-proxy")
	if st, err := os.Stat(path); err != nil || st.Mode()&0o111 == 0 {
		return ""
	}
	return path
}

// KubeProxyConfig is the configuration the suites run kube-proxy v1.37.2
// with, beside crossproxy on the same node: nftables mode, the named node
// and kubeconfig, its health and metrics addresses, minSync as its
// --min-sync-period, and no conntrack sysctl changes (the lab's namespace
// is not the host's).
func KubeProxyConfig(node, kubeconfig, healthz, metrics, minSync string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: %s
clientConnection:
  kubeconfig: %s
healthzBindAddress: %s
metricsBindAddress: %s
nftables:
  minSyncPeriod: %s
  syncPeriod: 30s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
oomScoreAdj: 0
`, node, kubeconfig, healthz, metrics, minSync)
}
