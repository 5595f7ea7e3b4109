#!/bin/sh
# First start on an empty volume: a cluster with the given password and database.
set -e
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" >/tmp/pwfile
  initdb -U postgres -E UTF8 --locale=C.UTF-8 --pwfile=/tmp/pwfile --auth-host=scram-sha-256 --auth-local=trust >/dev/null
  rm /tmp/pwfile
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ -n "$POSTGRES_DB" ] && [ "$POSTGRES_DB" != postgres ]; then
    pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
    createdb -U postgres "$POSTGRES_DB"
    pg_ctl -w stop >/dev/null
  fi
fi
exec "$@"
