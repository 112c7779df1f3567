#!/usr/bin/env bash
# Makes a local certificate authority and the certificates a dgpu cluster needs for TLS, with the
# openssl command-line tool. For development, tests and small clusters; a production cluster
# would rather issue these from its own CA (the file names and the names inside are what matter).
#
#   scripts/make-dev-certs.sh [-o DIR] [-d DAYS] [--scheduler NAME]... [--agent ID]... [--client NAME]...
#
#   -o DIR            where the files go (default ./certs); a CA already there is reused, so
#                     certificates added later are signed by the same CA
#   -d DAYS           validity of the certificates (default 825)
#   --scheduler NAME  a scheduler's host name or IP address (repeatable). One certificate,
#                     scheduler.crt, names them all (plus localhost and 127.0.0.1): it serves
#                     HTTPS and gRPC, and is the client certificate of the standby link
#                     (replication.tls) and of etcd (ha.etcd_tls).
#   --agent ID        an agent's agent.id (repeatable): agent-ID.crt, whose CN and DNS name are
#                     ID. A scheduler that asks for client certificates lets it register as ID only.
#   --client NAME     a client certificate for other tools, e.g. etcd's peers (repeatable)
#
# Output: ca.crt ca.key scheduler.crt scheduler.key agent-ID.crt agent-ID.key client-NAME.*
# Keys are written 0600.
set -euo pipefail

out=certs
days=825
schedulers=()
agents=()
clients=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    -d) days="$2"; shift 2 ;;
    --scheduler) schedulers+=("$2"); shift 2 ;;
    --agent) agents+=("$2"); shift 2 ;;
    --client) clients+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-dev-certs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
command -v openssl >/dev/null || { echo "make-dev-certs.sh: openssl is not installed" >&2; exit 1; }
valid_name='^[A-Za-z0-9._-]+$'
for n in "${agents[@]}" "${clients[@]}"; do
  [[ "$n" =~ $valid_name ]] || { echo "make-dev-certs.sh: '$n' is not a valid name" >&2; exit 2; }
done

mkdir -p "$out"
umask 077
cd "$out"

if [[ ! -f ca.key ]]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 \
    -days "$days" -subj "/CN=dgpu development CA" -keyout ca.key -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
  chmod 644 ca.crt
  echo "made ca.crt"
fi

# issue NAME CN SANS EKU: NAME.key and NAME.crt signed by the CA.
issue() {
  local name="$1" cn="$2" sans="$3" eku="$4"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -sha256 \
    -subj "/CN=$cn" -keyout "$name.key" -out "$name.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$sans" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 \
    -days "$days" -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  chmod 644 "$name.crt"
  echo "made $name.crt ($sans)"
}

san_of() {
  if [[ "$1" =~ ^[0-9.]+$ || "$1" == *:* ]]; then echo "IP:$1"; else echo "DNS:$1"; fi
}

sans="DNS:localhost,IP:127.0.0.1"
for s in "${schedulers[@]}"; do sans+=",$(san_of "$s")"; done
first="${schedulers[0]:-localhost}"
issue scheduler "$first" "$sans" "serverAuth,clientAuth"
for a in "${agents[@]}"; do issue "agent-$a" "$a" "DNS:$a" "clientAuth"; done
for c in "${clients[@]}"; do issue "client-$c" "$c" "DNS:$c" "clientAuth"; done
