#!/usr/bin/env bash
# Installs the real MCP programs the MCP tests run against, under target/test-deps (never
# committed): a Python venv with `mcp-server-time` (a stdio server) and `mcp` (the official
# Python SDK, whose client drives `hermes-agent mcp`), and `@modelcontextprotocol/server-everything`
# from npm (stdio and streamable HTTP; it has a long-running tool for timeouts).
#
# Idempotent: a second run only checks that everything is there and works. Needs python3 (3.10+)
# with venv, and node (20+) with npm; reaches PyPI and the npm registry.
#
# The MCP tests run it themselves when something is missing or this script is newer than its
# last successful run (tests/it/deps.rs, which reads the `mcp-deps.ok` stamp written last).
set -euo pipefail
cd "$(dirname "$0")/../.."

DEPS=target/test-deps
VENV=$DEPS/venv
NODE=$DEPS/node
# Pinned so a new release cannot change what the tests see.
PY_PACKAGES=(mcp-server-time==2026.10.19 mcp==2.3.0)
NPM_PACKAGE=@modelcontextprotocol/server-everything@2026.8.31

for tool in python3 node npm; do
  command -v "$tool" >/dev/null 2>&1 \
    || { echo "mcp-deps: $tool is not installed; the MCP tests need python3 (3.10+, with venv) and node (20+) with npm" >&2; exit 1; }
done
mkdir -p "$DEPS"

if [ ! -x "$VENV/bin/python" ]; then
  echo "mcp-deps: creating $VENV"
  python3 -m venv "$VENV"
fi
# Installed at exactly the pinned versions? (`pip freeze` prints `name==version` lines.)
pinned=$(IFS='|'; echo "${PY_PACKAGES[*]}")
installed=$("$VENV/bin/pip" freeze 2>/dev/null | grep -cixE "$pinned" || true)
if [ "$installed" != "${#PY_PACKAGES[@]}" ]; then
  echo "mcp-deps: installing ${PY_PACKAGES[*]} into $VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
fi

EVERYTHING=$NODE/node_modules/@modelcontextprotocol/server-everything
if [ ! -f "$EVERYTHING/package.json" ] \
  || ! grep -q "\"version\": \"${NPM_PACKAGE##*@}\"" "$EVERYTHING/package.json"; then
  echo "mcp-deps: installing $NPM_PACKAGE into $NODE"
  mkdir -p "$NODE"
  [ -f "$NODE/package.json" ] || echo '{"private": true}' >"$NODE/package.json"
  npm install --prefix "$NODE" --no-audit --no-fund --loglevel=error "$NPM_PACKAGE"
fi

# Quick checks that what was installed can run here; the tests run the servers for real.
"$VENV/bin/python" -c 'import mcp.client.stdio, mcp_server_time' \
  || { echo "mcp-deps: the Python packages do not import" >&2; exit 1; }
node -e "process.exit(Number(process.versions.node.split('.')[0]) >= 20 ? 0 : 1)" \
  || { echo "mcp-deps: node $(node --version) is too old for server-everything (needs 20+)" >&2; exit 1; }
touch "$DEPS/mcp-deps.ok"
echo "mcp-deps: ready ($VENV, $NODE; node $(node --version))"
