#!/usr/bin/env bash
# build.sh builds kube-proxy.exe, k8s.io/kubernetes v1.37.2 cmd/kube-proxy
# for windows/amd64 unmodified (winkernel is its Windows data plane), into
# ${XDG_CACHE_HOME:-~/.cache}/crossproxy/kube-proxy-windows, outside the
# clone so fresh clones reuse it, and prints its path. The module is
# test/cluster's (k8s.io/kubernetes and its staging modules at v1.37.2),
# copied into the cache directory; the build is skipped when the binary's
# stamp (that go.mod and go.sum, this script, the Go version) matches.
# Cold: about 2.5 minutes on 2 cores when the Linux components' packages are
# already compiled (test/apiserver/build.sh), more from an empty build cache.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
version=v1.37.2
cache="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/kube-proxy-windows"
mkdir -p "$cache"
exec 8>"$cache/.lock"
flock 8
stamp="$(cat "$root/test/cluster/go.mod" "$root/test/cluster/go.sum" "$0" | sha256sum | cut -c1-16)-$(go env GOVERSION)"
exe="$cache/kube-proxy.exe"
if [ -f "$exe" ] && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$exe"
	exit 0
fi
src="$cache/src"
rm -rf "$src"
mkdir -p "$src"
cp "$root/test/cluster/go.mod" "$root/test/cluster/go.sum" "$src/"
sed -i 's|^module .*|module crossproxy.test/kube-proxy-windows|' "$src/go.mod"
cd "$src"
vpkg=k8s.io/component-base/version
minor="${version#v1.}"
minor="${minor%%.*}"
start=$(date +%s)
echo "kube-proxy-windows: building kube-proxy.exe $version" >&2
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" go build -p "${CLUSTER_BUILD_P:-2}" -trimpath \
	-ldflags="-s -w -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z" \
	-o "$exe.tmp" k8s.io/kubernetes/cmd/kube-proxy
mv -f "$exe.tmp" "$exe"
echo "$stamp" >"$cache/stamp"
echo "kube-proxy-windows: built in $(($(date +%s) - start))s" >&2
echo "$exe"
