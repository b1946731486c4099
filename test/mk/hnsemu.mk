# HNS emulator below hcsshim (issue 49, first slice): the release
# crossproxy.exe under Wine with computenetwork.dll and vmcompute.dll
# stand-ins that forward to an emulated HNS (test/hnsemu/README.md).
# test-hnsemu builds the stand-ins (cached in ~/.cache/crossproxy/hnsemu,
# installed in that directory's own Wine prefix, never in test/.cache/wine),
# builds crossproxy.exe as the release does and the hcn probe, and runs
# TestReleaseBinaryOnEmulatedHNS (L2Bridge), TestReleaseBinaryOverlay (flannel
# VXLAN on three Windows Server profiles) and TestHCNProbe. Not in `make test`
# yet. Warm: 55-67 s; cold (no DLL cache, no prefix, empty Go build cache): 455 s
# on this 2-core machine under load, most of it the crossproxy.exe build
# (test/hnsemu/README.md, Timings).

.PHONY: test-hnsemu

HNSEMU_TIMEOUT ?= 900

test-hnsemu:
	$(GO) test -tags hnsemu -count=1 -timeout $(HNSEMU_TIMEOUT)s -v ./test/hnsemu/

# test-hnsemu-oracle: the binary-level oracle (test/hnsemu/kubeproxy): the real
# kube-proxy.exe v1.37.2 (built unmodified by test/hnsemu/kubeproxy/build.sh,
# cached in ~/.cache/crossproxy/kube-proxy-windows) and the release
# crossproxy.exe, each on its own emulated node, against one real
# kube-apiserver; what each programs into HNS is compared field by field
# (L2Bridge and flannel VXLAN, Windows Server 2022). Warm: about 40 s; cold it
# adds the kube-apiserver build (10-15 min) and kube-proxy.exe's (2.5 min with
# the Kubernetes packages compiled). Not in `make test`.
.PHONY: test-hnsemu-oracle
test-hnsemu-oracle: apiserver
	bash test/hnsemu/kubeproxy/build.sh >/dev/null
	$(GO) test -tags hnsemu -count=1 -timeout $(HNSEMU_TIMEOUT)s -v ./test/hnsemu/kubeproxy/
