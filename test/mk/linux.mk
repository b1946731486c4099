# Linux data plane (platform_linux): packet-level end-to-end suite and the
# nftables benchmarks. Both need root (network namespaces).

TEST_SUITES += test-e2e-linux
BENCH_SUITES += bench-linux

.PHONY: test-e2e-linux bench-linux

# The console gets the test names, results and t.Log lines; bin/e2e.log keeps
# the whole output, and a failing run prints it all: a failing test logs the
# crossproxy log and the ruleset, which the filter would drop. The Makefile's
# GOFLAGS reach the crossproxy build the suite makes, which so shares the
# compiles of vet and cross.
test-e2e-linux:
	@mkdir -p bin
	$(GO) test -tags e2e -count=1 -timeout 10m -v ./test/e2e/ 2>&1 | tee bin/e2e.log | \
	  grep -E '^(=== RUN|--- |\s+--- |PASS|FAIL|ok|\s+\w+_test\.go:)'; rc=$${PIPESTATUS[0]}; \
	  if [ $$rc -ne 0 ]; then echo "== test-e2e-linux failed; its whole output (bin/e2e.log):"; cat bin/e2e.log; fi; exit $$rc

# Full sync at 1k/10k/30k Services x 10 endpoints and one endpoint change at
# 10k (results in test/results/linux.md), then first-packet latency through a
# ClusterIP at 100 and 30k Services.
bench-linux:
	$(GO) test -run '^$$' -bench 'FullSync' -benchtime 3x -timeout 20m ./platform_linux/
	$(GO) test -run '^$$' -bench 'EndpointChange' -benchtime 300x -timeout 20m ./platform_linux/
	$(GO) test -run '^$$' -bench 'FirstPacket' -benchtime 3000x -count 6 -timeout 20m ./platform_linux/
