//go:build cluster

// The chart's takeover from kube-proxy on the real cluster: kube-proxy
// v1.37.2 runs as kubeadm deploys it (DaemonSet and ConfigMap kube-proxy in
// kube-system, nftables mode), clients probe Services the whole time, and
// `helm install --set takeover.enabled=true` must end with crossproxy
// serving, kube-proxy's DaemonSet, ConfigMap and nftables tables gone, and no
// probe lost. Runs after TestHelm (whose release it removes first).
package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const kubeProxyObjects = `
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-proxy, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kubeadm:node-proxier}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-proxier}
subjects: [{kind: ServiceAccount, name: kube-proxy, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kube-proxy, namespace: kube-system, labels: {app: kube-proxy}}
data:
  config.conf: |
    apiVersion: kubeproxy.config.k8s.io/v1alpha1
    kind: KubeProxyConfiguration
    mode: nftables
    clusterCIDR: 10.202.0.0/16
    clientConnection:
      kubeconfig: /var/lib/kube-proxy/kubeconfig.conf
    # The host's conntrack table is shared and not writable from here, and
    # root here cannot lower its OOM score (cluster README, the traps).
    conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s, udpTimeout: 0s, udpStreamTimeout: 0s}
    oomScoreAdj: 0
  kubeconfig.conf: |
    apiVersion: v1
    kind: Config
    clusters:
    - cluster:
        certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
        server: https://10.201.0.1:6443
      name: default
    contexts:
    - context: {cluster: default, namespace: default, user: default}
      name: default
    current-context: default
    users:
    - name: default
      user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-proxy, namespace: kube-system, labels: {k8s-app: kube-proxy}}
spec:
  selector: {matchLabels: {k8s-app: kube-proxy}}
  template:
    metadata: {labels: {k8s-app: kube-proxy}}
    spec:
      serviceAccountName: kube-proxy
      priorityClassName: system-node-critical
      hostNetwork: true
      nodeSelector: {kubernetes.io/os: linux}
      tolerations: [{operator: Exists}]
      containers:
      - name: kube-proxy
        image: localhost/xpc/kubetools:1
        imagePullPolicy: Never
        command: [/usr/local/bin/kube-proxy, --config=/var/lib/kube-proxy/config.conf, --hostname-override=$(NODE_NAME)]
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
        securityContext: {privileged: true}
        volumeMounts:
        - {name: kube-proxy, mountPath: /var/lib/kube-proxy}
        - {name: xtables-lock, mountPath: /run/xtables.lock}
        - {name: lib-modules, mountPath: /lib/modules, readOnly: true}
      volumes:
      - {name: kube-proxy, configMap: {name: kube-proxy}}
      - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
      - {name: lib-modules, hostPath: {path: /lib/modules}}
`

// tables lists the nftables tables in a node's network namespace.
func tables(t *testing.T, node string) string {
	t.Helper()
	out, err := sh(context.Background(), "nsenter", "--net=/run/netns/"+node, "nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTakeover(t *testing.T) {
	c := newCluster(t)
	chart, err := filepath.Abs(env(t, "XP_CHART"))
	if err != nil {
		t.Fatal(err)
	}
	repo, tag := imageParts(env(t, "XP_IMAGE_REF"))
	for _, a := range []string{"XP_IMAGE_ARCHIVE", "XP_KUBETOOLS_ARCHIVE"} {
		if _, err := sh(context.Background(), "bash", c.script, "load", env(t, a)); err != nil {
			t.Fatal(err)
		}
	}
	// Start from kube-proxy alone: no crossproxy objects, pods or rules.
	c.resetCrossproxy()
	c.kubectlIn(kubeProxyObjects, "apply", "-f", "-")
	c.kubectl("-n", "kube-system", "rollout", "status", "daemonset/kube-proxy", "--timeout=3m")
	for _, n := range []string{"xpc-a", "xpc-b"} {
		c.eventually("kube-proxy's table on "+n, 60*time.Second, func() error {
			if tb := tables(t, n); !strings.Contains(tb, "kube-proxy") {
				return fmt.Errorf("no kube-proxy table:\n%s", tb)
			}
			return nil
		})
	}

	clusterIP, nodePort := c.echoService() // through kube-proxy

	// Probes through the whole takeover, the refused one included.
	tr := c.startTraffic("takeover", clusterIP, "10.201.0.12", nodePort)

	// First a release whose crossproxy can never be Ready (an image no node
	// has): the takeover Job must give up and leave kube-proxy as it is.
	start := time.Now()
	if out, err := c.helmErr("install", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository="+repo, "--set", "image.tag=no-such-tag",
		"--set", "apiServer.host=10.201.0.1", "--set", "apiServer.port=6443",
		"--set", "ports.healthz=10356", "--set", "ports.metrics=10349",
		"--set", "takeover.enabled=true", "--set", "takeover.image=localhost/xpc/kubetools:1",
		"--set", "takeover.imagePullPolicy=Never", "--set", "takeover.timeoutSeconds=30",
		"--timeout", "6m"); err == nil {
		t.Fatalf("helm install with crossproxy never Ready succeeded:\n%s", out)
	} else {
		t.Logf("FIGURE takeover refused (crossproxy never Ready): helm install failed after %v: %v",
			time.Since(start).Round(100*time.Millisecond), strings.TrimSpace(out))
	}
	for _, o := range []string{"daemonset/kube-proxy", "configmap/kube-proxy"} {
		c.kubectl("-n", "kube-system", "get", o) // fails the test when gone
	}
	if pods := c.podsOn("kube-system", "k8s-app=kube-proxy"); len(pods["xpc-a"]) != 1 || len(pods["xpc-b"]) != 1 {
		t.Fatalf("kube-proxy pods after the refused takeover: %v", pods)
	}
	for _, n := range []string{"xpc-a", "xpc-b"} {
		if tb := tables(t, n); !strings.Contains(tb, "kube-proxy") {
			t.Fatalf("%s lost kube-proxy's table in the refused takeover:\n%s", n, tb)
		}
	}
	c.helm("uninstall", "crossproxy", "--namespace", "kube-system", "--wait", "--timeout", "3m")

	start = time.Now()
	out := c.helm("install", "crossproxy", chart, "--namespace", "kube-system",
		"--set", "image.repository="+repo, "--set", "image.tag="+tag,
		"--set", "apiServer.host=10.201.0.1", "--set", "apiServer.port=6443",
		"--set", "linux.config.clusterCIDR=10.202.0.0/16",
		"--set", "ports.healthz=10356", "--set", "ports.metrics=10349",
		"--set", "takeover.enabled=true", "--set", "takeover.image=localhost/xpc/kubetools:1",
		"--set", "takeover.imagePullPolicy=Never", "--set", "takeover.timeoutSeconds=300",
		"--wait", "--timeout", "8m")
	t.Logf("FIGURE helm install with takeover (crossproxy Ready, kube-proxy removed and cleaned): %v", time.Since(start).Round(100*time.Millisecond))
	t.Logf("helm install:\n%s", out)
	if log, err := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "logs", "job/crossproxy-takeover"); err == nil {
		t.Logf("takeover Job log:\n%s", log)
	}
	tr.stop()

	// kube-proxy's objects and rules are gone.
	if out, err := sh(context.Background(), "bash", c.script, "kubectl", "-n", "kube-system", "get", "daemonset/kube-proxy", "configmap/kube-proxy", "--ignore-not-found", "-o", "name"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("kube-proxy's objects after the takeover: %q %v", out, err)
	}
	if pods := c.podsOn("kube-system", "k8s-app=kube-proxy"); len(pods) != 0 {
		t.Errorf("kube-proxy pods left: %v", pods)
	}
	for _, n := range []string{"xpc-a", "xpc-b"} {
		tb := tables(t, n)
		if strings.Contains(tb, "kube-proxy") || !strings.Contains(tb, "crossproxy") {
			t.Errorf("%s tables after the takeover (want crossproxy's, no kube-proxy's):\n%s", n, tb)
		}
	}
	// crossproxy itself no longer sees kube-proxy on either node
	// (crossproxy_other_proxy_detected, checked each syncPeriod).
	for _, ip := range []string{"10.201.0.11", "10.201.0.12"} {
		c.eventually("crossproxy_other_proxy_detected 0 on "+ip, 90*time.Second, func() error {
			m, err := c.get("xpc-cp", "http://"+ip+":10349/metrics")
			if err != nil {
				return err
			}
			// Seen beside crossproxy before the takeover, so the series is
			// there; 0 once kube-proxy's rules are gone.
			for _, l := range strings.Split(m, "\n") {
				if strings.HasPrefix(l, `crossproxy_other_proxy_detected{proxy="kube-proxy"}`) {
					if strings.HasSuffix(l, " 0") {
						return nil
					}
					return fmt.Errorf("%s", l)
				}
			}
			return fmt.Errorf("no crossproxy_other_proxy_detected{proxy=\"kube-proxy\"} in %d bytes of metrics", len(m))
		})
	}

	// crossproxy alone serves the Service afterwards, on both nodes.
	for _, ip := range []string{"10.201.0.11", "10.201.0.12"} {
		if _, err := c.get("xpc-cp", "http://"+ip+":"+nodePort+"/"); err != nil {
			t.Errorf("after the takeover, NodePort on %s: %v", ip, err)
		}
	}
}
