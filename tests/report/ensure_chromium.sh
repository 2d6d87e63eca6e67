#!/usr/bin/env bash
# Install Debian's headless browser for the report browser test (tests/report/test_browser.py).
# CI runs this before `make test`; locally the test skips, with this script's name, when chromium
# is missing. Needs root (or sudo) and network to the Debian mirror; takes a minute or two.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  echo "chromium already installed: $(chromium --version 2>/dev/null | head -1)"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-dejavu-core >/dev/null
chromium --version
