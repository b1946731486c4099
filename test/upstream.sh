#!/usr/bin/env bash
# upstream.sh builds every pinned upstream component the suites of `make test`
# use (Helm; kube-apiserver and etcd; winkernel's oracle test binary; the
# cluster's kube binary; the conformance binaries), in the order the suites
# need them. `make test` runs it niced in the background from its start, so on
# a new machine these builds take the CPU the suites leave idle (the
# network-namespace, qemu and cluster suites use about one core of two)
# instead of each one running alone when its suite starts. Each build script
# takes its own lock and checks its stamp, so a suite that reaches a build
# first waits for this one and then finds it done, and on a warm machine every
# step is a stamp check. A failed build here is not fatal: the suite that
# needs it builds it again and fails there with the build's own message.
set -uo pipefail
cd "$(dirname "$0")/.."
step() {
	local start=$(date +%s)
	if "$@" >/dev/null; then
		echo "upstream: $* done in $(($(date +%s) - start))s"
	else
		echo "upstream: $* failed after $(($(date +%s) - start))s (the suite that needs it will build it again)"
	fi
}
step bash test/helm/build.sh helm
step bash test/apiserver/build.sh
step bash test/apiserver/build.sh "$(cat test/apiserver/OLDEST)"
step bash test/winoracle/build.sh
step bash test/cluster/build.sh
step bash test/cluster/build-e2e.sh
