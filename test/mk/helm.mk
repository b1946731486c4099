# The Helm chart (issue 24), installer/helm/crossproxy.
#   make helm          the Helm CLI (helm.sh/helm/v4, test/helm/go.mod's
#                      version), built once into ~/.cache/crossproxy/helm-VERSION
#   make test-helm     helm lint --strict; the chart's default output equal to
#                      make dist's manifests (installer/render.sh); the values
#                      schema refusing bad values; every value reaching the
#                      pods; promtool check rules + promtool test rules on the
#                      rendered alerts; the dashboard's queries (test/helm)
#   make helm-chart    dist/crossproxy-CHART_VERSION.tgz, appVersion VERSION:
#                      its defaults are the release's image and manifests
#   make test-cluster  (test/mk/cluster.mk) also installs and upgrades with it

.PHONY: helm test-helm helm-chart
TEST_SUITES += test-helm

helm:
	@bash test/helm/build.sh helm >/dev/null

test-helm: helm
	cd test/helm && HELM="$$(bash build.sh helm)" PROMTOOL="$$(bash build.sh promtool)" \
	  GOFLAGS='$(GOFLAGS) -mod=mod' $(GO) test -count=1 -v .

# The chart's version is SemVer: MSI_VERSION (a vX.Y.Z tag, else 0.0.<commit count>).
helm-chart: helm
	@mkdir -p dist
	"$$(bash test/helm/build.sh helm)" package installer/helm/crossproxy -d dist \
	  --version '$(MSI_VERSION)' --app-version '$(VERSION)'
