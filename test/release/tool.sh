#!/usr/bin/env bash
# tool.sh cyclonedx-gomod|registry|crane prints the path of the release tool,
# building it first when missing: the version tools/release/go.mod pins,
# built from that module into ${XDG_CACHE_HOME:-~/.cache}/crossproxy/NAME-VERSION
# (outside the clone, so fresh clones reuse it) and rebuilt when the stamp
# (Go version, go.mod, go.sum, this script) changes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
mod="$here/../../tools/release"
case "${1:-}" in
cyclonedx-gomod) path=github.com/CycloneDX/cyclonedx-gomod module=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod ;;
registry) path=github.com/distribution/distribution/v3 module=github.com/distribution/distribution/v3/cmd/registry ;;
crane) path=github.com/google/go-containerregistry module=github.com/google/go-containerregistry/cmd/crane ;;
*) echo "tool.sh: cyclonedx-gomod, registry or crane, not \"${1:-}\"" >&2; exit 2 ;;
esac
name=$1
version="$(awk -v p="$path" '$1 == p { print $2 }' "$mod/go.mod")"
[ -n "$version" ] || { echo "tool.sh: no $path in tools/release/go.mod" >&2; exit 1; }
dir="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/$name-$version"
stamp="$({ go version; cat "$here/tool.sh" "$mod/go.mod" "$mod/go.sum"; } | sha256sum | cut -d' ' -f1)"
mkdir -p "$dir"
# One build at a time: make release and the cluster test may both ask.
exec 8>"$dir/.lock"
flock 8
if [ -x "$dir/$name" ] && [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$dir/$name"
	exit 0
fi
echo "tool.sh: building $name $version into $dir" >&2
(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-trimpath go build -o "$dir/$name.new" "$module")
mv "$dir/$name.new" "$dir/$name"
echo "$stamp" >"$dir/.stamp"
echo "$dir/$name"
