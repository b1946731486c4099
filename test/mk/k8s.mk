# Kubernetes integration (issue 4): the real kube-apiserver harness, the
# integration suite against it, and the informer/latency benchmark.

TEST_SUITES += test-integration

.PHONY: apiserver test-integration

# apiserver builds kube-apiserver and etcd into test/.cache/bin (cached).
apiserver:
	bash test/apiserver/build.sh

# test-integration runs crossproxy against the real apiserver (needs root:
# it creates network namespaces prefixed xpk-).
test-integration: apiserver
	$(GO) test -tags integration -count=1 -p 1 -timeout 20m ./test/harness/ ./test/integration/
