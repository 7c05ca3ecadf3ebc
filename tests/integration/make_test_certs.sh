#!/usr/bin/env bash
# Throwaway PKI for the security tests, made at test time (no key is
# committed): a CA, echod's certificate for localhost/127.0.0.1, client
# certificates with CN profiler-bot and trainer, and a profiler-bot
# certificate from an untrusted CA.
#
# Usage: make_test_certs.sh DIR
set -euo pipefail
dir="$1"
mkdir -p "${dir}"
cd "${dir}"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }

# ca NAME CN: a self-signed CA.
ca() {
  key "$1"
  openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 2 -out "$1.crt" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign
}

# leaf NAME CN CA EXTENSIONS: a certificate signed by CA.
leaf() {
  key "$1"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial \
    -days 2 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

ca ca echo-test-ca
ca rogue-ca echo-rogue-ca
leaf server localhost ca "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf profiler profiler-bot ca "extendedKeyUsage=clientAuth"
leaf trainer trainer ca "subjectAltName=DNS:trainer.jobs.svc
extendedKeyUsage=clientAuth"
leaf rogue profiler-bot rogue-ca "extendedKeyUsage=clientAuth"
