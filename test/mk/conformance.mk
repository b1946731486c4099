# Kubernetes' own e2e network specs on the real two-node cluster (issue 11),
# see test/cluster/README.md ("Conformance").
#   make e2e-bin      e2enet.test (the e2e suite with the network specs only)
#                     and agnhost 2.66.1 from k8s.io/kubernetes v1.37.2,
#                     cached in ~/.cache/crossproxy/cluster-bin
#   make conformance  the specs of test/cluster/conformance.focus against the
#                     shipped crossproxy DaemonSet, then against kube-proxy
#                     v1.37.2 (nftables), each on a fresh cluster; writes
#                     test/results/conformance.md
#   make test-conformance-short  a few Services conformance specs against
#                     crossproxy only; fails if one fails (in make test)

.PHONY: e2e-bin conformance test-conformance-short
# In make test: a bounded subset of the e2e Services specs against crossproxy
# (about 2.5 min warm), so a regression Kubernetes' own tests see fails CI.
TEST_SUITES += test-conformance-short
e2e-bin: cluster-bin
	nice -n 10 bash test/cluster/build-e2e.sh

conformance: image manifests e2e-bin
	timeout 150m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' full

test-conformance-short: image manifests e2e-bin
	timeout 25m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' short
