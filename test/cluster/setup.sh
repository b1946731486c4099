#!/usr/bin/env bash
# setup.sh installs the host packages the test cluster needs (idempotent, run
# as root): Debian's containerd and runc for each node's container runtime,
# the CNI plugins (bridge, host-local, loopback, portmap) for pod networking,
# and the tools the harness uses. Installing containerd never starts a
# system-wide daemon here: each node runs its own.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iproute2 nftables conntrack util-linux)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	echo "cluster setup: installing ${missing[*]}"
	apt-get update -qq
	# policy-rc.d 101: the package must not start its own containerd.
	policy=/usr/sbin/policy-rc.d
	restore=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && restore=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	[ -z "$restore" ] || rm -f "$policy"
fi
echo "cluster setup: packages present ($(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
