#!/usr/bin/env bash
# push.sh RELEASE_DIR VERSION IMAGE_REPO CHART_REPO
# Pushes a `make release` directory: its OCI layout as IMAGE_REPO:VERSION
# (crane, the whole index, digests unchanged) and its chart to
# oci://CHART_REPO (helm push; the chart lands as CHART_REPO/crossproxy:X.Y.Z).
# PLAIN_HTTP=1 talks plain HTTP to the registry (a registry on the host
# without TLS). Prints the pushed index digest.
set -euo pipefail
dir=$1 version=$2 image_repo=$3 chart_repo=$4
here="$(cd "$(dirname "$0")" && pwd)"
crane=$(bash "$here/tool.sh" crane)
helm_bin=$(bash "$here/../helm/build.sh" helm)
crane_flags=() helm_flags=()
if [ "${PLAIN_HTTP:-}" = 1 ]; then crane_flags=(--insecure) helm_flags=(--plain-http); fi
want=$(cat "$dir/crossproxy-$version-image.digest")
"$crane" push "${crane_flags[@]}" "$dir/crossproxy-$version-oci" "$image_repo:$version" >&2
got=$("$crane" digest "${crane_flags[@]}" "$image_repo:$version")
if [ "$got" != "$want" ]; then
	echo "push: the registry serves $image_repo:$version as $got, the release's index is $want" >&2
	exit 1
fi
chart=$(ls "$dir"/crossproxy-*.tgz)
"$helm_bin" push "${helm_flags[@]}" "$chart" "oci://$chart_repo" >&2
echo "$got"
