#!/usr/bin/env bash
# Installs what the PostgreSQL tests need (the store's tests on the second engine, and the
# daemon on PostgreSQL): Debian's PostgreSQL server programs. The tests start their own cluster
# in a temp dir (initdb as the `postgres` user, a free loopback port) and stop it at exit; the
# package's own service is not used. Idempotent: does nothing when initdb is already there.
# Runs as root (CI), or `sudo bash scripts/ci/postgres-deps.sh`. The tests run it themselves
# when PostgreSQL is missing and they are root or have passwordless sudo
# (crates/store/src/test_postgres.rs).
set -euo pipefail

have_initdb() { compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }

if have_initdb; then
    echo "postgres-deps: $(ls /usr/lib/postgresql/*/bin/initdb | tail -n 1) is installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "postgres-deps: installing PostgreSQL needs root: sudo bash $0" >&2
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "postgres-deps: no apt-get here; install PostgreSQL 15 or later so that /usr/lib/postgresql/N/bin/initdb exists" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second checkout's tests, unattended upgrades) may hold dpkg's lock: wait.
APT=(apt-get -o DPkg::Lock::Timeout=600)
"${APT[@]}" update -qq
# policy-rc.d may refuse to start the package's own cluster; that is fine, the tests start theirs.
"${APT[@]}" install -y -qq --no-install-recommends postgresql

have_initdb || {
    echo "postgres-deps: initdb still missing after apt-get install" >&2
    exit 1
}
echo "postgres-deps: installed $(ls /usr/lib/postgresql/*/bin/initdb | tail -n 1)"
