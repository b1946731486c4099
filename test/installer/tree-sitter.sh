#!/usr/bin/env bash
# tree-sitter and its PowerShell grammar, from npm, for TestInstallPS1Parses
# (test/installer/ps_test.go). Installed once into a cache outside the clone,
# keyed by both versions, so fresh clones (CI) reuse it.
#   tree-sitter.sh dir       print the directory (whether installed or not)
#   tree-sitter.sh install   install it there unless it is already complete
# test/setup-host.sh runs `install`; the test only reads the directory.
set -euo pipefail
tree_sitter=0.25.1
ps_grammar=0.26.4
dir="${XDG_CACHE_HOME:-$HOME/.cache}/crossproxy/tree-sitter-$tree_sitter-powershell-$ps_grammar"
case "${1:-}" in
dir) echo "$dir" ;;
install)
  if [ -f "$dir/.complete" ]; then
    exit 0
  fi
  mkdir -p "$(dirname "$dir")"
  # Install beside the final place and move it there whole, so an
  # interrupted install never looks complete.
  tmp=$(mktemp -d "$dir.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  # tree-sitter builds a native module; node-gyp downloads Node's headers
  # unless told where they are. Debian's nodejs ships them in /usr/include/node,
  # so use those (a machine without network access to nodejs.org has no other).
  if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node.h ]; then
    export npm_config_nodedir=/usr
  fi
  (cd "$tmp" && npm install --no-audit --no-fund --silent --no-save \
    "tree-sitter@$tree_sitter" "tree-sitter-powershell@$ps_grammar")
  touch "$tmp/.complete"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "tree-sitter: installed into $dir"
  ;;
*) echo "usage: $0 dir|install" >&2; exit 2 ;;
esac
