#!/usr/bin/env bash
# images-e2e.sh OUTDIR: the images Kubernetes' e2e network specs run, built
# here (there is no registry to pull from) and tagged with the exact names
# e2e v1.37.2 asks for, so pods with imagePullPolicy IfNotPresent find them:
#   registry.k8s.io/e2e-test-images/agnhost:2.66.1   agnhost (build-e2e.sh)
#       as /agnhost, Cmd ["pause"], in a userland like upstream's alpine one:
#       busybox (the coreutils), dash as sh, curl, wget, nc (netcat-openbsd:
#       -v -t -w, -u), nslookup and dig, ip and ss, bash; dynamic binaries with the
#       libraries ldd names and the loader, from this host's Debian packages
#   registry.k8s.io/e2e-test-images/busybox:1.37.0-2   busybox-static
#   registry.k8s.io/e2e-test-images/regression-issue-74839:1.5   its binary
#       alone (build-e2e.sh), as upstream's image runs it
#   registry.k8s.io/pause:3.10.2   the cluster's own pause (test/images/pause)
# Writes OUTDIR/{agnhost,busybox,regression,pause}.tar for `cluster.sh load`.
set -euo pipefail
out=${1:?usage: images-e2e.sh OUTDIR}
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin_dir="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
agnhost_ref=registry.k8s.io/e2e-test-images/agnhost:2.66.1
busybox_ref=registry.k8s.io/e2e-test-images/busybox:1.37.0-2
pause_ref=registry.k8s.io/pause:3.10.2
regression_ref=registry.k8s.io/e2e-test-images/regression-issue-74839:1.5

pkgs=(busybox-static netcat-openbsd bind9-dnsutils curl wget iproute2 bash dash)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
	echo "images-e2e: installing ${missing[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
bash "$here/build-e2e.sh"
mkdir -p "$out" "$root/bin"
out="$(cd "$out" && pwd)"
work="$out/rootfs"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
(cd "$root/test/images" && CGO_ENABLED=0 go build -o "$root/bin/ociimage" ./ociimage &&
	CGO_ENABLED=0 go build -ldflags='-s -w' -o "$out/pause" ./pause)
ociimage="$root/bin/ociimage"

# base DIR: a merged-/usr skeleton (bin, sbin, lib, lib64 link into usr as
# on Debian), /tmp, and the root and nobody accounts.
base() {
	local d=$1
	mkdir -p "$d"/usr/{bin,sbin,lib,lib64} "$d"/{etc,tmp,root}
	chmod 1777 "$d/tmp"
	ln -s usr/bin "$d/bin"
	ln -s usr/sbin "$d/sbin"
	ln -s usr/lib "$d/lib"
	ln -s usr/lib64 "$d/lib64"
	printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$d/etc/passwd"
	printf 'root:x:0:\nnogroup:x:65534:\n' >"$d/etc/group"
	printf 'hosts: files dns\n' >"$d/etc/nsswitch.conf"
}

# busybox_applets DIR: a symlink to busybox for every applet whose name DIR
# has in neither bin directory (the real tools copied first win on every
# PATH order: curl, nc, ip, ss, ...).
busybox_applets() {
	local d=$1 a n
	for a in $(/bin/busybox --list-full); do
		n=$(basename "$a")
		[ -e "$d/usr/bin/$n" ] || [ -e "$d/usr/sbin/$n" ] || [ -L "$d/$a" ] || ln -s /usr/bin/busybox "$d/$a"
	done
}

# dyn DIR BINARY [NAME]: the binary in its directory (as NAME), with every
# library ldd resolves, each at its soname path under its real directory.
dyn() {
	local d=$1 b=$2 name=${3:-$(basename "$2")} lib dir
	cp -L "$b" "$d$(readlink -f "$(dirname "$b")")/$name"
	for lib in $(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
		dir=$(readlink -f "$(dirname "$lib")")
		mkdir -p "$d$dir"
		[ -e "$d$dir/$(basename "$lib")" ] || cp -L "$lib" "$d$dir/$(basename "$lib")"
	done
}

created=0
a="$work/agnhost"
base "$a"
cp /bin/busybox "$a/usr/bin/busybox"
dyn "$a" /usr/bin/curl
dyn "$a" /usr/bin/nc.openbsd nc
dyn "$a" /usr/bin/nslookup
dyn "$a" /usr/bin/dig
dyn "$a" /usr/sbin/ip
dyn "$a" /usr/bin/ss
dyn "$a" /usr/bin/bash
# GNU wget: the static busybox's wget segfaults on every fetch (static glibc
# cannot load the NSS modules getaddrinfo wants), even of an IP address.
dyn "$a" /usr/bin/wget
# /bin/sh is dash: Debian's static busybox shell runs its own applets before
# PATH (nc, ip, wget would be busybox's, not the tools e2e expects).
dyn "$a" /usr/bin/dash
ln -s dash "$a/usr/bin/sh"
busybox_applets "$a"
# The tools must run in the tree as the image has it (each from the tree's
# own loader and libraries, none from the host's) and be the real ones.
while IFS='|' read -r t want; do
	if ! chroot "$a" /bin/sh -c "$t" 2>&1 | grep -q "$want"; then
		echo "images-e2e: '$t' in the agnhost tree does not print '$want':" >&2
		chroot "$a" /bin/sh -c "$t" >&2 || true
		exit 1
	fi
done <<'CHECKS'
echo ok|ok
curl --version|^curl
nc -h|OpenBSD netcat
nslookup -version|^nslookup 9
dig -v|DiG
ip -V|iproute2
ss -V|iproute2
bash --version|GNU bash
wget --version|GNU Wget
sleep 0 && date +%Y|^20
CHECKS
"$ociimage" -ref "$agnhost_ref" -created $created -archive "$out/agnhost.tar" \
	-image "linux/amd64=$bin_dir/agnhost:/agnhost" -rootfs "linux/amd64=$a" -cmd '["pause"]'

b="$work/busybox"
base "$b"
busybox_applets "$b"
rm -f "$b/usr/bin/busybox"
"$ociimage" -ref "$busybox_ref" -created $created -archive "$out/busybox.tar" \
	-image "linux/amd64=/bin/busybox:/usr/bin/busybox" -rootfs "linux/amd64=$b" -cmd '["sh"]'

"$ociimage" -ref "$regression_ref" -created $created -archive "$out/regression.tar" \
	-image "linux/amd64=$bin_dir/regression-issue-74839:/regression-issue-74839"
"$ociimage" -ref "$pause_ref" -created $created -archive "$out/pause.tar" -image "linux/amd64=$out/pause:/pause"
echo "images-e2e: $agnhost_ref, $busybox_ref, $regression_ref, $pause_ref in $out"
