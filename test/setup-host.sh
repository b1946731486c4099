#!/usr/bin/env bash
# Installs the host packages the test suites use (idempotent). Run as root.
set -euo pipefail
pkgs=(nftables conntrack iproute2 wine wine64 wixl msitools gcc-mingw-w64-x86-64-win32 lksctp-tools socat osslsigncode systemd openssl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-host: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup-host: packages present"
