#!/usr/bin/env bash
# Puts a headless browser where the playground's browser tests look: nothing to do when chromium and chromedriver are
# on PATH; else Debian's chromium and chromium-driver packages are installed (the tests never download a browser).
# Needs apt-get, and root or password-less sudo.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-chromium: no apt-get on this machine; install chromium and its chromedriver and put them on PATH" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "install-chromium: installing Debian's chromium packages needs root or password-less sudo" >&2
  exit 1
fi
install() {
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
}
if ! install; then
  "${as_root[@]}" apt-get update -qq
  install || { echo "install-chromium: apt-get install chromium chromium-driver failed" >&2; exit 1; }
fi
chromium --version
