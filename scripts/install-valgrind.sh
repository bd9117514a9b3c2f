#!/usr/bin/env bash
# Make sure valgrind is available: the instruction budget's test (tests/test_instructions_budget.py) and
# scripts/bench-instructions count instructions with its callgrind tool. Without it the budget test would
# be skipped, and the budget not held.
#
#   scripts/install-valgrind.sh
#
# Does nothing when `valgrind` is on PATH. Otherwise installs Debian's package with apt-get, as root (or
# with sudo). Prints the valgrind it settled on.
set -euo pipefail

if ! command -v valgrind >/dev/null; then
  . "$(dirname "$0")/lib/apt.sh"
  apt_install valgrind
fi
command -v valgrind >/dev/null || { echo "install-valgrind: no valgrind after installing the package" >&2; exit 1; }
echo "valgrind: $(command -v valgrind) ($(valgrind --version))"
