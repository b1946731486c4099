#!/usr/bin/env bash
# build-e2e.sh builds what the conformance run (conformance.sh) needs from
# k8s.io/kubernetes v1.37.2 besides the cluster's own binaries:
#   e2enet.test  Kubernetes' e2e suite with the network specs only (e2enet/)
#   agnhost      the e2e test image's binary, version 2.66.1 (images-e2e.sh
#                packs it into registry.k8s.io/e2e-test-images/agnhost:2.66.1)
#   regression-issue-74839   the conntrack spec's out-of-window TCP server
#                (image registry.k8s.io/e2e-test-images/regression-issue-74839:1.5)
#   clusterdns   the cluster's DNS for the specs' Service names (clusterdns/)
#   ginkgo       Ginkgo's CLI (the suite's version), which runs e2enet.test as
#                parallel processes
# into ${XDG_CACHE_HOME:-~/.cache}/crossproxy/cluster-bin, next to kube. The
# build is skipped when both exist and the stamp (Go version, this script,
# go.mod, go.sum, e2enet's and clusterdns's sources) matches; its own stamp, so kube and
# these rebuild independently.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin_dir="${CROSSPROXY_CLUSTER_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/cluster-bin}"
mkdir -p "$bin_dir"
bin_dir="$(cd "$bin_dir" && pwd)"
# One build at a time: make test starts this build in the background
# (test/upstream.sh) while a suite may ask for it too; the second waits, then
# finds the stamp.
exec 8>"$bin_dir/.lock-e2e"
flock 8
cd "$here"
agnhost_version=2.66.1

stamp="$({
	go version
	cat build-e2e.sh go.mod go.sum
	find e2enet clusterdns -name '*.go' -print0 | sort -z | xargs -0 cat
} | sha256sum | cut -d' ' -f1)"
if [ -x "$bin_dir/e2enet.test" ] && [ -x "$bin_dir/agnhost" ] && [ -x "$bin_dir/clusterdns" ] &&
	[ -x "$bin_dir/regression-issue-74839" ] && [ -x "$bin_dir/ginkgo" ] &&
	[ "$(cat "$bin_dir/.stamp-e2e" 2>/dev/null)" = "$stamp" ]; then
	echo "cluster: e2enet.test, agnhost, regression-issue-74839, clusterdns and ginkgo up to date in $bin_dir"
	exit 0
fi
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
export CGO_ENABLED=0
parallel="${CLUSTER_BUILD_P:-2}"
start=$(date +%s)
echo "cluster: building e2enet.test, agnhost $agnhost_version, regression-issue-74839, clusterdns and ginkgo into $bin_dir (-p $parallel)"
# -vet=off: go test would vet (and so analyze) every one of the ~2000
# packages the suite imports.
go test -c -vet=off -p "$parallel" -tags conformance -ldflags='-s -w' -o "$bin_dir/e2enet.test.tmp" ./e2enet
go build -p "$parallel" -ldflags="-s -w -X main.Version=$agnhost_version" \
	-o "$bin_dir/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/regression-issue-74839.tmp" \
	k8s.io/kubernetes/test/images/regression-issue-74839
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/clusterdns.tmp" ./clusterdns
go build -p "$parallel" -ldflags='-s -w' -o "$bin_dir/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo
mv -f "$bin_dir/e2enet.test.tmp" "$bin_dir/e2enet.test"
mv -f "$bin_dir/agnhost.tmp" "$bin_dir/agnhost"
mv -f "$bin_dir/clusterdns.tmp" "$bin_dir/clusterdns"
mv -f "$bin_dir/regression-issue-74839.tmp" "$bin_dir/regression-issue-74839"
mv -f "$bin_dir/ginkgo.tmp" "$bin_dir/ginkgo"
echo "$stamp" >"$bin_dir/.stamp-e2e"
echo "cluster: built e2enet.test, agnhost, regression-issue-74839, clusterdns and ginkgo in $(($(date +%s) - start))s"
