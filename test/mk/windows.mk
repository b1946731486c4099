# Windows data plane suites (platform_windows, the Windows service).
# test-windows: the Windows test binaries of the shared packages run under
# Wine (test/wine/wine-exec), and the service start/stop test under Wine's
# service manager. The vet suite vets the Windows code (with and without
# -tags fakehns); the Makefile's GOFLAGS make these compiles the ones vet and
# cross made.
# bench-windows: the HNS call and time benchmarks against the fake at 30 ms per call.

WINE_EXEC := $(CURDIR)/test/wine/wine-exec
WINDOWS_TEST_PKGS := ./platform_windows/... ./platform/... ./core/...
# Tests skipped under Wine: they use t.TempDir, whose cleanup (os.RemoveAll) fails
# under Wine 8 ("unlinkat: Invalid function": no FileDispositionInformationEx).
# They run on Linux in test-unit; drop a name here once its test uses os.MkdirTemp.
WINE_SKIP := ^(TestLoadNamesFile)$$

TEST_SUITES += test-windows
BENCH_SUITES += bench-windows

.PHONY: test-windows test-windows-unit test-windows-service bench-windows

test-windows: test-windows-unit test-windows-service

test-windows-unit:
	GOOS=windows GOARCH=amd64 $(GO) test -count=1 -skip '$(WINE_SKIP)' -exec $(WINE_EXEC) $(WINDOWS_TEST_PKGS)
	# The uninstall container's cleanup in the Windows binary (issue 37).
	GOOS=windows GOARCH=amd64 $(GO) test -tags fakehns -count=1 -run 'TestCleanupNodeRemovesHNSState|TestInstallRestartsOnNonCrashFailures' -exec $(WINE_EXEC) ./cmd/crossproxy/

test-windows-service:
	bash test/wine/service-test.sh

bench-windows:
	$(GO) test -short -run '^$$' -bench 'InitialProgram2000' -benchtime 1x ./platform_windows/
	$(GO) test -run '^$$' -bench 'EndpointChange' -benchtime 20x ./platform_windows/
