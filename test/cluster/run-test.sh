#!/usr/bin/env bash
# run-test.sh VERSION IMAGE: the DaemonSet test on a fresh cluster (make
# test-cluster). Expects `make image manifests` output for VERSION in dist/;
# builds the upgrade image (VERSION-next, linux/amd64) and its manifests,
# starts the cluster, runs the Go test, and tears the cluster down whatever
# happens.
set -euo pipefail
version=$1 image=$2
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
up_version="$version-next"
up_ref="${image%:*}:$up_version"
out=bin/cluster
mkdir -p "$out"
echo "test-cluster: upgrade image $up_ref"
GOOS=linux GOARCH=amd64 CGO_ENABLED=0 go build -ldflags "-s -w -X main.version=$up_version" \
	-o "$out/crossproxy-next" ./cmd/crossproxy
(cd test/images && CGO_ENABLED=0 go build -o "$root/bin/ociimage" ./ociimage)
bin/ociimage -ref "$up_ref" -version "$up_version" -archive "$out/crossproxy-next-image.tar" \
	-image "linux/amd64=$out/crossproxy-next:/usr/local/bin/crossproxy"
bash installer/render.sh "$up_ref" "$up_ref" "$up_version" "$out/next"
# The Helm CLI for TestHelm (built once, cached outside the clone).
helm_bin=$(bash test/helm/build.sh helm)
# kube-proxy, kubectl, sh, nft and iptables in one image, for TestTakeover.
bash "$here/kubetools.sh" "$out/kubetools-image.tar"
# The DNS server, for TestReboot's node resolver and cluster DNS.
(cd "$here" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -o "$root/$out/clusterdns" ./clusterdns)

# Two nodes in two zones (xpc-a, xpc-b), single-stack: what these tests are
# written for (traffic between two nodes, a rolling upgrade over both);
# the third zone and the second family are for the conformance specs, and
# two nodes keep this suite inside make test's 20 minutes.
export XPC_NODES="${XPC_NODES:-a b}" XPC_STACK="${XPC_STACK:-single}"

# One cluster at a time on a host (fixed namespaces and paths): wait for
# any other run (make conformance) holding it.
exec 9>/tmp/xpc-cluster.lock
flock 9
bash "$here/cluster.sh" down >/dev/null 2>&1 || true
trap 'bash "$here/cluster.sh" down' EXIT
trap 'exit 143' TERM INT
start=$(date +%s)
bash "$here/cluster.sh" up
echo "test-cluster: FIGURE cluster up in $(($(date +%s) - start))s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
cd "$here"
XP_MANIFEST="$root/dist/crossproxy-$version-linux.yaml" \
	XP_IMAGE_ARCHIVE="$root/dist/crossproxy-$version-image.tar" XP_IMAGE_REF="$image" \
	XP_UPGRADE_MANIFEST="$root/$out/next/crossproxy-$up_version-linux.yaml" \
	XP_UPGRADE_ARCHIVE="$root/$out/crossproxy-next-image.tar" XP_UPGRADE_REF="$up_ref" \
	XP_HELM="$helm_bin" XP_CHART="$root/installer/helm/crossproxy" \
	XP_KUBETOOLS_ARCHIVE="$root/$out/kubetools-image.tar" XP_CROSSPROXY_BIN="$root/dist/crossproxy-$version-linux-amd64" \
	XP_CLUSTERDNS="$root/$out/clusterdns" \
	GOFLAGS=-mod=mod go test -tags cluster -count=1 -timeout "${CLUSTER_GO_TIMEOUT:-20m}" -v -run "${CLUSTER_TEST_RUN:-.}" .
