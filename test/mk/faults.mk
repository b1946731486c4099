# Fault suite (issue 40): crossproxy, and kube-proxy v1.37.2 in nftables mode
# for reference, through the faults operators meet, on the real
# kube-apiserver (test/harness) with the proxy in a lab node's network
# namespace and real connections through its rules (needs root: namespaces
# prefixed xpf-). Results: test/results/faults.md (the FIGURE lines of -v).
#
# test-faults-short is in `make test`: crossproxy only, the loops shortened
# to seconds, and the decoder-to-core fuzz target. test-faults is the full
# form, both proxies (kube-proxy from `make cluster-bin`).

TEST_SUITES += test-faults-short
TEST_ORDER += test-faults-short
# vet and lint compile the suite too (its files carry the faults tag).
VET_TAGS := $(VET_TAGS),faults

FAULTS_FUZZTIME ?= 20000x

.PHONY: test-faults test-faults-short

test-faults-short: apiserver
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeToCore$$' -fuzztime $(FAULTS_FUZZTIME) ./platform/kube/
	$(GO) test -tags faults -short -count=1 -p 1 -v -timeout 10m ./test/faults/

test-faults: apiserver cluster-bin
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeToCore$$' -fuzztime 200000x ./platform/kube/
	$(GO) test -tags faults -count=1 -p 1 -v -timeout 40m ./test/faults/
