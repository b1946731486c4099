#!/usr/bin/env bash
# render.sh IMAGE WINDOWS_IMAGE VERSION OUT_DIR
# Writes OUT_DIR/crossproxy-VERSION-linux.yaml and -windows.yaml: the RBAC, the
# ConfigMap and the DaemonSet of each OS with image and version filled in. Each
# file applies on its own (the RBAC objects are the same in both).
set -euo pipefail
image=$1 winimage=$2 version=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
render() { # IMAGE FILE...
  local img=$1; shift
  local first=1
  for f in "$@"; do
    [ $first = 1 ] || echo '---'
    first=0
    sed -e "s|@IMAGE@|$img|g" -e "s|@VERSION@|$version|g" "$f"
  done
}
mkdir -p "$out"
render "$image" "$here/linux/rbac.yaml" "$here/linux/configmap.yaml" "$here/linux/daemonset.yaml" \
  > "$out/crossproxy-$version-linux.yaml"
render "$winimage" "$here/linux/rbac.yaml" "$here/windows/configmap.yaml" "$here/windows/daemonset.yaml" \
  > "$out/crossproxy-$version-windows.yaml"
for f in "$out/crossproxy-$version-linux.yaml" "$out/crossproxy-$version-windows.yaml"; do
  if grep -n '@IMAGE@\|@VERSION@' "$f"; then echo "render: placeholder left in $f" >&2; exit 1; fi
  echo "rendered $f"
done
