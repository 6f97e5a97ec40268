#!/usr/bin/env bash
# Idempotent, as root: install PostgreSQL if missing, start a throwaway cluster on 127.0.0.1:${PGPORT:-55432}
# (trust auth, loopback only) and create the test database. Prints the SQLAlchemy URL on the last line.
set -euo pipefail
PGPORT="${PGPORT:-55432}"
PGDATA="${PGDATA:-/tmp/looplift-pgdata}"
log() { echo "[setup_postgres] $*" >&2; }
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  log "installing postgresql"
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
PGBIN="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)"
as_pg() { su postgres -s /bin/bash -c "$*"; }
if ! as_pg "$PGBIN/pg_isready -h 127.0.0.1 -p $PGPORT" >/dev/null 2>&1; then
  if [ ! -f "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA"
    as_pg "$PGBIN/initdb -D $PGDATA -A trust -U postgres" >&2
  fi
  as_pg "$PGBIN/pg_ctl -D $PGDATA -o \"-h 127.0.0.1 -p $PGPORT -k /tmp\" -l $PGDATA/server.log -w start" >&2
fi
as_pg "$PGBIN/psql -h 127.0.0.1 -p $PGPORT -U postgres -tAc \"SELECT 1 FROM pg_database WHERE datname='looplift_test'\"" \
  | grep -q 1 || as_pg "$PGBIN/createdb -h 127.0.0.1 -p $PGPORT -U postgres looplift_test"
log "PostgreSQL answers on 127.0.0.1:$PGPORT"
echo "postgresql+psycopg://postgres@127.0.0.1:$PGPORT/looplift_test"
