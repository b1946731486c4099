#!/usr/bin/env bash
# conformance.sh VERSION IMAGE [full|short]: Kubernetes' own e2e network
# specs (e2enet.test, build-e2e.sh) against crossproxy and against
# kube-proxy v1.37.2 (nftables) on the three-node, three-zone test cluster,
# single-stack and dual-stack, each run on a fresh cluster, and the
# comparison table in test/results/conformance.md.
#   full   (make conformance) both proxies on both clusters, the focus of
#          conformance.focus: crossproxy-single, kube-proxy-single,
#          crossproxy-dual, kube-proxy-dual (CONFORMANCE_STACKS="single"
#          or "dual" and CONFORMANCE_PROXIES narrow it)
#   short  (make test-conformance-short) crossproxy only, on the dual-stack
#          cluster, its `short` specs; fails if any of them fails
# crossproxy is the shipped DaemonSet (dist/crossproxy-VERSION-linux.yaml
# and its image archive, from make image manifests), deployed as
# daemonset_test.go deploys it; kube-proxy is kubeproxy.sh's host daemon.
# The specs resolve Service names: clusterdns answers them (cluster_dns).
# Each cluster's up..down holds /tmp/xpc-cluster.lock (one cluster per
# machine). Results, logs and JUnit: bin/conformance/PROXY-STACK/.
# CONFORMANCE_FOCUS=FILE and CONFORMANCE_RESULT=FILE run another selection
# into another table.
set -euo pipefail
version=${1:?usage: conformance.sh VERSION IMAGE [full|short]} image=${2:?} mode=${3:-full}
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
k8s_bin="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
D="${XPC_DIR:-/var/lib/xpc-cluster}"
out="$root/bin/conformance"
lock=/tmp/xpc-cluster.lock
manifest="$root/dist/crossproxy-$version-linux.yaml"
# Another selection (a focus file like conformance.focus) and its table.
focus_file=$(realpath "${CONFORMANCE_FOCUS:-$here/conformance.focus}")
result=$(realpath -m "${CONFORMANCE_RESULT:-$root/test/results/conformance.md}")
archive="$root/dist/crossproxy-$version-image.tar"

log() { echo "conformance: $*" >&2; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# step PROXY NAME CMD...: runs CMD, appends "NAME<TAB>seconds<TAB>load
# before<TAB>load after" to the proxy's steps.tsv.
step() {
	local proxy=$1 name=$2 t0 l0 rc=0
	shift 2
	t0=$(date +%s.%N) l0=$(load1)
	log "$proxy: $name"
	"$@" || rc=$?
	printf '%s\t%.1f\t%s\t%s\n' "$name" "$(echo "$(date +%s.%N) - $t0" | bc)" "$l0" "$(load1)" >>"$out/$proxy/steps.tsv"
	return $rc
}

# ginkgo_args MODE STACK PREFIX: the focus and skip flags from
# conformance.focus for a cluster of STACK (single or dual) (PREFIX
# --ginkgo. for the test binary, -- for Ginkgo's CLI).
ginkgo_args() {
	local kind re
	while read -r kind re; do
		case "$kind" in
		focus) [ "$1" != full ] || printf -- '%sfocus=%s\n' "$3" "$re" ;;
		short) [ "$1" != short ] || printf -- '%sfocus=%s\n' "$3" "$re" ;;
		skip) printf -- '%sskip=%s\n' "$3" "$re" ;;
		skip-single) [ "$2" != single ] || printf -- '%sskip=%s\n' "$3" "$re" ;;
		esac
	done < <(grep -v '^\s*\(#\|$\)' "$focus_file")
}

kubectl_() { bash "$here/cluster.sh" kubectl "$@"; }

alive() { # PID: exists and is not a zombie (pid 1 here reaps late)
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
}

dead() { ! alive "$1"; }

# wait_until SECONDS WHAT CMD...
wait_until() {
	local end=$((SECONDS + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS < end)) || { log "timed out waiting for $what"; return 1; }
		sleep 1
	done
}

# The running cluster's node letters (cluster.sh up records them).
cluster_nodes() { cat "$D/nodes"; }

node_ready() {
	[ "$(kubectl_ get node "xpc-$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# cluster_dns: the specs reach Services by name, so the cluster needs DNS:
# clusterdns in xpc-cp on 10.201.0.1:53 (reached from pods over the node's
# default route, not through the proxy under test), and the kubelets'
# clusterDNS pointing at it (cluster.sh sets it; a kubelet configuration
# without it, from an older cluster.sh, gets it and a restart with the
# kubelet's own command line, whose pid file down then stops).
cluster_dns() {
	local n pid args
	setsid nsenter --net=/run/netns/xpc-cp "$k8s_bin/clusterdns" --kubeconfig "$D/pki/admin.kubeconfig" \
		--listen 10.201.0.1:53 >"$D/logs/clusterdns.log" 2>&1 </dev/null &
	echo $! >"$D/pids/clusterdns"
	local nodes
	read -r -a nodes < <(cluster_nodes)
	wait_until 60 "clusterdns to answer" nsenter --net="/run/netns/xpc-${nodes[0]}" \
		nslookup -timeout=1 kubernetes.default.svc.cluster.local 10.201.0.1
	for n in "${nodes[@]}"; do
		grep -q '^clusterDNS:' "$D/node-$n/kubelet.yaml" && continue
		printf 'clusterDNS: [10.201.0.1]\nclusterDomain: cluster.local\n' >>"$D/node-$n/kubelet.yaml"
		pid=$(cat "$D/pids/kubelet-$n")
		mapfile -d '' -t args <"/proc/$pid/cmdline"
		kill -TERM "$pid"
		wait_until 30 "kubelet-$n to stop" dead "$pid"
		setsid nsenter --net="/run/netns/xpc-$n" "${args[@]}" >>"$D/logs/kubelet-$n.log" 2>&1 </dev/null &
		echo $! >"$D/pids/kubelet-$n"
		log "kubelet-$n restarted with clusterDNS 10.201.0.1"
	done
	for n in "${nodes[@]}"; do wait_until 120 "node xpc-$n Ready" node_ready "$n"; done
}

stop_dns() {
	local pid
	pid=$(cat "$D/pids/clusterdns" 2>/dev/null) || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 25); do alive "$pid" || break; sleep 0.2; done
	kill -KILL "$pid" 2>/dev/null || true
	rm -f "$D/pids/clusterdns"
}

deploy_crossproxy() {
	bash "$here/cluster.sh" load "$archive"
	# As daemonset_test.go's deployCrossproxy: RBAC and ConfigMap first, the
	# API server's address in the ConfigMap, then the whole shipped file.
	kubectl_ apply -f "$manifest" -l 'app.kubernetes.io/component!=linux' >/dev/null
	kubectl_ -n kube-system patch configmap crossproxy-linux --type merge \
		-p '{"data":{"apiserver-host":"10.201.0.1","apiserver-port":"6443"}}' >/dev/null
	kubectl_ apply -f "$manifest" >/dev/null
	kubectl_ -n kube-system rollout status daemonset/crossproxy-linux --timeout=4m
}

# e2e RUN MODE STACK: the specs, inside xpc-cp (where the API server is,
# 10.201.0.1:6443, and every node is routed), kubectl for their exec calls.
# CONFORMANCE_PROCS (default 3) specs at a time, as parallel e2enet.test
# processes under Ginkgo's CLI; 1 runs the binary alone.
e2e() {
	local res="$out/$1" procs=${CONFORMANCE_PROCS:-3} rc=0
	# --num-nodes: the skeleton provider knows no node count (-1), and the
	# Granular Checks skip below 2 ("Requires at least 2 nodes (not -1)").
	local nodes
	read -r -a nodes < <(cluster_nodes)
	local suite=(--provider=skeleton --kubeconfig="$D/pki/admin.kubeconfig" --num-nodes="${#nodes[@]}"
		--kubectl-path="$k8s_bin/kubectl" --report-dir="$res" --e2e-output-dir="$res")
	echo "procs $procs" >"$res/e2e.cmd"
	if [ "$procs" -gt 1 ]; then
		mapfile -t args < <(ginkgo_args "$2" "$3" --)
		printf '%s\n' "${args[@]}" >>"$res/e2e.cmd"
		nsenter --net=/run/netns/xpc-cp "$k8s_bin/ginkgo" run --procs="$procs" --timeout=3h \
			--no-color -v "${args[@]}" "$k8s_bin/e2enet.test" -- "${suite[@]}" >"$res/e2e.log" 2>&1 || rc=$?
	else
		mapfile -t args < <(ginkgo_args "$2" "$3" --ginkgo.)
		printf '%s\n' "${args[@]}" >>"$res/e2e.cmd"
		nsenter --net=/run/netns/xpc-cp "$k8s_bin/e2enet.test" "${suite[@]}" \
			--ginkgo.timeout=3h --ginkgo.no-color --ginkgo.v "${args[@]}" >"$res/e2e.log" 2>&1 || rc=$?
	fi
	[ $rc = 0 ] || log "$1: the suite exited $rc (failed specs are in the report)"
	[ -s "$res/junit_01.xml" ] || { log "$1: no JUnit report; see $res/e2e.log"; return 1; }
}

# one PROXY STACK MODE: a fresh cluster of STACK (single or dual), the
# images, the proxy, the specs, down. Run under the cluster lock.
one() {
	local proxy=$1 stack=$2 mode=$3 rc=0
	local run="$proxy-$stack"
	local res="$out/$run"
	rm -rf "$res"
	mkdir -p "$res"
	echo "$stack" >"$res/stack"
	bash "$here/cluster.sh" down >/dev/null 2>&1 || true
	trap 'bash "$here/kubeproxy.sh" stop >/dev/null 2>&1 || true; stop_dns; bash "$here/cluster.sh" down >/dev/null 2>&1' EXIT
	trap 'exit 143' TERM INT
	step "$run" "cluster up" env XPC_STACK="$stack" bash "$here/cluster.sh" up
	step "$run" "cluster DNS" cluster_dns
	step "$run" "load e2e images" bash "$here/cluster.sh" load "$out/images/agnhost.tar" "$out/images/busybox.tar" \
		"$out/images/regression.tar" "$out/images/pause.tar"
	case "$proxy" in
	crossproxy) step "$run" "deploy crossproxy (DaemonSet)" deploy_crossproxy ;;
	kube-proxy) step "$run" "start kube-proxy (nftables)" bash "$here/kubeproxy.sh" start ;;
	esac
	step "$run" "e2e specs" e2e "$run" "$mode" "$stack" || rc=$?
	# What ran: the proxy's logs, for failures the table cannot explain.
	cp "$D"/logs/kube-proxy-*.log "$D/logs/clusterdns.log" "$res/" 2>/dev/null || true
	kubectl_ -n kube-system logs -l app.kubernetes.io/name=crossproxy --tail=-1 --prefix >"$res/crossproxy-pods.log" 2>&1 || true
	[ "$proxy" != kube-proxy ] || step "$run" "stop kube-proxy" bash "$here/kubeproxy.sh" stop || rc=$?
	stop_dns
	step "$run" "cluster down" bash "$here/cluster.sh" down
	trap - EXIT
	return $rc
}

if [ "${CONFORMANCE_ONE:-}" ]; then
	one "$CONFORMANCE_ONE" "$CONFORMANCE_STACK" "$mode"
	exit
fi

case "$mode" in
full)
	read -r -a stacks <<<"${CONFORMANCE_STACKS:-single dual}"
	read -r -a proxies <<<"${CONFORMANCE_PROXIES:-crossproxy kube-proxy}"
	;;
short) stacks=(dual) proxies=(crossproxy) ;;
*) echo "usage: conformance.sh VERSION IMAGE [full|short]" >&2; exit 2 ;;
esac
[ -f "$manifest" ] && [ -f "$archive" ] || { log "no $manifest or $archive: make image manifests"; exit 1; }
mkdir -p "$out"
start=$(date +%s) l0=$(load1)
rm -rf "$out/images"
bash "$here/images-e2e.sh" "$out/images"
build_s=$(($(date +%s) - start))
# Every run, even after one failed (its table cell says so); the exit
# status says whether all of them ran.
runs=() failed=()
for s in "${stacks[@]}"; do
	for p in "${proxies[@]}"; do
		log "$p-$s: waiting for $lock"
		# -o: the lock stays with flock, not with the daemons the run starts
		# (a clusterdns left by a killed run held it before).
		if CONFORMANCE_ONE=$p CONFORMANCE_STACK=$s flock -o "$lock" bash "$0" "$version" "$image" "$mode"; then
			:
		else
			log "$p-$s: run failed"
			failed+=("$p-$s")
			[ "$mode" = full ] || exit 1
		fi
		[ ! -s "$out/$p-$s/junit_01.xml" ] || runs+=(-run "$p-$s=$out/$p-$s")
	done
done
total=$(($(date +%s) - start))
[ ${#runs[@]} -gt 0 ] || { log "no run produced a JUnit report"; exit 1; }
cd "$here"
if [ "$mode" = full ]; then
	go run ./junitmd -focus "$focus_file" -mode full "${runs[@]}" -notes conformance-notes.md \
		-meta "crossproxy $version as the shipped DaemonSet, kube-proxy v1.37.2 in nftables mode, ${CONFORMANCE_PROCS:-3} specs at a time (CONFORMANCE_PROCS); images and e2enet.test ready in ${build_s}s, whole run ${total}s; load average $l0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end${failed:+; runs that failed before their specs finished: ${failed[*]}}" \
		-out "$result"
	log "wrote $result in ${total}s"
	[ ${#failed[@]} = 0 ]
else
	go run ./junitmd -focus "$focus_file" -mode short "${runs[@]}" -check
fi
