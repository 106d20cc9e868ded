#!/usr/bin/env bash
# Installs the real Matrix homeserver the Matrix channel's tests run against, under
# target/test-deps (never committed): a Python venv with Synapse (`matrix-synapse` from PyPI,
# wheels only). Each test starts its own Synapse from it in a temp dir on a free loopback port
# (tests/it/matrix/server.rs), with a config Synapse generates itself, so nothing here is
# per-test.
#
# Idempotent: a second run only checks that everything is there and works. Needs python3 (3.10+)
# with venv; reaches PyPI. The tests themselves never reach beyond loopback.
#
# The Matrix tests run it themselves when something is missing or this script is newer than its
# last successful run (tests/it/deps.rs, which reads the `synapse-deps.ok` stamp written last).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEPS=target/test-deps
VENV=$DEPS/synapse-venv
# Pinned so a new release cannot change the server the tests talk to. Its own dependencies come
# with it; the ones it needs pin themselves within Synapse's ranges.
SYNAPSE=matrix-synapse==1.163.2

command -v python3 >/dev/null 2>&1 \
  || { echo "synapse-deps: python3 is not installed; the Matrix tests need python3 (3.10+, with venv)" >&2; exit 1; }
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "synapse-deps: $(python3 --version 2>&1) is too old; Synapse 1.163 needs python3 3.10+" >&2; exit 1; }
mkdir -p "$DEPS"

if [ ! -x "$VENV/bin/python" ]; then
  echo "synapse-deps: creating $VENV"
  python3 -m venv "$VENV" \
    || { echo "synapse-deps: cannot create a venv at $VENV (on Debian: apt-get install python3-venv)" >&2; exit 1; }
fi
# Installed at exactly the pinned version? (`pip freeze` prints `name==version` lines.)
if ! "$VENV/bin/pip" freeze 2>/dev/null | grep -qixF "$SYNAPSE"; then
  echo "synapse-deps: installing $SYNAPSE into $VENV (about a minute)"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary=:all: "$SYNAPSE" \
    || { echo "synapse-deps: pip could not install $SYNAPSE (is PyPI reachable? wheels only: is there one for $(python3 --version 2>&1) on this platform?)" >&2; exit 1; }
fi

for prog in register_new_matrix_user; do
  [ -x "$VENV/bin/$prog" ] \
    || { echo "synapse-deps: $SYNAPSE installed no $VENV/bin/$prog (a changed package?)" >&2; exit 1; }
done

# Quick check that the server generates a config offline; the tests run it for real.
check=$(mktemp -d)
trap 'rm -rf "$check"' EXIT
if ! "$VENV/bin/python" -m synapse.app.homeserver --server-name localhost \
    --config-path "$check/hs.yaml" --data-directory "$check" --generate-config \
    --report-stats=no -H localhost >"$check/out" 2>&1 \
  || ! grep -q '^registration_shared_secret:' "$check/hs.yaml"; then
  cat "$check/out" >&2 || true
  echo "synapse-deps: Synapse from $VENV does not generate a config (output above)" >&2
  exit 1
fi
touch "$DEPS/synapse-deps.ok"
echo "synapse-deps: ready ($VENV, $("$VENV/bin/pip" freeze | grep -i '^matrix-synapse='))"
