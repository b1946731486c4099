# Installer and release targets (included by the top Makefile).
#   make msi       dist/crossproxy-VERSION-x64.msi (wixl), from the windows/amd64 binary
#   make sign      msi + exes signed with osslsigncode: make sign CERT=cert.pem KEY=key.pem
#   make dist      the four binaries, the MSI, manifests with IMAGE and VERSION filled
#                  in, the systemd files, install.ps1 and SHA256SUMS, into dist/
#   make manifests the rendered Kubernetes manifests only
# CERT/KEY may also be given to msi and dist: the exe is then signed before it
# goes into the MSI, and the MSI after it is built.

IMAGE ?= ghcr.io/crossproxy/crossproxy:$(VERSION)
WINDOWS_IMAGE ?= $(IMAGE)
CERT ?=
KEY ?=
SIGN_NAME ?= crossproxy
# MSI versions are three numbers: a vX.Y.Z tag gives them; between tags the
# commit count makes every build an upgrade of the one before.
MSI_VERSION ?= $(shell v='$(VERSION)'; if [[ $$v =~ ^v?([0-9]+\.[0-9]+\.[0-9]+) ]]; then echo $${BASH_REMATCH[1]}; \
  else echo 0.0.$$(git rev-list --count HEAD 2>/dev/null || echo 0); fi)

WIN_EXE := dist/crossproxy-$(VERSION)-windows-amd64.exe
MSI := dist/crossproxy-$(VERSION)-x64.msi
MSI_STAGE := bin/msi-stage

.PHONY: msi sign dist manifests test-installer installer-force
installer-force:

# The windows/amd64 binary, the same command as `make cross` for one platform.
$(WIN_EXE): installer-force
	@mkdir -p dist
	GOOS=windows GOARCH=amd64 $(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/crossproxy

# installer/msi.sh does the staging, wixl, the attribute fix and signing.
msi: $(WIN_EXE)
	CERT='$(CERT)' KEY='$(KEY)' SIGN_NAME='$(SIGN_NAME)' \
	  bash installer/msi.sh $(WIN_EXE) installer/windows/config.yaml $(MSI_VERSION) $(MSI_STAGE) $(MSI)

sign:
	@if [ -z '$(CERT)' ] || [ -z '$(KEY)' ]; then echo "sign: give CERT=cert.pem KEY=key.pem (PEM certificate and private key)" >&2; exit 2; fi
	$(MAKE) --no-print-directory msi CERT='$(CERT)' KEY='$(KEY)'
	@set -e; for f in dist/crossproxy-$(VERSION)-windows-arm64.exe; do \
	  [ -f $$f ] || continue; \
	  CERT='$(CERT)' KEY='$(KEY)' SIGN_NAME='$(SIGN_NAME)' bash installer/sign.sh $$f; done

manifests:
	@mkdir -p dist
	bash installer/render.sh '$(IMAGE)' '$(WINDOWS_IMAGE)' '$(VERSION)' dist

dist: cross
	$(MAKE) --no-print-directory msi
	@if [ -n '$(CERT)' ]; then CERT='$(CERT)' KEY='$(KEY)' SIGN_NAME='$(SIGN_NAME)' \
	  bash installer/sign.sh dist/crossproxy-$(VERSION)-windows-arm64.exe; fi
	$(MAKE) --no-print-directory manifests
	cp installer/windows/install.ps1 dist/crossproxy-$(VERSION)-install.ps1
	tar -C installer/linux -cf - --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
	  crossproxy.service crossproxy.env config.yaml | gzip -n > dist/crossproxy-$(VERSION)-linux-systemd.tar.gz
	cd dist && rm -f SHA256SUMS && find . -maxdepth 1 -type f -name 'crossproxy-$(VERSION)-*' -printf '%f\n' | LC_ALL=C sort \
	  | xargs sha256sum > SHA256SUMS && cat SHA256SUMS

TEST_SUITES += test-installer

# Manifest invariants (pure), the MSI's tables, install/upgrade/uninstall under
# Wine, install.ps1 syntax and argument building, signing, the systemd unit.
test-installer: apiserver
	bash installer/test.sh
