#!/usr/bin/env bash
# build.sh [prepare] builds the oracle's Windows test binary (winkernel from
# k8s.io/kubernetes v1.37.2 and crossproxy's HNS backend in one binary) into
# $XDG_CACHE_HOME/crossproxy/winoracle (default ~/.cache/crossproxy/winoracle,
# outside the clone so CI's fresh clones reuse it) and prints its path.
#
# It skips the build when the binary's stamp matches: Go version, this script,
# go.mod, go.sum, the suite's sources, the overlay file, and every Go source of
# the root module the suite can import (core, platform, platform_windows and
# the root go.mod/go.sum).
#
# The overlay trap: Go refuses `-overlay` for a file inside the module cache.
# k8s.io/kubernetes is therefore replaced (go.mod) by ./.k8s, a directory of
# symlinks to the module cache copy, made here; a file added under .k8s/pkg/...
# is then outside the module cache as far as Go's check goes.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${WINORACLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/winoracle}"
mkdir -p "$cache"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$cache/.lock"
flock 8
cd "$here"
log() { echo "winoracle: $*" >&2; }

k8s_version=v1.37.2
# The module cache copy of k8s.io/kubernetes (downloaded through the module
# proxy on a fresh machine). Asked outside any module: ours replaces it.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
k8s_dir="$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$k8s_version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')"
if [ -z "$k8s_dir" ] || [ ! -f "$k8s_dir/go.mod" ]; then
	log "cannot find k8s.io/kubernetes@$k8s_version in the module cache"
	exit 1
fi

# .k8s: one symlink per top-level entry, except pkg/proxy/winkernel's parents,
# which are real directories so the overlay file's directory is ours.
link_tree() { # link_tree SRC DST PATH: symlink SRC's entries into DST, recursing along PATH
	local src="$1" dst="$2" path="$3" first rest e name
	first="${path%%/*}"
	rest=""
	[ "$first" != "$path" ] && rest="${path#*/}"
	mkdir -p "$dst"
	for e in "$src"/* "$src"/.[!.]*; do
		[ -e "$e" ] || continue
		name="$(basename "$e")"
		if [ -n "$first" ] && [ "$name" = "$first" ]; then
			link_tree "$e" "$dst/$name" "$rest"
		else
			ln -s "$e" "$dst/$name"
		fi
	done
}
if [ "$(cat .k8s/.source 2>/dev/null)" != "$k8s_dir" ]; then
	rm -rf .k8s
	link_tree "$k8s_dir" .k8s pkg/proxy/winkernel
	echo "$k8s_dir" >.k8s/.source
fi
overlay_target="$here/.k8s/pkg/proxy/winkernel/zz_winoracle.go"
printf '{"Replace":{"%s":"%s"}}\n' "$overlay_target" "$here/testdata/winkernel_oracle.go" >overlay.json
# `build.sh prepare`: only the above, for go commands run by hand in this
# module (go mod tidy; GOOS=windows go vet -overlay overlay.json .).
if [ "${1:-}" = prepare ]; then
	exit 0
fi

stamp="$({
	go version
	cat build.sh go.mod go.sum testdata/winkernel_oracle.go
	echo "$k8s_dir"
	find . -maxdepth 1 -name '*.go' -print0 | sort -z | xargs -0 cat
	cat "$root/go.mod" "$root/go.sum"
	find "$root/core" "$root/platform" "$root/platform_windows" -name '*.go' ! -name '*_test.go' -print0 |
		sort -z | xargs -0 cat
} | sha256sum | cut -d' ' -f1)"
# One binary per stamp, so worktrees and clones of different commits that
# share the cache (CI, several branches) do not rebuild each other's; the
# newest few are kept.
bin="$cache/winoracle-$stamp.test.exe"
if [ -f "$bin" ]; then
	log "test binary up to date"
	echo "$bin"
	exit 0
fi

log "downloading modules"
go mod download
log "building the Windows test binary"
start=$(date +%s)
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 nice -n 10 go test -c -p "${WINORACLE_BUILD_P:-2}" \
	-overlay overlay.json -o "$bin.tmp.$$" .
mv -f "$bin.tmp.$$" "$bin"
ls -t "$cache"/winoracle-*.test.exe | tail -n +6 | xargs -r rm -f
log "built in $(($(date +%s) - start))s"
echo "$bin"
