# crossproxy build, test and release entry points.
# Suites owned by one area live in test/mk/*.mk (and installer/*.mk) and
# append themselves to TEST_SUITES / BENCH_SUITES; `make test` runs every suite
# in the order of TEST_ORDER below.

SHELL := /bin/bash
GO ?= go
MODULE := github.com/crossproxy/crossproxy
# VERSION is the one source of the version: the binaries (crossproxy
# version), the image's org.opencontainers.image.version, the chart's version
# and appVersion, the MSI and the release directory all read it from here.
# `make release VERSION=vX.Y.Z` gives it; otherwise it is the release tag
# (vX.Y.Z) on HEAD, vX.Y.Z-N-gHASH after one, and dev on a tree with no
# release tag (never a chart's placeholder). Expanded once per make run (:=),
# so the binaries and the image of one run carry the same version even when a
# commit lands mid-build.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --match 'v[0-9]*.[0-9]*.[0-9]*' --dirty 2>/dev/null || echo dev)
endif
COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# Every time a build writes (the image's created, the archives' file times) is
# the commit's, so two builds of one commit are the same bytes.
ifeq ($(origin SOURCE_DATE_EPOCH),undefined)
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
endif
export SOURCE_DATE_EPOCH
# -buildid= and GOFLAGS' -trimpath: the same commit links the same bytes in
# any checkout (make release's reproducibility, test/release/README.md).
LDFLAGS := -s -w -buildid= -X main.version=$(VERSION) -X main.commit=$(COMMIT)
PLATFORMS := linux/amd64 linux/arm64 windows/amd64 windows/arm64
export CGO_ENABLED ?= 0
# Every go command make runs, and every script it calls, compiles with
# -trimpath, set here once: the build cache keys a compile on it, so a
# package graph compiled by one suite (vet, cross, the e2e binaries, the
# Kubernetes components under test/) is reused by the next only when all of
# them use it (test/results/make-test.md). The release binaries need it too,
# to be the same from any checkout. The machine's own GOFLAGS (go env) are
# kept.
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell $(GO) env GOFLAGS)) -trimpath)

# Suites run by `make test`. Fragments append to these.
TEST_SUITES := vet lint cross fuzz-short test-unit
BENCH_SUITES := bench-core

# The order `make test` runs its suites in: fastest first (warm caches), so a
# quick failure shows early; README.md's table lists them in this order. A
# suite a fragment adds that is not named here runs after these.
TEST_ORDER := vet lint cross fuzz-short test-unit test-helm test-windows test-e2e-linux \
  test-installer test-release test-winoracle test-integration test-integration-oldest test-demo test-kernel test-cluster \
  test-conformance-short

.PHONY: all build cross vet lint setup test test-unit fuzz-short bench bench-core clean demo
all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/crossproxy ./cmd/crossproxy

cross:
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; [ $$os = windows ] && ext=.exe; \
	  out=dist/crossproxy-$(VERSION)-$$os-$$arch$$ext; \
	  echo "build $$out"; \
	  GOOS=$$os GOARCH=$$arch $(GO) build -ldflags '$(LDFLAGS)' -o $$out ./cmd/crossproxy; \
	done

# The build tags of the root module's suites under test/ (its //go:build
# lines; test/cluster, test/images and test/winoracle are modules of their
# own): vet compiles those files too, so the e2e, integration and installer
# code is vetted. Those suites run on Linux only. No file is excluded by one
# of these tags, so the one tagged linux run vets the untagged build too.
VET_TAGS := e2e,integration,installer

# vet needs every dependency compiled; with GOFLAGS' -trimpath those are the
# compiles build, cross and the suites share, so each graph is compiled once
# per OS and architecture (test/results/make-test.md). Windows is vetted as released and, for
# cmd/crossproxy only (its dependencies are already compiled), as the Wine
# service test builds it (-tags fakehns). Only on amd64: no file of the
# module depends on the architecture, so vetting arm64 would check the same
# files again at the price of compiling its test graph (the fake clientset
# among it) once more; `make cross` builds the arm64 binaries.
vet:
	$(GO) vet -tags $(VET_TAGS) ./...
	GOOS=windows GOARCH=amd64 $(GO) vet ./...
	GOOS=windows GOARCH=amd64 $(GO) vet -tags fakehns ./cmd/...

# staticcheck (honnef.co/go/tools), pinned in tools/staticcheck/go.mod, a
# module of its own so the root go.mod never depends on it; built once per
# version into ~/.cache/crossproxy. One run checks the build configurations
# vet checks, as a matrix, so code one OS or tag uses is not reported unused
# in another: linux with the suites' tags, windows with the fake HNS of the
# Wine service test (-tags fakehns) and without it (the release build).
STATICCHECK_VERSION := $(shell awk '$$1 == "honnef.co/go/tools" {print $$2}' tools/staticcheck/go.mod)
STATICCHECK := $(HOME)/.cache/crossproxy/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	cd tools/staticcheck && $(GO) build -o $@ honnef.co/go/tools/cmd/staticcheck

# staticcheck type-checks dependencies from the export data `go list -export`
# compiles; with GOFLAGS' -trimpath those are the compiles vet left in the
# build cache, not a second copy of the linux and windows graphs.
# staticcheck keys its cache on the packages' build IDs, which -trimpath makes
# the same in every checkout, while the findings it caches carry absolute
# paths: one checkout's cached findings, replayed in another, no longer merge
# across the matrix (a function used on linux only came out unused). So each
# checkout gets a cache of its own, the four used last are kept.
LINT_CACHES := $(HOME)/.cache/crossproxy/staticcheck-cache

lint: $(STATICCHECK)
	@cache=$(LINT_CACHES)/$$(printf '%s' '$(CURDIR)' | sha256sum | cut -c1-16); mkdir -p $$cache; touch $$cache; \
	  ls -dt $(LINT_CACHES)/*/ | tail -n +5 | xargs -r rm -rf; \
	  echo "staticcheck (cache $$cache)"; \
	  printf '%s\n' 'linux: -tags=$(VET_TAGS)' 'windows: GOOS=windows -tags=fakehns' 'winrelease: GOOS=windows' \
	  | STATICCHECK_CACHE=$$cache $(STATICCHECK) -matrix ./...

# Unit tests of every package under the race detector (it needs cgo and gcc,
# which test/setup-host.sh installs). The core's coverage, taken from the same
# run, is a gate: below CORE_COVERAGE_MIN percent the target fails.
CORE_COVERAGE_MIN ?= 85
test-unit:
	@mkdir -p bin
	CGO_ENABLED=1 $(GO) test -race -count=1 -coverprofile=bin/cover-unit.out ./...
	@$(GO) tool cover -func=bin/cover-unit.out | awk '/^total:/{print "unit coverage (all packages): " $$3}'
	@{ head -1 bin/cover-unit.out; grep '^$(MODULE)/core/' bin/cover-unit.out; } > bin/cover-core.out
	@$(GO) tool cover -func=bin/cover-core.out | awk -v min=$(CORE_COVERAGE_MIN) '/^total:/{ \
	  printf "core coverage: %s (gate: at least %s%%)\n", $$3, min; \
	  if ($$3 + 0 < min) { print "test-unit: core coverage is below the gate"; exit 1 } }'

# A bounded fuzz run of the core; the seed corpus lives in core/testdata/fuzz.
# The budget is an execution count, not a duration: with a duration, Go 1.26's
# fuzz coordinator can report its own deadline as a failure ("context deadline
# exceeded") when a starved worker is mid-call on a loaded machine
# (go.dev/issue/75804, fixed in Go 1.27). A count has no deadline to race; on a
# busy machine the run only takes longer (its time: test/results/make-test.md).
# Override with FUZZTIME=60s or FUZZTIME=100000x.
FUZZTIME ?= 40000x
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzCompute$$' -fuzztime $(FUZZTIME) ./core/

bench-core:
	$(GO) test -run '^$$' -bench . -benchmem ./core/ ./platform/

bench:
	@set -e; for t in $(BENCH_SUITES); do echo "== $$t"; $(MAKE) --no-print-directory $$t; done

include $(sort $(wildcard test/mk/*.mk)) $(sort $(wildcard installer/*.mk))

# setup installs what the suites of `make test` need on the host (Debian
# packages with apt-get, as root; idempotent): test/setup-host.sh for the
# unit, Wine, installer, kernel and demo suites, test/cluster/setup.sh for the
# cluster suites. `make test` runs it first, so no suite installs anything.
setup:
	bash test/setup-host.sh
	bash test/cluster/setup.sh

# The suites in TEST_ORDER's order, then any other a fragment added.
TEST_RUN := $(filter $(TEST_SUITES),$(TEST_ORDER)) $(filter-out $(TEST_ORDER),$(TEST_SUITES))

# UPSTREAM_PREBUILD=0 leaves the upstream builds to the suites that need them
# (test/upstream.sh says why they start early); their log is bin/upstream.log.
UPSTREAM_PREBUILD ?= 1

test: setup
	@mkdir -p bin
	@up=; if [ '$(UPSTREAM_PREBUILD)' = 1 ]; then \
	  setsid nice -n 10 bash test/upstream.sh > bin/upstream.log 2>&1 & up=$$!; fi; \
	trap '[ -n "$$up" ] && kill -- -$$up 2>/dev/null; true' EXIT; \
	failed=""; passed=0; \
	for t in $(TEST_RUN); do \
	  echo "== make $$t"; start=$$(date +%s); \
	  if $(MAKE) --no-print-directory $$t; then passed=$$((passed+1)); r=ok; else failed="$$failed $$t"; r=FAILED; fi; \
	  echo "== $$t: $$r in $$(( $$(date +%s) - start ))s"; \
	done; \
	n=$$(echo $$failed | wc -w); \
	echo "suites: $$passed passed, $$n failed"; \
	if [ -n "$$failed" ]; then echo "== failed suites:$$failed"; exit 1; fi

clean:
	rm -rf bin dist
