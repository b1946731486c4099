#!/usr/bin/env bash
# build.sh [helm|promtool] prints the path of the tool, building or installing
# it first when missing.
#   helm: the Helm CLI from helm.sh/helm/v4 (the version this module's go.mod
#         names), built into ${XDG_CACHE_HOME:-~/.cache}/crossproxy/helm-VERSION,
#         outside the clone so fresh clones reuse it; rebuilt when the stamp
#         (Go version, go.mod, go.sum, this script) changes.
#   promtool: Debian's prometheus package (test/setup-host.sh installs it;
#         installed here too when missing, for a lone `make test-helm`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
case "${1:-helm}" in
promtool)
	if ! command -v promtool >/dev/null 2>&1; then
		echo "helm: installing Debian's prometheus (promtool)" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
	fi
	command -v promtool
	exit 0
	;;
helm) ;;
*) echo "build.sh: helm or promtool, not $1" >&2; exit 2 ;;
esac
cd "$here"
version="$(awk '$1 == "helm.sh/helm/v4" { print $2 }' go.mod)"
[ -n "$version" ] || { echo "build.sh: no helm.sh/helm/v4 in go.mod" >&2; exit 1; }
dir="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/helm-$version"
stamp="$({ go version; cat build.sh go.mod go.sum; } | sha256sum | cut -d' ' -f1)"
mkdir -p "$dir"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$dir/.lock"
flock 8
if [ -x "$dir/helm" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$dir/helm"
	exit 0
fi
mkdir -p "$dir"
# -mod=mod: this module also imports the root module (../.., config_test.go),
# whose requirements change under it.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
echo "helm: building helm $version into $dir" >&2
start=$(date +%s)
CGO_ENABLED=0 go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$version" \
	-o "$dir/helm.tmp" helm.sh/helm/v4/cmd/helm >&2
mv -f "$dir/helm.tmp" "$dir/helm"
echo "$stamp" >"$dir/.stamp"
echo "helm: built helm $version in $(($(date +%s) - start))s" >&2
echo "$dir/helm"
