# Container images (issue 11), built without a container daemon.
#   make image   the crossproxy image: an OCI index over linux/amd64,
#                linux/arm64 and windows/amd64 (a HostProcess image from
#                scratch), from the `make cross` binaries, tagged $(IMAGE) (the
#                reference the shipped DaemonSets name), written as an OCI
#                layout (dist/crossproxy-VERSION-oci) and as a tar of it for
#                `ctr -n k8s.io images import` (dist/crossproxy-VERSION-image.tar)
#   make push REGISTRY=host[:port]/path   pushes the layout with crane as
#                $(REGISTRY)/crossproxy:$(VERSION) (or PUSH_REF=...)
#   make test-image  the builder's unit tests, then the real image: its index,
#                platforms, entrypoints, the DaemonSet's reference, and the
#                Linux image running under containerd (root)

# With REGISTRY the image, and so the rendered DaemonSets, name the registry.
ifneq ($(REGISTRY),)
IMAGE ?= $(REGISTRY)/crossproxy:$(VERSION)
endif
XP_CACHE ?= $(HOME)/.cache/crossproxy
IMAGE_LAYOUT := dist/crossproxy-$(VERSION)-oci
IMAGE_ARCHIVE := dist/crossproxy-$(VERSION)-image.tar
# The commit time (the top Makefile's SOURCE_DATE_EPOCH), so the same commit
# gives the same digests.
IMAGE_CREATED ?= $(SOURCE_DATE_EPOCH)
OCIIMAGE := bin/ociimage
# crane, pinned with the other release tools in tools/release/go.mod.
CRANE_VERSION := $(shell awk '$$1 == "github.com/google/go-containerregistry" {print $$2}' tools/release/go.mod)
CRANE := $(XP_CACHE)/crane-$(CRANE_VERSION)/crane
PUSH_REF ?= $(REGISTRY)/crossproxy:$(VERSION)

.PHONY: image push crane test-image ociimage-force
ociimage-force:

$(OCIIMAGE): ociimage-force
	@mkdir -p bin
	cd test/images && $(GO) build -o ../../$(OCIIMAGE) ./ociimage

image: cross $(OCIIMAGE)
	$(OCIIMAGE) -ref '$(IMAGE)' -version '$(VERSION)' -created $(IMAGE_CREATED) \
	  -layout $(IMAGE_LAYOUT) -archive $(IMAGE_ARCHIVE) \
	  -image linux/amd64=dist/crossproxy-$(VERSION)-linux-amd64:/usr/local/bin/crossproxy \
	  -image linux/arm64=dist/crossproxy-$(VERSION)-linux-arm64:/usr/local/bin/crossproxy \
	  -image windows/amd64=dist/crossproxy-$(VERSION)-windows-amd64.exe:crossproxy.exe

# crane from tools/release, built once into the cache (test/release/tool.sh).
$(CRANE):
	bash test/release/tool.sh crane >/dev/null

crane: $(CRANE)

push: $(CRANE)
	@if [ -z '$(REGISTRY)' ] && [ '$(origin PUSH_REF)' != command line ]; then echo "push: give REGISTRY=host[:port]/path" >&2; exit 2; fi
	@[ -d $(IMAGE_LAYOUT) ] || $(MAKE) --no-print-directory image
	$(CRANE) push $(CRANE_FLAGS) $(IMAGE_LAYOUT) '$(PUSH_REF)'

test-image: image manifests $(CRANE)
	cd test/images && $(GO) test -count=1 ./...
	bash test/cluster/setup.sh
	cd test/images && XP_IMAGE_LAYOUT=$(CURDIR)/$(IMAGE_LAYOUT) XP_IMAGE_ARCHIVE=$(CURDIR)/$(IMAGE_ARCHIVE) \
	  XP_IMAGE_REF='$(IMAGE)' XP_IMAGE_VERSION='$(VERSION)' XP_CRANE=$(CRANE) \
	  XP_MANIFEST=$(CURDIR)/dist/crossproxy-$(VERSION)-linux.yaml \
	  XP_WINDOWS_MANIFEST=$(CURDIR)/dist/crossproxy-$(VERSION)-windows.yaml \
	  $(GO) test -tags image -count=1 -timeout 5m -v ./imagetest/
