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
# build.sh VERSION (e.g. v1.34.4) builds that release of kube-apiserver the
# same way, into apiserver-bin-VERSION: the oldest supported API server
# (issue 36). The module is this one with every k8s.io version moved to
# VERSION, written under the cache directory and resolved there once.
version="${1:-}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy"
if [ -n "$version" ]; then
	bin_dir="$cache/apiserver-bin-$version"
else
	bin_dir="${CROSSPROXY_APISERVER_BIN_DIR:-${APISERVER_BIN_DIR:-$cache/apiserver-bin}}"
fi
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$bin_dir/.lock"
flock 8
cd "$here"
if [ -n "$version" ]; then
	# Already built from this recipe: the binary's own build information
	# names the release (go version -m), whatever built it.
	if [ -x "$bin_dir/etcd" ] && [ -x "$bin_dir/kube-apiserver" ] &&
		go version -m "$bin_dir/kube-apiserver" | grep -qE "^[[:space:]]dep[[:space:]]k8s.io/kubernetes[[:space:]]$version[[:space:]]" &&
		go version -m "$bin_dir/kube-apiserver" | grep -q "gitVersion=$version"; then
		echo "apiserver $version: up to date in $bin_dir"
		exit 0
	fi
	staging="v0.${version#v1.}"
	src="$bin_dir/src"
	rm -rf "$src"
	mkdir -p "$src"
	cp -r cmd build.sh "$src/"
	# k8s.io/kubernetes replaces its staging modules with its own tree; a
	# module that uses it replaces them with the release's tags, as this
	# module's go.mod does for v1.37. The list is that release's own.
	kgomod=$(GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	etcd=$(sed -n 's|^[[:space:]]*go.etcd.io/etcd/server/v3 \(v[^ ]*\)$|\1|p' go.mod)
	{
		echo "module github.com/crossproxy/crossproxy/test/apiserver"
		echo
		sed -n 's/^go /go /p' go.mod
		echo
		echo "require ("
		echo "	go.etcd.io/etcd/server/v3 $etcd"
		echo "	k8s.io/component-base $staging"
		echo "	k8s.io/kubernetes $version"
		echo ")"
		echo
		echo "replace ("
		sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' "$kgomod" | while read -r m; do echo "	$m => $m $staging"; done
		echo ")"
	} >"$src/go.mod"
	cd "$src"
	echo "apiserver $version: resolving modules (go mod tidy)"
	GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" go mod tidy
fi

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
# The API server reports the release it is (GET /version), as a released
# binary does: Helm checks a chart's kubeVersion against it, and clients
# choose behaviour by it. Without these it says v0.0.0-master.
kv=${version:-$(sed -n 's|^[[:space:]]*k8s.io/kubernetes \(v[0-9.]*\)$|\1|p' go.mod | head -1)}
minor=${kv#v1.}
minor=${minor%%.*}
vpkg=k8s.io/component-base/version
go build -p "$parallel" -ldflags="-s -w -X $vpkg.gitVersion=$kv -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z" \
	-o "$bin_dir/kube-apiserver.tmp" ./cmd/kube-apiserver
mv -f "$bin_dir/etcd.tmp" "$bin_dir/etcd"
mv -f "$bin_dir/kube-apiserver.tmp" "$bin_dir/kube-apiserver"
echo "$stamp" >"$bin_dir/.stamp"
echo "apiserver: built in $(($(date +%s) - start))s"
