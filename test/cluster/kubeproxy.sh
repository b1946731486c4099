#!/usr/bin/env bash
# kubeproxy.sh start|stop: kube-proxy v1.37.2 (the kube binary's, build.sh)
# in nftables mode on every node of the running test cluster, as a host
# daemon inside each node's network namespace, the way cluster.sh runs the
# kubelets. It is the reference conformance.sh compares crossproxy with.
#
# start  writes each node's KubeProxyConfiguration, starts kube-proxy and
#        waits until its /healthz answers (rules synced); logs in
#        $D/logs/kube-proxy-N.log (N the node's letter). Its clusterCIDR
#        is the cluster's (both families on a dual-stack cluster).
# stop   stops them all, then deletes their nftables tables (ip and ip6
#        kube-proxy) in each node's namespace and checks none is left; safe
#        to run any time. Run it before cluster.sh down: down does not know
#        these daemons.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
k8s_bin="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
D="${XPC_DIR:-/var/lib/xpc-cluster}"
# The running cluster's nodes and pod CIDR(s), as cluster.sh up recorded them.
read -r -a nodes 2>/dev/null <"$D/nodes" || nodes=()
cluster_cidr=$(cat "$D/cluster-cidr" 2>/dev/null || echo 10.202.0.0/16)

log() { echo "kubeproxy: $*" >&2; }

alive() { # PID: exists and is not a zombie (pid 1 here reaps late)
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
}

config() { # NODE: the node's KubeProxyConfiguration
	local n=$1
	cat <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: xpc-$n
clusterCIDR: $cluster_cidr
clientConnection:
  kubeconfig: $D/pki/admin.kubeconfig
healthzBindAddress: 0.0.0.0:10256
metricsBindAddress: 127.0.0.1:10249
# The conntrack table and its timeouts are the host's (shared by every
# network namespace here and not writable from one): leave them as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
# Root here lacks CAP_SYS_RESOURCE, so kube-proxy cannot lower its OOM score.
oomScoreAdj: 0
YAML
}

healthy() { # NODE
	nsenter --net="/run/netns/xpc-$1" curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:10256/healthz"
}

start() {
	local n pid t0=$SECONDS
	[ -e /run/netns/xpc-cp ] && [ ${#nodes[@]} -gt 0 ] || { log "no cluster running (cluster.sh up first)"; return 1; }
	[ -x "$k8s_bin/kube-proxy" ] || { log "no $k8s_bin/kube-proxy (build.sh)"; return 1; }
	mkdir -p "$D/kube-proxy" "$D/logs" "$D/pids"
	for n in "${nodes[@]}"; do
		if [ -f "$D/pids/kube-proxy-$n" ] && alive "$(cat "$D/pids/kube-proxy-$n")"; then
			log "kube-proxy already runs on xpc-$n"
			return 1
		fi
		config "$n" >"$D/kube-proxy/xpc-$n.yaml"
		setsid nsenter --net="/run/netns/xpc-$n" "$k8s_bin/kube-proxy" \
			--config="$D/kube-proxy/xpc-$n.yaml" --v=2 \
			>"$D/logs/kube-proxy-$n.log" 2>&1 </dev/null &
		echo $! >"$D/pids/kube-proxy-$n"
	done
	for n in "${nodes[@]}"; do
		until healthy "$n"; do
			pid=$(cat "$D/pids/kube-proxy-$n")
			if ! alive "$pid"; then
				log "kube-proxy on xpc-$n exited; its log:"
				tail -20 "$D/logs/kube-proxy-$n.log" >&2
				stop
				return 1
			fi
			if ((SECONDS - t0 > 120)); then
				log "kube-proxy on xpc-$n not healthy after 120s"
				stop
				return 1
			fi
			sleep 0.5
		done
	done
	log "kube-proxy (nftables) healthy on ${nodes[*]/#/xpc-} in $((SECONDS - t0))s"
}

stop() {
	local n pid fam left=""
	for n in "${nodes[@]}"; do
		pid=$(cat "$D/pids/kube-proxy-$n" 2>/dev/null) || continue
		kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
		rm -f "$D/pids/kube-proxy-$n"
	done
	for n in "${nodes[@]}"; do
		[ -e "/run/netns/xpc-$n" ] || continue
		for fam in ip ip6; do
			nsenter --net="/run/netns/xpc-$n" nft delete table "$fam" kube-proxy 2>/dev/null || true
		done
		if nsenter --net="/run/netns/xpc-$n" nft list tables 2>/dev/null | grep -qw kube-proxy; then
			left="$left xpc-$n"
		fi
	done
	rm -rf "$D/kube-proxy"
	if [ -n "$left" ]; then
		log "kube-proxy tables left on$left"
		return 1
	fi
	log "stopped; no kube-proxy tables left"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
