# explain and demo (issue 7). `make demo` is the README's first command: on a
# fresh Linux machine, as root, it installs the host packages, builds
# crossproxy and the test kube-apiserver (cached after the first time), and
# runs the lab in test/demo (network namespaces prefixed xpd-). KEEP=1 keeps
# the lab running until Ctrl-C. test-demo runs it non-interactively and checks
# what it printed, so CI proves `make demo` works.

TEST_SUITES += test-demo

.PHONY: demo demo-bin test-demo

demo-bin: build
	$(GO) build -o bin/xpd-echo ./test/demo/echo
	$(GO) build -o bin/xpd-demo ./test/demo

demo:
	@bash test/setup-host.sh
	@bash test/apiserver/build.sh
	@$(MAKE) --no-print-directory demo-bin
	bin/xpd-demo $(if $(filter 1,$(KEEP)),-keep)

test-demo:
	@mkdir -p bin
	set -o pipefail; $(MAKE) --no-print-directory demo KEEP=0 | tee bin/demo.out
	grep -q '^demo: all [0-9]* checks passed' bin/demo.out
	grep -q 'FIRST MISMATCH (layer 2, published): targetPort http matches no port in slice web-broken-v4' bin/demo.out
	grep -q 'starting crossproxy on each node (kube mode)' bin/demo.out
	@if ip netns list | grep -q '^xpd-'; then echo "test-demo: namespaces left behind"; ip netns list | grep '^xpd-'; exit 1; fi
	@echo "test-demo: passed"
