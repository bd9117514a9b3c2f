#!/usr/bin/env bash
# Make sure a pgbouncer binary is available for the connection-pooler tests (tests/pooler).
#
#   scripts/install-pgbouncer.sh
#
# Does nothing when `pgbouncer` is on PATH or at /usr/sbin/pgbouncer. Otherwise installs Debian's
# package (bookworm: 1.18) with apt-get, as root (or with sudo). Only the binary is wanted: the tests
# start their own pgbouncer on a free local port with a generated configuration, so the package's
# system service is kept from starting while it installs (a policy-rc.d that says no, removed after).
# Prints the pgbouncer it settled on.
set -euo pipefail

found() {
  local candidate
  for candidate in "${PGBOUNCER:-}" "$(command -v pgbouncer || true)" /usr/sbin/pgbouncer; do
    if [[ -n "$candidate" && -x "$candidate" ]]; then
      echo "pgbouncer: $candidate ($("$candidate" --version | head -1))"
      return 0
    fi
  done
  return 1
}

found && exit 0

. "$(dirname "$0")/lib/apt.sh"

# invoke-rc.d asks policy-rc.d before it starts a service; 101 means "not allowed". Leave an existing
# one (a container image's) alone.
policy=/usr/sbin/policy-rc.d
added_policy=""
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\n# scripts/install-pgbouncer.sh: no service starts while it installs\nexit 101\n' \
    | $SUDO tee "$policy" >/dev/null
  $SUDO chmod 755 "$policy"
  added_policy=1
fi
cleanup() { if [[ -n "$added_policy" ]]; then $SUDO rm -f "$policy"; fi; }
trap cleanup EXIT

apt_install pgbouncer

if ! found; then
  echo "install-pgbouncer: no pgbouncer binary after installing the package" >&2
  exit 1
fi
