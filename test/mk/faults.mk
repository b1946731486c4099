# Fault suite (issue 40): crossproxy, and kube-proxy v1.37.2 in nftables mode
# for reference, through the faults operators meet, on the real
# kube-apiserver (test/harness) with the proxy in a lab node's network
# namespace and real connections through its rules (needs root: namespaces
# prefixed xpf-). Results: test/results/faults.md (the FIGURE lines of -v).
#
# test-faults-short is in `make test`: crossproxy only, the loops shortened
# to seconds (the decoder-to-core fuzz target's seeds run in test-unit). test-faults is the full
# form, both proxies (kube-proxy from `make cluster-bin`).

TEST_SUITES += test-faults-short
TEST_ORDER += test-faults-short
# vet and lint compile the suite too (its files carry the faults tag).
VET_TAGS := $(VET_TAGS),faults

FAULTS_FUZZTIME ?= 200000x

.PHONY: test-faults test-faults-short

# The fuzz target's seeds run in test-unit (go test runs them as tests);
# fuzzing proper is in test-faults: its instrumented build alone took
# 153 s in a warm make test (go test -fuzz, 2026-12-07), which would put
# the short form past its 3 minutes.
test-faults-short: apiserver
	$(GO) test -tags faults -short -count=1 -p 1 -v -timeout 10m ./test/faults/

test-faults: apiserver cluster-bin
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeToCore$$' -fuzztime $(FAULTS_FUZZTIME) ./platform/kube/
	$(GO) test -tags faults -count=1 -p 1 -v -timeout 40m ./test/faults/
