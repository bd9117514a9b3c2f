#!/usr/bin/env bash
# Make sure Prometheus and promtool are available for the monitoring tests (tests/monitoring).
#
#   scripts/install-prometheus.sh
#
# Does nothing when `prometheus` and `promtool` are already on PATH. Otherwise installs Debian's
# `prometheus` package (it ships both binaries), which needs root (CI runs as root). The package's
# maintainer scripts would start a Prometheus service that listens on :9090 for good; the tests
# start their own on a free port, so a policy-rc.d that refuses every start is in place during the
# install and removed afterwards (only if this script put it there). Prints the versions it found.
set -euo pipefail

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  echo "prometheus: $(command -v prometheus) ($(prometheus --version 2>&1 | head -1))"
  exit 0
fi

if [[ "$(id -u)" != "0" ]]; then
  echo "install-prometheus: prometheus/promtool not found and not root: apt-get install prometheus" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt_get=(apt-get -o DPkg::Lock::Timeout=600 -q -y)
# A fresh machine has no package lists yet; refresh them only when the package is unknown.
if ! apt-cache show prometheus >/dev/null 2>&1; then
  "${apt_get[@]}" update >/dev/null
fi

policy=/usr/sbin/policy-rc.d
placed_policy=false
if [[ ! -e "$policy" ]]; then
  # 101: "action not allowed" (invoke-rc.d's policy interface): no service is started by the install.
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  placed_policy=true
fi
cleanup() { if [[ "$placed_policy" == true ]]; then rm -f "$policy"; fi; }
trap cleanup EXIT

"${apt_get[@]}" install --no-install-recommends prometheus >/dev/null

for tool in prometheus promtool; do
  if ! command -v "$tool" >/dev/null; then
    echo "install-prometheus: $tool is missing after installing the prometheus package" >&2
    exit 1
  fi
done
echo "prometheus: $(command -v prometheus) ($(prometheus --version 2>&1 | head -1))"
