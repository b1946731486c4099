# Oracle suite (issue 10): crossproxy's Windows data plane held to kube-proxy's
# winkernel proxier (k8s.io/kubernetes v1.37.2), both in one Windows test
# binary run under Wine. See test/winoracle/README.md.
# test-winoracle: build (cached in ~/.cache/crossproxy/winoracle) and run; it
# fails on a difference the allowlist does not name, a stale allowlist entry,
# or a test/results/winoracle.md that differs from this run.
# UPDATE=1 rewrites test/results/winoracle.md instead of checking it.

TEST_SUITES += test-winoracle

.PHONY: test-winoracle

WINORACLE_WINE := $(CURDIR)/test/wine/wine-exec
WINORACLE_TIMEOUT ?= 300

test-winoracle:
	@bin=$$(bash test/winoracle/build.sh) && cd test/winoracle && \
	  timeout $(WINORACLE_TIMEOUT) $(WINORACLE_WINE) "$$bin" -test.count=1 -test.v -test.timeout=$(WINORACLE_TIMEOUT)s $(if $(UPDATE),-update)
