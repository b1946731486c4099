#!/usr/bin/env bash
# cluster.sh up|down|load FILE...|kubectl ARGS...|status|nodes
#
# A real Kubernetes v1.37.2 cluster on this host, in network namespaces of
# its own (see README.md): three nodes in three zones by default.
#   xpc-cp  etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
#           the bridge xpcbr0 (10.201.0.1/24) that joins the nodes
#   xpc-a   node xpc-a: containerd, kubelet, CNI bridge cni0 10.202.1.0/24,
#           eth0 10.201.0.11, zone a
#   xpc-b   node xpc-b: the same with 10.202.2.0/24, 10.201.0.12, zone b
#   xpc-c   node xpc-c: the same with 10.202.3.0/24, 10.201.0.13, zone c
# XPC_NODES (default "a b c") names the nodes: letter N is the Nth node,
# zone N; XPC_NODES_PER_ZONE=2 puts two nodes in each zone instead (a and b
# in zone a, c and d in zone b, ...: what the Traffic Distribution specs
# that fall back to the same zone need). XPC_STACK=dual makes the cluster dual-stack (IPv4 primary): every
# node also has fd00:201::1I on eth0 and the pod CIDR fd00:202:I::/64, and
# Services get fd00:203::/112 beside 10.203.0.0/24.
# Daemons enter their namespace with `nsenter --net` only, so they share the
# host's mount namespace (the kubelet and containerd must see the same
# mounts). No kube-proxy: Services are whatever proxy the tests deploy.
#
# up       builds what is missing (cached), starts everything, waits until
#          every node is Ready with its pod CIDRs; tears down on failure.
#          Records the nodes, the stack and the cluster CIDR in $D for
#          the other scripts (kubeproxy.sh, conformance.sh).
# down     stops every process it started, removes its mounts, cgroups,
#          namespaces and state; safe to run any time, any number of times
#          (it finds the nodes of a cluster started with other settings)
# load     imports image archives into every node's containerd (k8s.io)
# kubectl  runs kubectl as cluster admin inside xpc-cp
# nodes    prints the running cluster's node letters
set -Eeuo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy"
# XPC_KUBERNETES=v1.34.4 runs the control plane and kubelets of that release
# (the oldest supported, test/apiserver/OLDEST), built and cached by version.
kube_version="${XPC_KUBERNETES:-}"
if [ -n "$kube_version" ]; then
	api_bin="$cache/apiserver-bin-$kube_version"
	k8s_bin="$cache/cluster-bin-$kube_version"
else
	api_bin="${CROSSPROXY_APISERVER_BIN_DIR:-$cache/apiserver-bin}"
	k8s_bin="${CROSSPROXY_CLUSTER_BIN_DIR:-$cache/cluster-bin}"
fi
D="${XPC_DIR:-/var/lib/xpc-cluster}"  # state: certs, etcd, containerd roots, logs
R="${XPC_RUN:-/run/xpc-cluster}"      # sockets and containerd state
read -r -a nodes <<<"${XPC_NODES:-a b c}"
stack=${XPC_STACK:-single}
# The pods' DNS (issue 37's reboot test): XPC_CLUSTER_DNS is the kubelets'
# clusterDNS (default 10.201.0.1, where make conformance runs clusterdns;
# a Service ClusterIP makes name lookups of ClusterFirst pods depend on the
# proxy, as CoreDNS's does), XPC_NODE_DNS the nameserver of the nodes' own
# resolv.conf, which dnsPolicy Default and host-network ClusterFirst pods
# get (default none).
cluster_dns=${XPC_CLUSTER_DNS:-}
node_dns=${XPC_NODE_DNS:-}
# A running cluster is what it was started as, whatever the variables say now.
if [ "${1:-}" != up ] && [ -f "$D/nodes" ]; then
	read -r -a nodes <"$D/nodes"
	stack=$(cat "$D/stack")
	cluster_dns=$(cat "$D/cluster-dns" 2>/dev/null || true)
	node_dns=$(cat "$D/node-dns" 2>/dev/null || true)
fi
api_ip=10.201.0.1
# The API server's DNS name (in its certificate), as kubeadm's
# controlPlaneEndpoint gives one; only a resolver that knows it finds it.
api_name=api.xpc-cluster.internal
api_ip6=fd00:201::1
svc_cidr=10.203.0.0/24
svc_cidr6=fd00:203::/112
cluster_cidr=10.202.0.0/16
cluster_cidr6=fd00:202::/48
declare -A node_ip node_ip6 pod_cidr pod_cidr6 pod_gw pod_gw6
# The addresses of node letter N, the Ith letter of the alphabet.
for n in "${nodes[@]}"; do
	case "$n" in
	[a-i]) ;;
	*) echo "cluster: node names are single letters a-i, not \"$n\"" >&2; exit 2 ;;
	esac
	i=$(($(printf '%d' "'$n") - 96))
	node_ip[$n]=10.201.0.1$i node_ip6[$n]=fd00:201::1$i
	pod_cidr[$n]=10.202.$i.0/24 pod_cidr6[$n]=fd00:202:$i::/64
	pod_gw[$n]=10.202.$i.1 pod_gw6[$n]=fd00:202:$i::1
done
case "$stack" in
single | dual) ;;
*) echo "cluster: XPC_STACK is single or dual, not \"$stack\"" >&2; exit 2 ;;
esac
dual() { [ "$stack" = dual ]; }
pause_image=localhost/xpc/pause:1
netecho_image=localhost/xpc/netecho:1

log() { echo "cluster: $*" >&2; }
kubectl_() { nsenter --net=/run/netns/xpc-cp "$k8s_bin/kubectl" --kubeconfig "$D/pki/admin.kubeconfig" "$@"; }
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

# start NAME NETNS CMD...: a daemon in its own session, its pid recorded.
start() {
	local name=$1 ns=$2
	shift 2
	mkdir -p "$D/logs" "$D/pids"
	setsid nsenter --net="/run/netns/$ns" "$@" >"$D/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$D/pids/$name"
}

# wait_for SECONDS WHAT CMD...: retries CMD until it succeeds.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= end)); then
			log "timed out after ${secs}s waiting for $what"
			return 1
		fi
		sleep 0.5
	done
}

ensure_binaries() {
	if [ -n "$kube_version" ]; then
		bash "$root/test/apiserver/build.sh" "$kube_version"
		bash "$here/build-version.sh" "$kube_version"
	else
		bash "$root/test/apiserver/build.sh"
		bash "$here/build.sh"
	fi
	bash "$here/setup.sh"
}

# pki: a CA, the serving certificate, client certificates (admin for the
# control plane and the apiserver's kubelet client, one per node for the
# Node authorizer) and the ServiceAccount signing key; EC keys, as they are
# quick to make on a loaded machine.
pki() {
	local p="$D/pki" n
	mkdir -p "$p"
	cd "$p"
	openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
	openssl req -x509 -new -key ca.key -subj /CN=xpc-ca -days 2 -out ca.crt 2>/dev/null
	cert() { # NAME SUBJECT [SAN]
		openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
		openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
		local ext="extendedKeyUsage=clientAuth,serverAuth"
		[ -z "${3:-}" ] || ext="$ext
subjectAltName=$3"
		openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
			-extfile <(echo "$ext") -out "$1.crt" 2>/dev/null
	}
	cert apiserver /CN=kube-apiserver \
		"IP:$api_ip,IP:10.203.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$api_name"
	cert admin "/O=system:masters/CN=xpc-admin"
	for n in "${nodes[@]}"; do cert "node-$n" "/O=system:nodes/CN=system:node:xpc-$n"; done
	openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
	openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
	kubeconfig() { # NAME CERT
		cat >"$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: xpc
  cluster: {server: "https://$api_ip:6443", certificate-authority: "$p/ca.crt"}
users:
- name: $2
  user: {client-certificate: "$p/$2.crt", client-key: "$p/$2.key"}
contexts:
- name: xpc
  context: {cluster: xpc, user: $2}
current-context: xpc
EOF
	}
	kubeconfig admin admin
	for n in "${nodes[@]}"; do kubeconfig "node-$n" "node-$n"; done
	cd - >/dev/null
}

# network: xpc-cp holds the bridge; each node hangs off it by a veth, with a
# route to every other node's pod CIDR (the "pod routes between the nodes"),
# per family on a dual-stack cluster. No DAD on the static IPv6 addresses:
# they are unique by construction and usable at once.
network() {
	local n m
	ip netns add xpc-cp
	ip -n xpc-cp link set lo up
	ip -n xpc-cp link add xpcbr0 type bridge
	ip -n xpc-cp addr add "$api_ip/24" dev xpcbr0
	! dual || ip -n xpc-cp addr add "$api_ip6/64" dev xpcbr0 nodad
	ip -n xpc-cp link set xpcbr0 up
	for n in "${nodes[@]}"; do
		ip netns add "xpc-$n"
		ip -n "xpc-$n" link set lo up
		ip link add "xpc-$n-br" netns xpc-cp type veth peer name eth0 netns "xpc-$n"
		ip -n xpc-cp link set "xpc-$n-br" master xpcbr0 up
		ip -n "xpc-$n" addr add "${node_ip[$n]}/24" dev eth0
		! dual || ip -n "xpc-$n" addr add "${node_ip6[$n]}/64" dev eth0 nodad
		ip -n "xpc-$n" link set eth0 up
		ip netns exec "xpc-$n" sysctl -qw net.ipv4.ip_forward=1
		! dual || ip netns exec "xpc-$n" sysctl -qw net.ipv6.conf.all.forwarding=1
		ip -n xpc-cp route add "${pod_cidr[$n]}" via "${node_ip[$n]}"
		! dual || ip -n xpc-cp route add "${pod_cidr6[$n]}" via "${node_ip6[$n]}"
		for m in "${nodes[@]}"; do
			[ "$m" != "$n" ] || continue
			ip -n "xpc-$n" route add "${pod_cidr[$m]}" via "${node_ip[$m]}"
			! dual || ip -n "xpc-$n" route add "${pod_cidr6[$m]}" via "${node_ip6[$m]}"
		done
		# Services reach the apiserver and ClusterIPs route out of eth0.
		ip -n "xpc-$n" route add default via "$api_ip"
		! dual || ip -n "xpc-$n" route add default via "$api_ip6"
	done
}

# The cluster's Service and pod CIDRs, IPv4 first (the primary family).
svc_cidrs() { if dual; then echo "$svc_cidr,$svc_cidr6"; else echo "$svc_cidr"; fi; }
cluster_cidrs() { if dual; then echo "$cluster_cidr,$cluster_cidr6"; else echo "$cluster_cidr"; fi; }
node_cidrs() { if dual; then echo "${pod_cidr[$1]},${pod_cidr6[$1]}"; else echo "${pod_cidr[$1]}"; fi; }
node_ips() { if dual; then echo "${node_ip[$1]},${node_ip6[$1]}"; else echo "${node_ip[$1]}"; fi; }

control_plane() {
	local p="$D/pki"
	start etcd xpc-cp "$api_bin/etcd" --data-dir "$D/etcd" \
		--listen-client-url http://127.0.0.1:12379 --listen-peer-url http://127.0.0.1:12380
	wait_for 60 etcd in_ns xpc-cp bash -c 'exec 3<>/dev/tcp/127.0.0.1/12379'
	start kube-apiserver xpc-cp "$api_bin/kube-apiserver" \
		--etcd-servers=http://127.0.0.1:12379 \
		--bind-address=0.0.0.0 --advertise-address=$api_ip --secure-port=6443 \
		--tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" \
		--client-ca-file="$p/ca.crt" \
		--service-account-issuer=https://kubernetes.default.svc \
		--service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
		--service-cluster-ip-range="$(svc_cidrs)" \
		--authorization-mode=Node,RBAC --allow-privileged=true \
		--kubelet-client-certificate="$p/admin.crt" --kubelet-client-key="$p/admin.key" \
		--kubelet-preferred-address-types=InternalIP,Hostname \
		--enable-priority-and-fairness=false --profiling=false \
		--cert-dir="$D/apiserver-certs" --v=1
	wait_for 300 kube-apiserver kubectl_ get --raw /readyz
	start kube-controller-manager xpc-cp "$k8s_bin/kube-controller-manager" \
		--kubeconfig="$p/admin.kubeconfig" \
		--authentication-kubeconfig="$p/admin.kubeconfig" --authorization-kubeconfig="$p/admin.kubeconfig" \
		--use-service-account-credentials=true --root-ca-file="$p/ca.crt" \
		--service-account-private-key-file="$p/sa.key" \
		--allocate-node-cidrs=false --cluster-cidr="$(cluster_cidrs)" --service-cluster-ip-range="$(svc_cidrs)" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port=10257 --v=1
	start kube-scheduler xpc-cp "$k8s_bin/kube-scheduler" \
		--kubeconfig="$p/admin.kubeconfig" \
		--authentication-kubeconfig="$p/admin.kubeconfig" --authorization-kubeconfig="$p/admin.kubeconfig" \
		--leader-elect=false --bind-address=127.0.0.1 --secure-port=10259 --v=1
}

# images: pause (containerd's sandbox image) and netecho (the test
# workload), static Go binaries packed by ociimage; cached by content.
images() {
	local out="$D/images"
	mkdir -p "$out" "$root/bin"
	(cd "$root/test/images" && CGO_ENABLED=0 go build -o "$root/bin/ociimage" ./ociimage &&
		CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/pause" ./pause &&
		CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/netecho" ./netecho)
	"$root/bin/ociimage" -ref $pause_image -archive "$out/pause.tar" -image "linux/amd64=$out/pause:/pause" >/dev/null
	"$root/bin/ociimage" -ref $netecho_image -archive "$out/netecho.tar" -image "linux/amd64=$out/netecho:/netecho" >/dev/null
}

node_containerd() {
	local n=$1
	local nd="$D/node-$n" nr="$R/node-$n"
	mkdir -p "$nd/cni" "$nr"
	cat >"$nd/containerd.toml" <<EOF
version = 2
root = "$nd/containerd"
state = "$nr/containerd"
[grpc]
  address = "$nr/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  # root here lacks CAP_SYS_RESOURCE: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF".
  restrict_oom_score_adj = true
  # The pods' network namespaces under this node's state, not /run/netns.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state under this node's, not the fixed /run/containerd/runc.
        Root = "$nr/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni"
  # Registry hosts (HOST/hosts.toml), read at each pull: TestRelease points
  # the chart's image registry at the registry it runs in xpc-cp.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$nd/certs.d"
EOF
	local ranges routes
	ranges="[{\"subnet\": \"${pod_cidr[$n]}\", \"gateway\": \"${pod_gw[$n]}\"}]"
	routes='{"dst": "0.0.0.0/0"}'
	if dual; then
		ranges="$ranges, [{\"subnet\": \"${pod_cidr6[$n]}\", \"gateway\": \"${pod_gw6[$n]}\"}]"
		routes="$routes, {\"dst\": \"::/0\"}"
	fi
	cat >"$nd/cni/10-xpc.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "xpc-$n",
  "plugins": [{
    "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "$nd/ipam",
             "ranges": [$ranges],
             "routes": [$routes]}
  }]
}
EOF
	start "containerd-$n" "xpc-$n" containerd --config "$nd/containerd.toml"
	wait_for 60 "containerd on node $n" ctr -a "$nr/containerd.sock" version
}

node_kubelet() {
	local n=$1
	local nd="$D/node-$n" nr="$R/node-$n" c
	# The kubelet wants its cgroupRoot to exist in every hierarchy; a new
	# cpuset cgroup starts with no CPUs or memory nodes, so copy the root's.
	for c in /sys/fs/cgroup/*/; do
		mkdir -p "$c/xpc-$n"
		if [ -f "$c/cpuset.cpus" ]; then
			cat "$c/cpuset.cpus" >"$c/xpc-$n/cpuset.cpus"
			cat "$c/cpuset.mems" >"$c/xpc-$n/cpuset.mems"
		fi
	done
	local resolv='""'
	if [ -n "$node_dns" ]; then
		echo "nameserver $node_dns" >"$nd/resolv.conf"
		resolv="$nd/resolv.conf"
	fi
	cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroups are v1 on this host; kubelet 1.37 refuses them unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /xpc-$n
containerRuntimeEndpoint: unix://$nr/containerd.sock
address: ${node_ip[$n]}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$D/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
failSwapOn: false
resolvConf: $resolv
# Pods resolve Service names at 10.201.0.1 in xpc-cp, where make conformance
# runs clusterdns (reached over the node's default route, not through the
# proxy under test); without it, names fail and IPs work as before.
clusterDNS: [${cluster_dns:-$api_ip}]
clusterDomain: cluster.local
podLogsDir: "$nd/pod-logs"
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 60
EOF
	start "kubelet-$n" "xpc-$n" "$k8s_bin/kubelet" --config="$nd/kubelet.yaml" \
		--kubeconfig="$D/pki/node-$n.kubeconfig" --root-dir="$nd/kubelet" \
		--hostname-override="xpc-$n" --node-ip="$(node_ips "$n")" \
		--node-labels="topology.kubernetes.io/zone=$(zone_of "$n")" --v=1
}

load() {
	local f n
	for f in "$@"; do
		for n in "${nodes[@]}"; do
			ctr -a "$R/node-$n/containerd.sock" -n k8s.io images import "$f" >/dev/null
		done
		log "loaded $(basename "$f") into ${nodes[*]}"
	done
}

untainted() {
	local t
	t=$(kubectl_ get nodes -o jsonpath='{.items[*].spec.taints}') || return 1
	! grep -q not-ready <<<"$t"
}

# zone_of N: the zone of node letter N (XPC_NODES_PER_ZONE nodes a zone,
# in letter order, each zone named by its first node's letter).
zone_of() {
	local per=${XPC_NODES_PER_ZONE:-1} letters=abcdefghi i
	i=$(expr index "$letters" "$1")
	echo "${letters:$(((i - 1) / per * per)):1}"
}

node_ready() {
	[ "$(kubectl_ get node "xpc-$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

up() {
	local t0=$SECONDS n
	if [ -e /run/netns/xpc-cp ] || [ -d "$D" ]; then
		log "a cluster is there already; run down first"
		return 1
	fi
	ensure_binaries
	trap 'log "up failed; tearing down"; down; exit 1' ERR
	mkdir -p "$D" "$R"
	# What the other scripts (and down) need to know of this cluster.
	echo "${nodes[*]}" >"$D/nodes"
	echo "$stack" >"$D/stack"
	echo "$cluster_dns" >"$D/cluster-dns"
	echo "$node_dns" >"$D/node-dns"
	cluster_cidrs >"$D/cluster-cidr"
	log "pki, network, images"
	pki
	network
	images
	log "control plane"
	control_plane
	for n in "${nodes[@]}"; do node_containerd "$n"; done
	load "$D/images/pause.tar" "$D/images/netecho.tar"
	for n in "${nodes[@]}"; do node_kubelet "$n"; done
	for n in "${nodes[@]}"; do
		wait_for 300 "node xpc-$n to register" kubectl_ get node "xpc-$n"
		# The pod CIDR the node's CNI config already uses (no allocator).
		kubectl_ patch node "xpc-$n" --type merge \
			-p "{\"spec\":{\"podCIDR\":\"${pod_cidr[$n]}\",\"podCIDRs\":[\"$(node_cidrs "$n" | sed 's/,/","/')\"]}}" >/dev/null
	done
	for n in "${nodes[@]}"; do wait_for 300 "node xpc-$n Ready" node_ready "$n"; done
	# The controller manager lifts the not-ready taint once the node is Ready.
	wait_for 180 "the not-ready taints to go" untainted
	trap - ERR
	log "up in $((SECONDS - t0))s ($stack-stack): $(for n in "${nodes[@]}"; do printf 'xpc-%s (zone %s) ' "$n" "$(zone_of "$n")"; done)Ready; kubectl: $0 kubectl"
}

# reboot N: node N as a reboot leaves it for crossproxy (issue 37): its
# kubelet stopped, crossproxy's processes killed without warning, its
# crossproxy nftables tables gone, then the kubelet started again, which
# restarts the killed containers. Other pods keep running (their endpoints
# stay), so what is measured is the proxy's own way back.
reboot_node() {
	local n=$1 p tb
	stop_pid "$D/pids/kubelet-$n"
	for p in $(pids_of_node "$n"); do
		if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q '^/usr/local/bin/crossproxy '; then
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	for tb in $(in_ns "xpc-$n" nft list tables | awk '$3 ~ /^crossproxy/ {print $2 "/" $3}'); do
		in_ns "xpc-$n" nft delete table "${tb%/*}" "${tb#*/}"
	done
	if in_ns "xpc-$n" nft list tables | grep -q crossproxy; then
		log "reboot $n: crossproxy tables left"
		return 1
	fi
	node_kubelet "$n"
	log "reboot $n: crossproxy killed, its tables flushed, kubelet started again"
}

# pids_of_node N: every process whose cgroup is under the node's cgroupRoot
# (its pods' containers) or that is a shim of its containerd (an argument
# -address followed by the node's socket). Two greps over /proc, not
# processes per process: on a loaded machine that took seconds per node.
pids_of_node() {
	local n=$1
	{
		grep -ls ":/xpc-$n/" /proc/[0-9]*/cgroup || true
		grep -lsaP -- "\x00-address\x00\Q$R/node-$n/containerd.sock\E\x00" /proc/[0-9]*/cmdline || true
	} | sed -n 's|^/proc/\([0-9]*\)/.*|\1|p' | sort -un
}

# shim_sockets N: the sockets containerd 1.6 keeps at the fixed path
# /run/containerd/s/sha256(address/namespace/id) for the node's shims.
shim_sockets() {
	local n=$1 pid args ns id
	for pid in $(pids_of_node "$n"); do
		args=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline") || continue
		grep -q containerd-shim <<<"$args" || continue
		ns=$(grep -A1 -x -- -namespace <<<"$args" | tail -1)
		id=$(grep -A1 -x -- -id <<<"$args" | tail -1)
		echo "/run/containerd/s/$(printf '%s' "$R/node-$n/containerd.sock/$ns/$id" | sha256sum | cut -d' ' -f1)"
	done
}

# alive PID: the process exists and is not a zombie. The daemons' parent
# is gone, and this host's pid 1 reaps them only every few seconds.
alive() {
	local st
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$st" != Z ]
}

stop_pid() { # PIDFILE: TERM the daemon's session, KILL after 10 s.
	local pid
	pid=$(cat "$1" 2>/dev/null) || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 50); do alive "$pid" || break; sleep 0.2; done
	kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
	rm -f "$1"
}

# known_nodes: the letters of every node a cluster here may have left
# behind, whatever XPC_NODES says now: those recorded at up, those with a
# namespace, a pid file, runtime state or a cgroup.
known_nodes() {
	local f
	{
		printf '%s\n' "${nodes[@]}"
		tr ' ' '\n' <"$D/nodes" 2>/dev/null
		for f in /run/netns/xpc-? "$D"/pids/kubelet-? "$D"/pids/containerd-? "$R"/node-? /sys/fs/cgroup/*/xpc-?; do
			[ -e "$f" ] && echo "${f: -1}"
		done
	} | grep -x '[a-i]' | sort -u
}

down() {
	trap - ERR
	set +e
	local n sock socks=() pids id f nodes
	mapfile -t nodes < <(known_nodes)
	for n in "${nodes[@]}"; do stop_pid "$D/pids/kubelet-$n"; done
	for n in "${nodes[@]}"; do
		sock="$R/node-$n/containerd.sock"
		mapfile -t -O "${#socks[@]}" socks < <(shim_sockets "$n")
		if [ -S "$sock" ]; then
			for id in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
				ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1
			done
			sleep 1
			for id in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
				ctr -a "$sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1
			done
		fi
		stop_pid "$D/pids/containerd-$n"
		pids=$(pids_of_node "$n")
		[ -z "$pids" ] || kill -KILL $pids 2>/dev/null
	done
	for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pid "$D/pids/$c"; done
	# Any other daemon a script recorded here (conformance.sh's clusterdns,
	# kubeproxy.sh's kube-proxy) when that script died before stopping it.
	for f in "$D"/pids/*; do [ -e "$f" ] && stop_pid "$f"; done
	# Mounts under the state dirs (snapshots, pod volumes, pod netns), deepest first.
	awk -v d="$D" -v r="$R" '$5 ~ "^"d"/" || $5 ~ "^"r"/" {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null; done
	for ns in "${nodes[@]/#/xpc-}" xpc-cp; do [ -e "/run/netns/$ns" ] && ip netns del "$ns"; done
	for n in "${nodes[@]}"; do
		find /sys/fs/cgroup/*/"xpc-$n" -depth -type d -exec rmdir {} \; 2>/dev/null
		# The CNI cache: the node network's results and, for the same
		# sandboxes, those of containerd's built-in loopback network.
		for f in /var/lib/cni/results/"xpc-$n"-*; do
			[ -e "$f" ] || continue
			id=${f#/var/lib/cni/results/xpc-$n-}
			rm -f "$f" "/var/lib/cni/results/cni-loopback-${id%-eth0}-lo"
		done
		find /var/log/containers -maxdepth 1 -lname "$D/node-$n/*" -delete 2>/dev/null
	done
	for sock in "${socks[@]}"; do rm -f "$sock"; done
	# containerd 1.6 creates these fixed directories; no other containerd
	# runs here, so remove them when they are empty (rmdir leaves them else).
	rmdir /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo \
		/run/containerd/s /run/containerd 2>/dev/null
	rm -rf "$D" "$R"
	log "down"
	return 0
}

case "${1:-}" in
up) up ;;
down) down ;;
load) shift; load "$@" ;;
kubectl) shift; kubectl_ "$@" ;;
status) kubectl_ get nodes -o wide && kubectl_ get pods -A -o wide ;;
nodes) cat "$D/nodes" ;;
reboot) shift; reboot_node "$1" ;;
images) images ;;
*) echo "usage: $0 up|down|load FILE...|kubectl ARGS...|status|nodes|reboot N" >&2; exit 2 ;;
esac
