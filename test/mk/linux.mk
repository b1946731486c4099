# Linux data plane (platform_linux): packet-level end-to-end suite and the
# nftables benchmarks. Both need root (network namespaces).

TEST_SUITES += test-e2e-linux
BENCH_SUITES += bench-linux

.PHONY: test-e2e-linux bench-linux

test-e2e-linux:
	$(GO) test -tags e2e -count=1 -timeout 10m -v ./test/e2e/ 2>&1 | grep -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok|\s+linux_test|\s+lab_test)' ; exit $${PIPESTATUS[0]}

# Full sync at 1k/10k/30k Services x 10 endpoints and one endpoint change at
# 10k (results in test/results/linux.md), then first-packet latency through a
# ClusterIP at 100 and 30k Services.
bench-linux:
	$(GO) test -run '^$$' -bench 'FullSync' -benchtime 3x -timeout 20m ./platform_linux/
	$(GO) test -run '^$$' -bench 'EndpointChange' -benchtime 300x -timeout 20m ./platform_linux/
	$(GO) test -run '^$$' -bench 'FirstPacket' -benchtime 3000x -count 3 -timeout 20m ./platform_linux/
