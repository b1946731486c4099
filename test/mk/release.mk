# The release (issue 36): one VERSION, everything a release needs, the same
# bytes from two builds of one commit. See test/release/README.md.
#   make release VERSION=vX.Y.Z   dist/release/vX.Y.Z/: the binaries (Linux and
#                Windows), the image index (linux/amd64, linux/arm64,
#                windows/amd64) as an OCI layout and as a tar, its digest, the
#                chart crossproxy-X.Y.Z.tgz (appVersion vX.Y.Z, the default
#                image tag), the plain manifests, the MSI, install.ps1, the
#                systemd files, a CycloneDX SBOM per binary, RELEASE-NOTES.md
#                (installer/CHANGELOG.md's section) and SHA256SUMS
#   make release-push REGISTRY=host[:port][/path] [PLAIN_HTTP=1]
#                pushes that release's image as REGISTRY/crossproxy:vX.Y.Z and
#                its chart as oci://REGISTRY/charts/crossproxy:X.Y.Z
#   make test-release  two releases of HEAD from two fresh clones: the same
#                image digest and SHA256SUMS (but for the MSI line), and the
#                one version in the chart, the image, the binaries, the MSI
#                and the SBOMs; a build without VERSION says dev or
#                vX.Y.Z-N-gHASH
# The chart's version is SemVer without the v: MSI_VERSION (installer.mk)
# for a vX.Y.Z release, X.Y.Z-PRE for a pre-release.

RELEASE_DIR = dist/release/$(VERSION)
CHART_VERSION = $(patsubst v%,%,$(VERSION))

.PHONY: release release-push test-release
TEST_SUITES += test-release

release:
	@bash test/release/assemble.sh check '$(VERSION)'
	$(MAKE) --no-print-directory dist image VERSION='$(VERSION)'
	bash test/release/assemble.sh '$(VERSION)' '$(CHART_VERSION)' '$(RELEASE_DIR)'

release-push:
	@if [ -z '$(REGISTRY)' ]; then echo "release-push: give REGISTRY=host[:port][/path]" >&2; exit 2; fi
	@[ -f $(RELEASE_DIR)/SHA256SUMS ] || { echo "release-push: no $(RELEASE_DIR): make release VERSION=$(VERSION) first" >&2; exit 1; }
	PLAIN_HTTP='$(PLAIN_HTTP)' bash test/release/push.sh '$(RELEASE_DIR)' '$(VERSION)' '$(REGISTRY)/crossproxy' '$(REGISTRY)/charts'

test-release:
	bash test/release/test.sh

# make test-cluster's TestRelease (test/cluster/release_test.go) installs the
# first of these from a registry on the host and upgrades to the second: a
# release candidate and its release, as an operator would.
CLUSTER_RELEASES := v0.1.0-rc.1 v0.1.0
.PHONY: cluster-releases
# A release already in dist/release of this very commit, from a clean tree,
# is reused (make test's test-release leaves its v0.1.0 there, proved the
# same bytes as a second build); any other is built.
cluster-releases:
	@set -e; for v in $(CLUSTER_RELEASES); do \
	  if [ -z "$$(git status --porcelain)" ] && [ -f dist/release/$$v/SHA256SUMS ] && \
	    dist/release/$$v/crossproxy-$$v-linux-amd64 version 2>/dev/null | grep -x 'commit: $(COMMIT)' >/dev/null; then \
	    echo "cluster-releases: dist/release/$$v is of $(COMMIT), reused"; \
	  else $(MAKE) --no-print-directory release VERSION=$$v; fi; done
	bash test/release/tool.sh registry >/dev/null
	bash test/release/tool.sh crane >/dev/null
test-cluster: cluster-releases
test-cluster: export XP_RELEASES = $(addprefix $(CURDIR)/dist/release/,$(CLUSTER_RELEASES))
