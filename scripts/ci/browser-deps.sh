#!/usr/bin/env bash
# Installs what the dashboard's real-browser tests (tests/it/web.rs) need: Debian's chromium and
# chromium-driver. Idempotent: does nothing when both are already there. Runs as root (CI), or
# `sudo bash scripts/ci/browser-deps.sh`. The browser tests run it themselves when the browser
# is missing and they are root or have passwordless sudo (tests/it/deps.rs).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    echo "browser-deps: chromium and chromedriver are installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "browser-deps: installing chromium and chromium-driver needs root: sudo bash $0" >&2
    exit 1
fi
if ! have apt-get; then
    echo "browser-deps: no apt-get here; install Chromium and its matching ChromeDriver so that" \
        "\`chromium\` and \`chromedriver\` are on PATH" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second checkout's tests, unattended upgrades) may hold dpkg's lock: wait.
APT=(apt-get -o DPkg::Lock::Timeout=600)
"${APT[@]}" update -qq
"${APT[@]}" install -y -qq --no-install-recommends chromium chromium-driver

have chromium && have chromedriver || {
    echo "browser-deps: chromium or chromedriver still missing after apt-get install" >&2
    exit 1
}
echo "browser-deps: installed $(chromedriver --version | head -n 1)"
