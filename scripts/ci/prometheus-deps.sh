#!/usr/bin/env bash
# Installs what the metrics tests (tests/it/daemon/metrics.rs) need: Debian's prometheus, a
# real Prometheus the tests start in a temp dir (its own config, its own storage, a free
# loopback port) to scrape a daemon's /metrics and answer PromQL. Idempotent: does nothing
# when prometheus is already there. Runs as root (CI), or `sudo bash scripts/ci/prometheus-deps.sh`.
# The metrics tests run it themselves when prometheus is missing and they are root or have
# passwordless sudo (tests/it/deps.rs).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ]; }

if have prometheus; then
    echo "prometheus-deps: prometheus is installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "prometheus-deps: installing prometheus needs root: sudo bash $0" >&2
    exit 1
fi
if ! have apt-get; then
    echo "prometheus-deps: no apt-get here; install Prometheus 2.x so that \`prometheus\` is on PATH" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second checkout's tests, unattended upgrades) may hold dpkg's lock: wait.
APT=(apt-get -o DPkg::Lock::Timeout=600)
"${APT[@]}" update -qq
# The package's own service is not wanted (policy-rc.d may refuse to start it; that is fine):
# the tests start their own instances.
"${APT[@]}" install -y -qq --no-install-recommends prometheus

have prometheus || {
    echo "prometheus-deps: prometheus still missing after apt-get install" >&2
    exit 1
}
echo "prometheus-deps: installed $(prometheus --version 2>&1 | head -n 1)"
