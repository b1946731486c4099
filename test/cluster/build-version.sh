#!/usr/bin/env bash
# build-version.sh VERSION (e.g. v1.34.4) builds that Kubernetes release's
# test-cluster components (kube: kubelet, kube-controller-manager,
# kube-scheduler, kube-proxy, kubectl) the way build.sh builds v1.37.2, into
# ${XDG_CACHE_HOME:-~/.cache}/crossproxy/cluster-bin-VERSION: the oldest
# supported Kubernetes (issue 36). The module is cmd/kube with that
# release's k8s.io/kubernetes and its staging modules at the release's tags,
# written under the cache directory and resolved there once; a binary whose
# Go build information already names the release is kept.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
version="${1:?usage: build-version.sh VERSION (e.g. v1.34.4)}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy"
bin_dir="$cache/cluster-bin-$version"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$bin_dir/.lock-kube"
flock 8
cd "$here"
names=(kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
{
	if [ -x "$bin_dir/kube" ] &&
		go version -m "$bin_dir/kube" | grep -qE "^[[:space:]]dep[[:space:]]k8s.io/kubernetes[[:space:]]$version[[:space:]]"; then
		echo "cluster: kube $version up to date in $bin_dir"
		exit 0
	fi
	staging="v0.${version#v1.}"
	src="$bin_dir/src"
	rm -rf "$src"
	mkdir -p "$src/cmd"
	cp -r cmd/kube "$src/cmd/"
	cp build-version.sh "$src/"
	kgomod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	{
		echo "module github.com/crossproxy/crossproxy/test/cluster"
		echo
		sed -n 's/^go /go /p' go.mod
		echo
		echo "require k8s.io/kubernetes $version"
		echo
		echo "replace ("
		sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$kgomod" | while read -r m; do echo "	$m => $m $staging"; done
		echo ")"
	} >"$src/go.mod"
	cd "$src"
	echo "cluster: kube $version: resolving modules (go mod tidy)"
	GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" go mod tidy
}

export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0
parallel="${CLUSTER_BUILD_P:-2}"
echo "cluster: building kube (${names[*]}) into $bin_dir (-p $parallel)"
start=$(date +%s)
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/kube.tmp" ./cmd/kube
mv -f "$bin_dir/kube.tmp" "$bin_dir/kube"
for n in "${names[@]}"; do ln -sfn kube "$bin_dir/$n"; done
echo "cluster: built kube in $(($(date +%s) - start))s"
