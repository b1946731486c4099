# HNS emulator below hcsshim (issue 49, first slice): the release
# crossproxy.exe under Wine with computenetwork.dll and vmcompute.dll
# stand-ins that forward to an emulated HNS (test/hnsemu/README.md).
# test-hnsemu builds the stand-ins (cached in ~/.cache/crossproxy/hnsemu,
# installed in that directory's own Wine prefix, never in test/.cache/wine),
# builds crossproxy.exe as the release does and the hcn probe, and runs
# TestReleaseBinaryOnEmulatedHNS and TestHCNProbe. Not in `make test` yet.
# Warm: about 30 s; cold (no DLL cache, no prefix, cold Go build cache): see
# test/hnsemu/README.md.

.PHONY: test-hnsemu

HNSEMU_TIMEOUT ?= 900

test-hnsemu:
	$(GO) test -tags hnsemu -count=1 -timeout $(HNSEMU_TIMEOUT)s -v ./test/hnsemu/
