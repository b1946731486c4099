#!/usr/bin/env bash
# matrix-before.sh [COMMIT]: runs today's layout x release matrix
# (platform_windows TestLayoutMatrix, its fake HNS, layouts and profiles)
# against the Windows backend of COMMIT (default c3f182d, before issue 48's
# fixes), in a temporary worktree, and prints the first failing step of each
# cell. That commit's backend has no Config.CNISource, so the CNI
# configuration is given at start; SKIP_BOOT=1 also skips the boot steps, so
# the later findings show (test/results/windows.md, "The layout matrix").
set -euo pipefail
commit="${1:-c3f182d}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$tmp" >/dev/null 2>&1 || rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp" "$commit"
for f in fake.go fake_helpers_test.go profiles_test.go layouts_test.go matrix_test.go; do
	cp "$root/platform_windows/$f" "$tmp/platform_windows/"
done
python3 - "$tmp/platform_windows/matrix_test.go" "${SKIP_BOOT:-0}" <<'PY'
import sys
p, skip = sys.argv[1], sys.argv[2] == "1"
s = open(p).read()
a = s[s.index("\t\tCNISource: func() (*CNIConfig, IPAM) {"):s.index("\t}\n\tif h := lay.host")]
s = s.replace(a, "\t\tCNI: lay.cni,\n")
if skip:
    b = s[s.index("\t// 1. Boot: only External"):s.index("\t// 3. The CNI starts")]
    s = s.replace(b, "\tn.installCNI()\n\tif lay.refused != \"\" {\n\t\tn.startCNI()\n\t\tif err := n.sync(s, full()); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), lay.refused) {\n\t\t\tt.Fatalf(\"%s: sync %v, want refused naming %q\", lay.name, err, lay.refused)\n\t\t}\n\t\treturn\n\t}\n\tvar err error\n")
s += "\nconst maxBusyWait = 30 * time.Second\n"
open(p, "w").write(s)
PY
cd "$tmp"
go test -count=1 -run TestLayoutMatrix ./platform_windows/ 2>&1 | grep -E '^\s+--- (FAIL|PASS)|_test.go:[0-9]+: [^t]' | cut -c1-200 || true
