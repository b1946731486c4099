#!/usr/bin/env bash
# build.sh builds the real kube-apiserver (k8s.io/kubernetes v1.37.2) and an
# embedded etcd into $XDG_CACHE_HOME/crossproxy/apiserver-bin (default
# ~/.cache/crossproxy/apiserver-bin, outside the clone so CI's fresh clones
# reuse it), for the integration tests and their
# harness (test/harness). It skips the build when both binaries exist and the
# stamp (go.mod, go.sum, sources, Go version) matches the one they were built
# from. A cold build takes ~10-15 minutes on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="${CROSSPROXY_APISERVER_BIN_DIR:-${APISERVER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/apiserver-bin}}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$bin_dir/.lock"
flock 8
cd "$here"

stamp_of() {
	{
		go version
		cat build.sh go.mod
		[ -f go.sum ] && cat go.sum
		find cmd -name '*.go' -print0 | sort -z | xargs -0 cat
	} | sha256sum | cut -d' ' -f1
}

stamp="$(stamp_of)"
if [ -x "$bin_dir/kube-apiserver" ] && [ -x "$bin_dir/etcd" ] &&
	[ "$(cat "$bin_dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "apiserver: up to date in $bin_dir"
	exit 0
fi

export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0
if [ ! -f go.sum ]; then
	echo "apiserver: resolving modules (go mod tidy)"
	go mod tidy
	stamp="$(stamp_of)"
fi

parallel="${APISERVER_BUILD_P:-2}"
echo "apiserver: building etcd and kube-apiserver into $bin_dir (-p $parallel)"
start=$(date +%s)
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/etcd.tmp" ./cmd/etcd
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/kube-apiserver.tmp" ./cmd/kube-apiserver
mv -f "$bin_dir/etcd.tmp" "$bin_dir/etcd"
mv -f "$bin_dir/kube-apiserver.tmp" "$bin_dir/kube-apiserver"
echo "$stamp" >"$bin_dir/.stamp"
echo "apiserver: built in $(($(date +%s) - start))s"
