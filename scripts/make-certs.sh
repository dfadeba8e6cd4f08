#!/bin/sh
# Makes what TLS for a farm needs, with openssl:
#   scripts/make-certs.sh DIR NAME...
# DIR/ca.pem      the CA certificate: every client's --tls_ca (workers, agents, CLI)
# DIR/ca.key      the CA's key: keep it off the farm (it signs server certificates)
# DIR/server.pem  the server's certificate for NAME... (host names or IP
# DIR/server.key  addresses the clients dial): --tls_cert and --tls_key
# An existing CA in DIR is reused, so a new server certificate keeps every
# board's trust file valid. See docs/security.md.
set -eu
if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NAME... (host names or IP addresses of the server)" >&2
  exit 2
fi
dir=$1
shift
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj /CN=tunefarm-ca \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
fi
san=""
for n in "$@"; do
  case $n in
    *[!0-9.]*) case $n in *:*) entry="IP:$n" ;; *) entry="DNS:$n" ;; esac ;;
    *) entry="IP:$n" ;;
  esac
  san="${san:+$san,}$entry"
done
openssl req -newkey rsa:3072 -nodes -subj "/CN=$1" -keyout "$dir/server.key" \
  -out "$dir/server.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$dir/server.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
  -CAcreateserial -days 825 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
rm -f "$dir/server.csr" "$dir/server.ext"
chmod 644 "$dir/ca.pem" "$dir/server.pem"
echo "$dir/ca.pem: give to every client (--tls_ca); $dir/server.pem and server.key: the server's --tls_cert and --tls_key (for $san)"
