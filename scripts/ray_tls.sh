#!/bin/sh
# Usage: sh scripts/ray_tls.sh ADDRESS...   (on the launching machine, before `ray up cluster.yaml`)
# Ray's TLS for a cluster: a CA of its own (~/.ray/raygroups-tls/ca, kept on this machine only) and one
# certificate it signs that names every node's address (the addresses Ray's processes connect to, as in
# cluster.yaml's head_ip and worker_ips) and 127.0.0.1, in ~/.ray/raygroups-tls/cluster, which cluster.yaml's
# file_mounts copies to every node. Ray's clients on this machine use the same certificate. Idempotent: an
# existing CA is kept; the cluster certificate is made again (for a changed address list).
set -e
[ $# -ge 1 ] || { echo "usage: sh scripts/ray_tls.sh ADDRESS... (every node's address)" >&2; exit 2; }
base="${RAYGROUPS_TLS_DIR:-$HOME/.ray/raygroups-tls}"
mkdir -p "$base/ca" "$base/cluster"
chmod 700 "$base/ca"
if [ ! -s "$base/ca/ca.key" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=raygroups-cluster-ca" \
    -keyout "$base/ca/ca.key" -out "$base/ca/ca.crt" 2>/dev/null
fi
san="IP:127.0.0.1,DNS:localhost"
for a in "$@"; do
  case "$a" in
    *[!0-9.:a-fA-F]*) san="$san,DNS:$a" ;;
    *) san="$san,IP:$a" ;;
  esac
done
work=$(mktemp -d)
openssl req -newkey rsa:2048 -nodes -subj "/CN=raygroups-node" -keyout "$base/cluster/node.key" \
  -out "$work/node.csr" 2>/dev/null
printf 'subjectAltName=%s\n' "$san" > "$work/san.ext"
openssl x509 -req -in "$work/node.csr" -CA "$base/ca/ca.crt" -CAkey "$base/ca/ca.key" -CAcreateserial \
  -days 3650 -extfile "$work/san.ext" -out "$base/cluster/node.crt" 2>/dev/null
rm -rf "$work"
cp "$base/ca/ca.crt" "$base/cluster/ca.crt"
chmod 600 "$base/cluster/node.key"
echo "raygroups: Ray TLS certificate for $* in $base/cluster (CA kept in $base/ca)"
