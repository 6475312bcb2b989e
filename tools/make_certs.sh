#!/usr/bin/env bash
# Makes a certificate authority and certificates for a Strata cluster with
# openssl (Debian package openssl):
#   ca.pem / ca.key          the cluster's CA (--tls-ca everywhere)
#   server.pem / server.key  for strata-ps, strata-coordinator, strata-worker
#                            (serverAuth and clientAuth: the daemons are also
#                            each other's clients under mutual TLS)
#   client.pem / client.key  for tools and training code (clientAuth)
# Usage: tools/make_certs.sh DIR [--days N] [--san DNS:name,IP:addr,...]
# The server certificate names localhost, 127.0.0.1 and ::1, plus --san.
# Keys are ECDSA P-256, unencrypted, mode 0600. Existing files are replaced.
set -euo pipefail

usage() { echo "usage: $0 DIR [--days N] [--san DNS:name,IP:addr,...]" >&2; exit 2; }
[ $# -ge 1 ] || usage
dir=$1; shift
days=10950  # 30 years
extra_san=""
while [ $# -gt 0 ]; do
  case "$1" in
    --days) days=$2; shift 2 ;;
    --san) extra_san=",$2"; shift 2 ;;
    *) usage ;;
  esac
done
command -v openssl >/dev/null || { echo "$0: openssl is not installed (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# CA.
key ca.key
openssl req -x509 -new -key ca.key -sha256 -days "$days" -subj "/CN=Strata cluster CA" \
  -addext "basicConstraints=critical,CA:TRUE" \
  -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem

# sign NAME CN EXTENSIONS
sign() {
  local name=$1 cn=$2 ext=$3
  key "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr"
  printf '%b' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -sha256 -days "$days" -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}
sign server strata-server "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1${extra_san}\n"
sign client strata-client "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n"
rm -f ca.srl
chmod 0644 ca.pem server.pem client.pem
echo "certificates in $(pwd): ca.pem server.pem/.key client.pem/.key (valid $days days)" >&2
