#!/bin/busybox sh
# /init of a kernel-matrix guest (test/kernels/kernels.sh puts it in the
# initramfs). It loads the modules a Kubernetes node has loaded, runs each
# suite listed in /xp/suites with its output on the console between
# "XPK-BEGIN" and "XPK-END" lines, and powers the guest off, also when a
# suite hangs (the suites have their own -test.timeout; the host's qemu has
# a timeout too).
/bin/busybox mkdir -p /busybox
/bin/busybox --install -s /busybox
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/busybox
export HOME=/root TMPDIR=/tmp
mkdir -p /proc /sys /dev /run /tmp /root
# Debian's static busybox runs its own applets before anything on PATH; the
# real tools are called by their path.
real() {
	for d in /usr/sbin /usr/bin /sbin /bin; do
		if [ -x "$d/$1" ]; then
			echo "$d/$1"
			return
		fi
	done
	echo "$1"
}
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
echo 1 > /proc/sys/kernel/printk
# Expressions are loaded on demand through modprobe, as on a node.
real modprobe > /proc/sys/kernel/modprobe
"$(real ip)" link set lo up

kernel=$(uname -r)
echo "XPK-INFO kernel $kernel"
echo "XPK-INFO nft $("$(real nft)" --version 2>&1)"
echo "XPK-INFO ip $("$(real ip)" -V 2>&1)"
echo "XPK-INFO conntrack $("$(real conntrack)" --version 2>&1)"
# br_netfilter is loaded on Kubernetes nodes (and on the host the e2e suite
# was written on); veth and bridge make the lab's links.
for m in br_netfilter veth nf_tables nf_conntrack_netlink; do
	"$(real modprobe)" "$m" || echo "XPK-INFO modprobe $m failed"
done
"$(real sysctl)" -w net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1 >/dev/null 2>&1

while read -r name dir bin args; do
	[ -n "$name" ] || continue
	echo "XPK-BEGIN $name"
	start=$(date +%s)
	(cd "$dir" && eval "exec $bin $args") 2>&1
	rc=$?
	echo "XPK-END $name rc=$rc secs=$(($(date +%s) - start))"
done < /xp/suites
echo "XPK-DONE"
sync
poweroff -f
