#!/usr/bin/env bash
# Installs the host packages the test suites use (idempotent). Run as root;
# `make setup` runs it (and test/cluster/setup.sh for the cluster suites)
# before `make test`, so no suite installs anything itself.
set -euo pipefail
# gcc and libc6-dev: cgo for `go test -race` (make test-unit); g++, make and
# python3: node-gyp builds tree-sitter's native module.
pkgs=(nftables conntrack iproute2 wine wine64 wixl msitools gcc-mingw-w64-x86-64-win32 lksctp-tools socat osslsigncode systemd openssl
  gcc libc6-dev g++ make python3
  containernetworking-plugins # host-local: platform_windows TestCNIIPAMHostLocal reserves an overlay source VIP through it
  prometheus # promtool: make test-helm checks and tests the chart's alert rules
  qemu-system-x86 kmod cpio # make test-kernel: the guest kernels (test/kernels/kernels.sh)
  busybox-static netcat-openbsd bind9-dnsutils curl wget) # the conformance images (test/cluster/images-e2e.sh)
# node and npm (TestInstallPS1Parses): the machine may have them from another
# source than Debian's packages, whose npm would conflict with it.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || pkgs+=(npm)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-host: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup-host: packages present"
# tree-sitter and its PowerShell grammar, in a cache outside the clone.
bash "$(dirname "$0")/installer/tree-sitter.sh" install
