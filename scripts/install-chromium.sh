#!/usr/bin/env bash
# Puts a headless browser where the playground's browser tests look: nothing to do when chromium and chromedriver are
# on PATH; else Debian's chromium and chromium-driver packages are installed (the tests never download a browser).
# Needs apt-get, and root or password-less sudo.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" install-chromium chromium chromium-driver
chromium --version
