#!/usr/bin/env bash
# Generate a throw-away CA and a server certificate for running the webhook over
# HTTPS on this machine (and a client certificate for trying mTLS).
#
#   scripts/dev-cert.sh [dir]          default dir: var/dev-certs
#
# Writes ca.crt ca.key tls.crt tls.key client.crt client.key into dir, named like
# the keys of the Kubernetes TLS Secret cert-manager makes, so the same
# TLS_CERT_FILE=dir/tls.crt TLS_KEY_FILE=dir/tls.key work in both places.
# The server certificate names localhost, 127.0.0.1 and ::1, plus any names in
# DEV_CERT_EXTRA_DNS (comma-separated, e.g. volcano-injector.gpustack.svc).
# Existing files are replaced. Dev only: the CA key sits next to the certificates.
set -euo pipefail

dir="${1:-var/dev-certs}"
days="${DEV_CERT_DAYS:-30}"
mkdir -p "$dir"
umask 077

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

san="DNS:localhost,IP:127.0.0.1,IP:::1"
if [[ -n "${DEV_CERT_EXTRA_DNS:-}" ]]; then
  IFS=',' read -r -a extra <<<"$DEV_CERT_EXTRA_DNS"
  for name in "${extra[@]}"; do
    [[ -n "$name" ]] && san="$san,DNS:$name"
  done
fi

# A serial and subject unique to this run, so two runs give two distinct CAs
# (the rotation test relies on it).
stamp="$(date -u +%Y%m%dT%H%M%SZ)-$$-$RANDOM"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/ca.key" -out "$work/ca.crt" -days "$days" \
  -subj "/O=volcano-injector dev/CN=volcano-injector dev CA $stamp" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

sign() { # name, extensions
  local name="$1" ext="$2"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$work/$name.key" -out "$work/$name.csr" \
    -subj "/O=volcano-injector dev/CN=$name $stamp" 2>/dev/null
  printf '%s\n' "$ext" >"$work/$name.ext"
  openssl x509 -req -in "$work/$name.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" \
    -CAcreateserial -out "$work/$name.crt" -days "$days" -sha256 \
    -extfile "$work/$name.ext" 2>/dev/null
}

sign tls "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san"
sign client "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"

# Readable by the user who runs the server; keys stay private to them.
chmod 644 "$work/ca.crt" "$work/tls.crt" "$work/client.crt"
chmod 600 "$work/ca.key" "$work/tls.key" "$work/client.key"
# Move into place key first, certificate last, each with an atomic rename, so a
# running server that polls the files sees the old pair or the new pair and at
# worst a new key with the old certificate for a moment (it then keeps its loaded
# certificate and retries).
for f in ca.key ca.crt client.key client.crt tls.key tls.crt; do
  mv -f "$work/$f" "$dir/$f"
done
echo "wrote $dir/{ca,tls,client}.{crt,key} (server names: $san)"
