# Kubernetes integration (issue 4): the real kube-apiserver harness, the
# integration suite against it, and the informer/latency benchmark.

TEST_SUITES += test-integration

.PHONY: apiserver test-integration

# apiserver builds kube-apiserver and etcd into ~/.cache/crossproxy/apiserver-bin (cached, outside the clone).
apiserver:
	bash test/apiserver/build.sh

# test-integration runs crossproxy against the real apiserver (needs root:
# it creates network namespaces prefixed xpk-), and the uninstall container's
# decision against it (cmd/crossproxy, issue 37; no namespaces, 5 s). The Makefile's GOFLAGS reach
# the crossproxy build the suite makes, which so shares the compiles of vet and cross.
test-integration: apiserver
	$(GO) test -tags integration -count=1 -p 1 -timeout 20m ./test/harness/ ./test/integration/
	$(GO) test -tags integration -count=1 -run 'AgainstAPIServer' ./cmd/crossproxy/

# The oldest supported API server (test/apiserver/OLDEST, README.md's
# supported range; issue 36): the same suite against it, built the same way
# and cached by version. Adds about 2 minutes to a warm make test; cold, its
# build 10-15 minutes, started early by test/upstream.sh.
TEST_SUITES += test-integration-oldest
OLDEST_K8S := $(shell cat test/apiserver/OLDEST)
.PHONY: apiserver-oldest test-integration-oldest
apiserver-oldest:
	bash test/apiserver/build.sh $(OLDEST_K8S)

test-integration-oldest: apiserver-oldest
	CROSSPROXY_APISERVER_BIN_DIR=$${XDG_CACHE_HOME:-$$HOME/.cache}/crossproxy/apiserver-bin-$(OLDEST_K8S) CROSSPROXY_EXPECT_KUBERNETES=$(OLDEST_K8S) \
	  $(GO) test -tags integration -count=1 -p 1 -timeout 20m ./test/integration/

BENCH_SUITES += bench-k8s
.PHONY: bench-k8s

# bench-k8s: informer path with 10k Services / 100k endpoints against the real
# apiserver, and network programming latency (API change to packets through
# the kernel's rules) under a stream of changes, at the default
# --min-sync-period (1 s) and at 10 ms (BENCH_MIN_SYNC_PERIOD). Results: test/results/k8s.md.
bench-k8s: apiserver
	$(GO) test -tags integration -count=1 -run '^$$' -bench 'InformerPath|NetworkProgramming' -benchtime 1x -timeout 30m ./test/integration/
	BENCH_MIN_SYNC_PERIOD=10ms $(GO) test -tags integration -count=1 -run '^$$' -bench NetworkProgramming -benchtime 1x -timeout 30m ./test/integration/

BENCH_SUITES += bench-repair
.PHONY: bench-repair

# bench-repair: how long crossproxy and kube-proxy v1.37.2 (nftables) take to
# make a ClusterIP and a NodePort answer again after `nft flush ruleset` and
# after their table is deleted, with BENCH_SERVICES Services (default 10,000)
# through the real apiserver; BENCH_REPAIR_TIMEOUT (seconds, default 300) ends the
# wait. Results: test/results/linux.md.
bench-repair: apiserver cluster-bin
	$(GO) test -tags integration -count=1 -run '^$$' -bench 'RepairAfterForeignChange' -benchtime 1x -timeout 60m ./test/integration/
