#!/usr/bin/env bash
# Installs what the dashboard's real-browser tests (tests/it/web.rs) need: Debian's chromium and
# chromium-driver. Idempotent: does nothing when both are already there. Runs as root (CI).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    echo "browser-deps: chromium and chromedriver are installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "browser-deps: run as root to install chromium and chromium-driver (apt-get)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium chromium-driver

have chromium && have chromedriver || {
    echo "browser-deps: chromium or chromedriver still missing after apt-get install" >&2
    exit 1
}
echo "browser-deps: installed $(chromedriver --version | head -n 1)"
