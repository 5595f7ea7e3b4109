#!/usr/bin/env bash
# Local stand-ins for the public images docker-compose.yml names, for machines that cannot pull
# them: a Debian bookworm base made by debootstrap from this machine's own apt mirror (trusting
# this machine's CA certificates, so apt and pip work inside builds), then one small image per
# public image. Each is built once and kept: an existing tag is never rebuilt.
set -euo pipefail
cd "$(dirname "$0")"

BASE=mcplet-standin/debian:bookworm

have() { docker image inspect "$1" >/dev/null 2>&1; }

mirror() {  # the machine's Debian mirror (deb822 or one-line sources), never a hard-coded host
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
  } | grep -v security | head -1
}

if ! have "$BASE"; then
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; }
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  echo "stand-in $BASE: debootstrap --variant=minbase bookworm from the apt mirror of this machine"
  debootstrap --variant=minbase bookworm "$root" "$(mirror)" >/dev/null
  # A file of its own: Debian's ca-certificates, pulled in by later installs, rewrites the
  # system bundle from its own list.
  mkdir -p "$root/etc/ssl"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/machine-ca-certificates.crt"
  printf '[global]\ncert = /etc/ssl/machine-ca-certificates.crt\n' >"$root/etc/pip.conf"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$BASE" >/dev/null
fi

for name in python postgres redis mailpit; do
  tag=$(sed -n 's/^# tag: //p' "$name/Dockerfile")
  have "$tag" || { echo "stand-in $tag"; docker build -q -t "$tag" "$name" >/dev/null; }
done
