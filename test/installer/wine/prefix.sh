#!/usr/bin/env bash
# prefix.sh DIR: makes DIR a ready 64-bit Wine prefix for crossproxy's Windows
# binaries (idempotent): wineboot, then the bcryptprimitives.dll shim that Go
# binaries need under Wine 8, built with mingw into system32.
set -euo pipefail
prefix=$(realpath -m "$1")
here=$(cd "$(dirname "$0")" && pwd)
export WINEPREFIX=$prefix WINEDEBUG=-all WINEARCH=win64
if [ ! -f "$prefix/system.reg" ]; then
  mkdir -p "$prefix"
  wineboot --init >/dev/null 2>&1
  wineserver -w
fi
dll="$prefix/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ]; then
  x86_64-w64-mingw32-gcc -O2 -shared -o "$dll" "$here/bcryptprimitives.c" -ladvapi32 -Wl,--kill-at
fi
