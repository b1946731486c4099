# Kubernetes' own e2e network specs on the real test cluster, three nodes
# in three zones, single-stack and dual-stack (issues 11 and 29), see
# test/cluster/README.md ("Conformance").
#   make e2e-bin      e2enet.test (the e2e suite with the network specs only)
#                     and agnhost 2.66.1 from k8s.io/kubernetes v1.37.2,
#                     cached in ~/.cache/crossproxy/cluster-bin
#   make conformance  the specs of test/cluster/conformance.focus against the
#                     shipped crossproxy DaemonSet and against kube-proxy
#                     v1.37.2 (nftables), on the single-stack and on the
#                     dual-stack cluster: four runs, each on a fresh
#                     cluster; writes test/results/conformance.md
#                     (CONFORMANCE_STACKS=single|dual and
#                     CONFORMANCE_PROXIES=crossproxy|kube-proxy narrow it)
#   make test-conformance-short  eight specs against crossproxy on the
#                     dual-stack cluster; fails if one fails (in make test)

.PHONY: e2e-bin conformance test-conformance-short
# In make test: a bounded subset of the e2e Services specs against crossproxy
# (the `short` lines of conformance.focus, about 3 min warm), so a
# regression Kubernetes' own tests see fails CI.
TEST_SUITES += test-conformance-short
e2e-bin: cluster-bin
	nice -n 10 bash test/cluster/build-e2e.sh

conformance: image manifests e2e-bin
	timeout 170m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' full

test-conformance-short: image manifests e2e-bin
	timeout 25m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' short

# The short specs on a cluster of the oldest supported Kubernetes
# (test/apiserver/OLDEST: its kube-apiserver, kubelet, controller manager,
# scheduler and kubectl, test/cluster/build-version.sh), with the e2e suite
# of v1.37.2: the other end of the supported range (issue 36). Not in make
# test: its build, about 20 minutes cold, would push a cold CI past its
# limit; test/results/conformance.md has its runs.
.PHONY: test-conformance-short-oldest
test-conformance-short-oldest: image manifests e2e-bin apiserver-oldest
	bash test/cluster/build-version.sh $(OLDEST_K8S)
	XPC_KUBERNETES=$(OLDEST_K8S) timeout 25m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' short

# The Traffic Distribution specs for both proxies on a six-node cluster,
# three zones of two nodes (cluster.sh XPC_NODES_PER_ZONE=2): the three
# specs that skip themselves on the three-node cluster run here. Single-
# stack; writes test/results/conformance-trafficdist.md.
.PHONY: conformance-trafficdist
conformance-trafficdist: image manifests e2e-bin
	XPC_NODES="a b c d e f" XPC_NODES_PER_ZONE=2 CONFORMANCE_STACKS=single \
	  CONFORMANCE_FOCUS=test/cluster/trafficdist.focus CONFORMANCE_RESULT=test/results/conformance-trafficdist.md \
	  timeout 60m bash test/cluster/conformance.sh '$(VERSION)' '$(IMAGE)' full
