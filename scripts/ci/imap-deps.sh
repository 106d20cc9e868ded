#!/usr/bin/env bash
# Installs what the inbox's tests (tests/it/inbox.rs) need: Debian's dovecot-imapd, a real IMAP
# server the tests start unprivileged instances of (each in a temp dir, on a free loopback
# port). Idempotent: does nothing when dovecot is already there. Runs as root (CI), or
# `sudo bash scripts/ci/imap-deps.sh`. The inbox tests run it themselves when dovecot is
# missing and they are root or have passwordless sudo (tests/it/deps.rs).
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

if have dovecot && have doveadm; then
    echo "imap-deps: dovecot is installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "imap-deps: installing dovecot-imapd needs root: sudo bash $0" >&2
    exit 1
fi
if ! have apt-get; then
    echo "imap-deps: no apt-get here; install Dovecot (its imap server and doveadm) so that" \
        "\`dovecot\` and \`doveadm\` are on PATH or in /usr/sbin" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# Another apt-get (a second checkout's tests, unattended upgrades) may hold dpkg's lock: wait.
APT=(apt-get -o DPkg::Lock::Timeout=600)
"${APT[@]}" update -qq
# The package's own service is not wanted (policy-rc.d may refuse to start it; that is fine):
# the tests start their own instances.
"${APT[@]}" install -y -qq --no-install-recommends dovecot-imapd

have dovecot && have doveadm || {
    echo "imap-deps: dovecot or doveadm still missing after apt-get install" >&2
    exit 1
}
echo "imap-deps: installed $(dovecot --version 2>/dev/null || /usr/sbin/dovecot --version)"
