#!/usr/bin/env bash
# build.sh builds the computenetwork.dll and vmcompute.dll stand-ins (mingw),
# caches them under $HNSEMU_CACHE (default $HOME/.cache/crossproxy/hnsemu)
# keyed by a hash of their sources, this script and the compiler's version,
# and installs them into the emulator's own Wine prefix
# ($HNSEMU_CACHE/wineprefix, made as test/wine/wine-exec makes the test
# prefix, with its bcryptprimitives.dll shim). The default test prefix
# (test/.cache/wine) never gets them: TestHCNBackendFailsCleanly relies on
# hcn failing there. Prints the prefix's path on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${HNSEMU_CACHE:-$HOME/.cache/crossproxy/hnsemu}
cc=x86_64-w64-mingw32-gcc
key=$( (cat "$here"/*.c "$here"/*.h "$here/build.sh"; $cc --version | head -1) | sha256sum | cut -c1-16)
out=$cache/dll-$key
mkdir -p "$cache"
exec 9>"$cache/build.lock"
flock 9
if [ ! -s "$out/vmcompute.dll" ]; then
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  for d in computenetwork vmcompute; do
    $cc -O2 -Wall -Wextra -Werror -shared -o "$tmp/$d.dll" "$here/$d.c" "$here/emuclient.c" -lws2_32 -lole32 -Wl,--kill-at
  done
  rm -rf "$out" && mv "$tmp" "$out"
  echo "hnsemu: built DLLs in $out" >&2
fi
prefix=$cache/wineprefix
# wine-exec creates the prefix and the ProcessPrng shim when missing.
WINEPREFIX=$prefix "$root/test/wine/wine-exec" cmd /c exit 0 >/dev/null 2>&1 || true
sys=$prefix/drive_c/windows/system32
[ -s "$sys/bcryptprimitives.dll" ] || { echo "hnsemu: prefix $prefix was not set up" >&2; exit 1; }
for d in computenetwork vmcompute; do
  if ! cmp -s "$out/$d.dll" "$sys/$d.dll"; then
    cp "$out/$d.dll" "$sys/$d.dll.tmp" && mv "$sys/$d.dll.tmp" "$sys/$d.dll"
  fi
done
echo "$prefix"
