#!/usr/bin/env bash
# kubetools.sh OUT.tar: the image localhost/xpc/kubetools:1 for TestTakeover,
# built here (no registry): kube-proxy and kubectl (the kube binary,
# build.sh), busybox's sh, and the host's nft and iptables (nft backend) with
# the shared libraries they load. The test runs kube-proxy from it as a
# kubeadm-style DaemonSet, the chart's takeover Job from it (sh, kubectl), and
# the Job runs `kube-proxy --cleanup` from it as it would from kube-proxy's
# own image.
set -euo pipefail
out=$1
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
k8s_bin="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
ref=localhost/xpc/kubetools:1
fs=$(mktemp -d)
trap 'rm -rf "$fs"' EXIT
mkdir -p "$fs/usr/local/bin" "$fs/bin" "$fs/usr/sbin" "$fs/etc" "$fs/run" "$fs/tmp" "$fs/var/lib/kube-proxy"
for n in kube-proxy kubectl; do ln -s kube "$fs/usr/local/bin/$n"; done
cp /bin/busybox "$fs/bin/busybox"
for n in sh cat echo sleep date tr cut sort wc tail grep sed mkdir rm ls; do ln -s busybox "$fs/bin/$n"; done
cp "$(readlink -f /usr/sbin/nft)" "$fs/usr/sbin/nft"
cp "$(readlink -f /usr/sbin/xtables-nft-multi)" "$fs/usr/sbin/xtables-nft-multi"
for n in iptables ip6tables iptables-save ip6tables-save iptables-restore ip6tables-restore; do
	ln -s xtables-nft-multi "$fs/usr/sbin/$n"
done
# Shared libraries (and the loader) of nft and iptables, and iptables'
# extensions, which it loads at run time.
for lib in $(ldd /usr/sbin/nft /usr/sbin/xtables-nft-multi | awk '/=> \//{print $3} /^\t\/lib64/{print $1}' | sort -u); do
	mkdir -p "$fs$(dirname "$lib")"
	cp -L "$lib" "$fs$lib"
done
mkdir -p "$fs/usr/lib/x86_64-linux-gnu"
cp -a /usr/lib/x86_64-linux-gnu/xtables "$fs/usr/lib/x86_64-linux-gnu/"
cp /etc/protocols /etc/services "$fs/etc/" 2>/dev/null || true
echo 'root:x:0:0:root:/root:/bin/sh' >"$fs/etc/passwd"
(cd "$root/test/images" && CGO_ENABLED=0 go build -o "$root/bin/ociimage" ./ociimage)
"$root/bin/ociimage" -ref "$ref" -archive "$out" \
	-image "linux/amd64=$k8s_bin/kube:/usr/local/bin/kube" -rootfs "linux/amd64=$fs" >/dev/null
echo "kubetools: $ref -> $out"
