#!/usr/bin/env bash
# build.sh builds the test cluster's Kubernetes components from
# k8s.io/kubernetes v1.37.2 as one binary, kube (kubelet,
# kube-controller-manager, kube-scheduler and kubectl, linked under those
# names), into ${XDG_CACHE_HOME:-~/.cache}/crossproxy/cluster-bin, outside the
# clone so CI's fresh clones reuse it. kube-apiserver and etcd come from
# test/apiserver/build.sh. The build is skipped when the binary exists and the
# stamp (Go version, this script, go.mod, go.sum, the main) matches.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$bin_dir/.lock-kube"
flock 8
cd "$here"
names=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)

stamp="$({
	go version
	cat build.sh go.mod go.sum
	find cmd -name '*.go' -print0 | sort -z | xargs -0 cat
} | sha256sum | cut -d' ' -f1)"
if [ -x "$bin_dir/kube" ] && [ "$(cat "$bin_dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "cluster: kube up to date in $bin_dir"
	exit 0
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0
parallel="${CLUSTER_BUILD_P:-2}"
echo "cluster: building kube (${names[*]}) into $bin_dir (-p $parallel)"
start=$(date +%s)
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/kube.tmp" ./cmd/kube
mv -f "$bin_dir/kube.tmp" "$bin_dir/kube"
for n in "${names[@]}"; do ln -sfn kube "$bin_dir/$n"; done
echo "$stamp" >"$bin_dir/.stamp"
echo "cluster: built kube in $(($(date +%s) - start))s"
