#!/usr/bin/env bash
# test.sh (make test-release): `make release` twice on HEAD, each in a fresh
# clone at a different path, then
#   - reproducibility: the same image index digest and the same SHA256SUMS,
#     but for the MSI's line; the two MSIs hold the same tables and files and
#     differ only in what wixl draws fresh per build (PackageCode, ProductCode,
#     creation time: test/release/README.md);
#   - one version: the chart's version X.Y.Z and appVersion vX.Y.Z, the image
#     the chart renders by default, the index's org.opencontainers.image.version,
#     `crossproxy version` of the Linux binary (and its commit), the MSI's
#     ProductVersion, the SBOMs' main module version and RELEASE-NOTES.md;
#   - a build that is no release: `make build` without VERSION says dev (no
#     release tag) or vX.Y.Z-N-gHASH (after one), never the chart's version.
# RELEASE_TEST_VERSION (default v0.1.0) must have a CHANGELOG section.
# Prints FIGURE lines with each release's time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
version=${RELEASE_TEST_VERSION:-v0.1.0}
chart_version=${version#v}
commit=$(git -C "$root" rev-parse HEAD)
work=$(mktemp -d /tmp/xp-release-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
t0=$(date +%s)
bad() { echo "test-release: FAIL: $*" >&2; fail=1; }

for i in 1 2; do
	git clone -q --no-checkout "$root" "$work/clone$i"
	git -C "$work/clone$i" checkout -q --detach "$commit"
	start=$(date +%s)
	# The clone's own make, with only what a user passes.
	env -u SOURCE_DATE_EPOCH -u VERSION -u MAKEFLAGS -u MFLAGS make -C "$work/clone$i" --no-print-directory \
		release VERSION="$version" >"$work/release$i.log" 2>&1 ||
		{ tail -30 "$work/release$i.log" >&2; echo "test-release: make release in clone $i failed" >&2; exit 1; }
	echo "test-release: FIGURE make release VERSION=$version (clone $i, warm Go cache): $(($(date +%s) - start))s"
done
d1="$work/clone1/dist/release/$version" d2="$work/clone2/dist/release/$version"
p="crossproxy-$version"

# Reproducibility.
g1=$(cat "$d1/$p-image.digest") g2=$(cat "$d2/$p-image.digest")
[ "$g1" = "$g2" ] || bad "image index digest $g1 vs $g2"
echo "test-release: image index $g1 (both clones)"
if ! diff <(grep -v -- '-x64\.msi$' "$d1/SHA256SUMS") <(grep -v -- '-x64\.msi$' "$d2/SHA256SUMS"); then
	bad "SHA256SUMS differ beyond the MSI line"
fi
n=$(grep -vc -- '-x64\.msi$' "$d1/SHA256SUMS")
echo "test-release: SHA256SUMS: $n of $((n + 1)) files identical in the two clones (the MSI aside)"
msi_tables() { # MSI: every table but the fresh codes, then the cabinet's files
	local t
	for t in $(msiinfo tables "$1" | LC_ALL=C sort); do
		[ "$t" = _SummaryInformation ] && continue
		echo "== $t"
		msiinfo export "$1" "$t" | grep -a -v -P '^ProductCode\t'
	done
	local x
	x=$(mktemp -d)
	(cd "$x" && msiextract "$1" >/dev/null && find . -type f -exec sha256sum {} + | LC_ALL=C sort)
	rm -rf "$x"
}
if ! diff <(msi_tables "$d1/$p-x64.msi") <(msi_tables "$d2/$p-x64.msi") >"$work/msi.diff"; then
	cat "$work/msi.diff" >&2
	bad "the MSIs differ beyond PackageCode, ProductCode and their times"
fi
# The summaries differ in the fresh code and the build times, nothing else.
sumdiff=$(diff <(msiinfo suminfo "$d1/$p-x64.msi") <(msiinfo suminfo "$d2/$p-x64.msi") | grep '^[<>] ' || true)
other=$(grep -v -e '^[<>] Revision number (UUID): ' -e '^[<>] Created: ' -e '^[<>] Last saved: ' <<<"$sumdiff" || true)
[ -z "$other" ] || bad "the MSI summaries differ in more than PackageCode and times: $other"
echo "test-release: the MSIs differ (as wixl builds them) in: $(cut -c3- <<<"$sumdiff" | cut -d: -f1 | sort -u | paste -sd, -), and ProductCode"

# One version.
helm_bin=$(bash "$root/test/helm/build.sh" helm)
meta=$("$helm_bin" show chart "$d1/crossproxy-$chart_version.tgz")
grep -qx "version: $chart_version" <<<"$meta" || bad "chart version: $(grep '^version:' <<<"$meta")"
grep -qx "appVersion: $version" <<<"$meta" || bad "chart appVersion: $(grep '^appVersion:' <<<"$meta")"
rendered=$("$helm_bin" template crossproxy "$d1/crossproxy-$chart_version.tgz" -n kube-system --set apiServer.host=192.0.2.10 --set apiServer.port=6443)
images=$(grep -oP '^\s+image: "?\K[^"\s]+' <<<"$rendered" | sort -u | tr '\n' ' ')
want_image="ghcr.io/crossproxy/crossproxy:$version"
[ "$images" = "$want_image " ] || bad "the chart's default images: $images, want $want_image"
label=$(python3 -c 'import json,sys
idx=json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"].split(":")[1]
print(json.load(open(sys.argv[1]+"/blobs/sha256/"+idx))["annotations"]["org.opencontainers.image.version"])' "$d1/$p-oci")
[ "$label" = "$version" ] || bad "image org.opencontainers.image.version $label"
out=$("$d1/$p-linux-amd64" version)
[ "$(sed -n 1p <<<"$out")" = "crossproxy $version linux/amd64" ] || bad "crossproxy version: $out"
[ "$(sed -n 2p <<<"$out")" = "commit: $commit" ] || bad "crossproxy version's commit: $out"
grep -q "^go: go1\." <<<"$out" || bad "crossproxy version has no Go version: $out"
pv=$(msiinfo export "$d1/$p-x64.msi" Property | grep -oP '^ProductVersion\t\K[0-9.]+')
[ "$pv" = "${chart_version%%-*}" ] || bad "MSI ProductVersion $pv"
for f in "$d1"/*.cdx.json; do
	sv=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["component"]["version"])' "$f")
	[ "$sv" = "$version" ] || bad "$(basename "$f"): main module version $sv"
done
grep -q "^# crossproxy $version\$" "$d1/RELEASE-NOTES.md" && [ "$(wc -l <"$d1/RELEASE-NOTES.md")" -gt 5 ] ||
	bad "RELEASE-NOTES.md lacks the CHANGELOG section"
echo "test-release: one version: chart $chart_version/appVersion $version, image label $label, binary $(sed -n 1p <<<"$out"), MSI $pv"

# Not a release: no tag gives dev, a tag before HEAD vX.Y.Z-N-gHASH.
c=$work/clone1
env -u VERSION -u MAKEFLAGS -u MFLAGS make -C "$c" --no-print-directory build >/dev/null
out=$("$c/bin/crossproxy" version | head -1)
[[ $out == "crossproxy dev "* ]] || bad "untagged build says $out, want dev"
git -C "$c" tag v0.0.9 HEAD~1
env -u VERSION -u MAKEFLAGS -u MFLAGS make -C "$c" --no-print-directory build >/dev/null
out2=$("$c/bin/crossproxy" version | head -1)
if ! [[ $out2 =~ ^crossproxy\ v0\.0\.9-1-g([0-9a-f]{7,})\  ]] || [[ $commit != "${BASH_REMATCH[1]}"* ]]; then
	bad "a build one commit after tag v0.0.9 says $out2"
fi
echo "test-release: not a release: \"$out\", after a tag \"$out2\""

# The release is kept for make test-cluster's TestRelease (cluster-releases
# reuses it only from a clean tree at this commit).
if [ $fail = 0 ]; then
	rm -rf "$root/dist/release/$version" && mkdir -p "$root/dist/release" && cp -a "$d1" "$root/dist/release/$version"
fi
echo "test-release: FIGURE whole suite: $(($(date +%s) - t0))s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
if [ $fail != 0 ]; then echo "test-release: FAILED" >&2; exit 1; fi
echo "test-release: 1 passed, 0 failed"
