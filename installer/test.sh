#!/usr/bin/env bash
# The installer suite (make test-installer): manifest invariants, the systemd
# unit, the MSI's tables and its install/upgrade/uninstall under Wine with the
# real service binary, install.ps1's syntax and argument building, signing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
GO=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "-- systemd unit: systemd-analyze verify"
# verify needs ExecStart to exist: point it at a copy of the Linux binary.
mkdir -p "$work/unit"
$GO build -o "$work/unit/crossproxy" ./cmd/crossproxy
sed "s#/usr/local/bin/crossproxy#$work/unit/crossproxy#" installer/linux/crossproxy.service > "$work/unit/crossproxy.service"
systemd-analyze verify "$work/unit/crossproxy.service"
systemd-analyze security --offline=yes --threshold=30 "$work/unit/crossproxy.service" | tail -1

echo "-- windows binary"
exe="$work/crossproxy.exe"
GOOS=windows GOARCH=amd64 CGO_ENABLED=0 $GO build -o "$exe" ./cmd/crossproxy

echo "-- go tests (manifests; dry-run apply and RBAC on a real kube-apiserver; NET_ADMIN-only run; MSI tables; MSI under Wine, also on the emulated HNS; install.ps1; signing)"
CROSSPROXY_WINDOWS_EXE="$exe" CROSSPROXY_LINUX_BIN="$work/unit/crossproxy" $GO test -count=1 -tags installer,integration -v ./test/installer/
