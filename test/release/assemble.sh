#!/usr/bin/env bash
# assemble.sh check VERSION
#   fails unless VERSION is a release version (vX.Y.Z or vX.Y.Z-PRE) with a
#   section in installer/CHANGELOG.md (a pre-release takes [Unreleased]).
# assemble.sh VERSION CHART_VERSION OUT_DIR
#   after `make dist image` for VERSION: copies the release's files from dist/
#   into OUT_DIR (fresh), packages the chart (version CHART_VERSION,
#   appVersion VERSION), writes a CycloneDX SBOM per binary, the image's index
#   digest, the release notes and SHA256SUMS over all of it.
# Every timestamp is SOURCE_DATE_EPOCH (the commit's time, set by the
# Makefile), so two runs on one commit write the same bytes, but for the MSI
# (test/release/README.md says why).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
changelog="$root/installer/CHANGELOG.md"

# notes VERSION prints the CHANGELOG section of VERSION, without its heading.
notes() {
	local v=${1#v} section
	section=$v
	[[ $v == *-* ]] && section=Unreleased
	awk -v s="## [$section]" 'index($0, s) == 1 { on = 1; next } on && /^## \[/ { exit } on' "$changelog"
}

check() {
	local v=$1
	if ! [[ $v =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]]; then
		echo "release: VERSION=$v is not a release version (vX.Y.Z or vX.Y.Z-rc.N); give make release VERSION=vX.Y.Z" >&2
		exit 2
	fi
	local s=${v#v}
	[[ $s == *-* ]] && s=Unreleased
	if ! grep -q "^## \[$s\]" "$changelog"; then
		echo "release: installer/CHANGELOG.md has no section \"## [$s]\" for $v" >&2
		exit 1
	fi
}

if [ "${1:-}" = check ]; then
	check "$2"
	exit 0
fi
version=$1 chart_version=$2 out=$(realpath -m "$3")
check "$version"
: "${SOURCE_DATE_EPOCH:?set by the Makefile: the commit time}"
dist="$root/dist"
p="crossproxy-$version"
rm -rf "$out" && mkdir -p "$out"
for f in linux-amd64 linux-arm64 windows-amd64.exe windows-arm64.exe x64.msi install.ps1 \
	linux.yaml windows.yaml linux-systemd.tar.gz image.tar; do
	cp "$dist/$p-$f" "$out/$p-$f"
done
cp -r "$dist/$p-oci" "$out/$p-oci"

# The image index's digest: what a registry serves for the tag, and what the
# pods' imageID names once a node pulled it.
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$out/$p-oci/index.json")
echo "$digest" >"$out/$p-image.digest"

# The chart, from a copy whose file times are the commit's: the archive
# records them, and a checkout's are the time it was made.
helm_bin=$(bash "$root/test/helm/build.sh" helm)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r "$root/installer/helm/crossproxy" "$stage/crossproxy"
find "$stage/crossproxy" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
"$helm_bin" package "$stage/crossproxy" -d "$out" --version "$chart_version" --app-version "$version" >/dev/null
chart="$out/crossproxy-$chart_version.tgz"
[ -f "$chart" ] || { echo "release: helm package wrote no $chart" >&2; exit 1; }

# SBOMs: cyclonedx-gomod's app mode, per GOOS/GOARCH as the binary was built.
# It reads the main module's version from a git tag on HEAD, and cannot open a
# git worktree: it runs on an export of the commit tagged VERSION.
cdx=$(bash "$here/tool.sh" cyclonedx-gomod)
src="$stage/src"
mkdir -p "$src"
git -C "$root" archive HEAD | tar -x -C "$src"
(
	cd "$src"
	export GIT_AUTHOR_DATE="@$SOURCE_DATE_EPOCH" GIT_COMMITTER_DATE="@$SOURCE_DATE_EPOCH"
	git init -q && git add -A && git -c user.name=release -c user.email=release@crossproxy.invalid commit -q -m "$version"
	git tag "$version"
)
for b in linux-amd64 linux-arm64 windows-amd64 windows-arm64; do
	(cd "$src" && GOOS=${b%-*} GOARCH=${b#*-} CGO_ENABLED=0 "$cdx" app -json -licenses -noserial -notimestamp \
		-main cmd/crossproxy -output "$out/$p-$b.cdx.json" . 2>"$stage/cdx.log") ||
		{ cat "$stage/cdx.log" >&2; exit 1; }
done

{
	echo "# crossproxy $version"
	echo
	echo "Image: the index $digest (linux/amd64, linux/arm64, windows/amd64)."
	echo "Chart: crossproxy $chart_version, appVersion $version."
	notes "$version"
} >"$out/RELEASE-NOTES.md"

(cd "$out" && find . -maxdepth 1 -type f ! -name SHA256SUMS -printf '%f\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
echo "release $version in $out (image $digest, chart $chart_version)"
