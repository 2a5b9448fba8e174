#!/usr/bin/env bash
# Makes sure a PostgreSQL server accepts trusted connections for user
# postgres on 127.0.0.1:5432, as the test suite expects. Starts the local
# cluster when it is stopped; installs PostgreSQL from Debian's packages when
# it is missing. Idempotent; run as root (CI) or with sudo.
set -euo pipefail

ready() { pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; }
trusted() { psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; }

if command -v pg_isready >/dev/null && ready && trusted; then
  exit 0
fi

if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
  echo "ensure-postgres: installing PostgreSQL" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql postgresql-client >/dev/null
fi

version=$(ls /etc/postgresql | sort -V | tail -n 1)
hba=/etc/postgresql/$version/main/pg_hba.conf
# Trust local TCP connections (tests create and drop their own databases).
if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
  sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
fi
if ready; then
  pg_ctlcluster --skip-systemctl-redirect "$version" main reload
else
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
fi
for _ in $(seq 1 30); do
  ready && trusted && exit 0
  sleep 1
done
echo "ensure-postgres: PostgreSQL did not become ready on 127.0.0.1:5432" >&2
exit 1
