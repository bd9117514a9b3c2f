#!/usr/bin/env bash
# Install what the browser tests (tests/browser, marker `browser`) need: Debian's headless Chromium
# and the Playwright, Pillow and axe-playwright-python (axe-core) packages pinned in
# requirements-dev.txt. Idempotent and quick when everything is there. Playwright's own browser
# download is never used (`playwright install` fetches from outside the package registries); the
# tests drive /usr/bin/chromium instead.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  . scripts/lib/apt.sh
  # Fonts so that screenshots show text, not boxes.
  apt_install chromium fonts-dejavu-core
fi
if ! .venv/bin/python -c "import playwright.sync_api, PIL, axe_playwright_python" 2>/dev/null; then
  pins=$(grep -E '^(playwright|pillow|axe-playwright-python)==' requirements-dev.txt || true)
  # shellcheck disable=SC2086
  .venv/bin/python -m pip install --quiet --disable-pip-version-check ${pins:-playwright pillow axe-playwright-python}
fi
