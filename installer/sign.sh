#!/usr/bin/env bash
# sign.sh FILE...: Authenticode-signs each exe or MSI in place with osslsigncode,
# using the PEM certificate $CERT and private key $KEY (SHA-256, no timestamp:
# add one on a machine that reaches a timestamp server). A signature already
# there is replaced, so signing twice is harmless.
set -euo pipefail
: "${CERT:?CERT must name a PEM certificate}" "${KEY:?KEY must name a PEM private key}"
name=${SIGN_NAME:-crossproxy}
for f in "$@"; do
  [ -f "$f" ] || { echo "sign: $f: no such file" >&2; exit 1; }
  tmp="$f.unsigned.$$"
  if ! osslsigncode remove-signature -in "$f" -out "$tmp" >/dev/null 2>&1; then
    cp "$f" "$tmp"
  fi
  osslsigncode sign -certs "$CERT" -key "$KEY" -h sha256 -n "$name" -in "$tmp" -out "$f.signed.$$" >/dev/null
  mv "$f.signed.$$" "$f"
  rm -f "$tmp"
  echo "signed $f"
done
