#!/usr/bin/env bash
# Puts promtool, which the alert-rule tests need, where they look: nothing to do when it is on PATH already,
# else Debian's prometheus package is downloaded and only its promtool unpacked into .cache/tools/bin (no service
# is installed or started). Needs apt-get, and root or password-less sudo when the package lists must be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.cache/tools/bin

if command -v promtool >/dev/null 2>&1 || [ -x "$DEST/promtool" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-promtool: no apt-get on this machine; install Prometheus's promtool and put it on PATH" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"   # apt downloads as its own user where it can

download() { (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); }
if ! download; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo -n apt-get update -qq
  else
    echo "install-promtool: the package lists need 'apt-get update', which needs root or password-less sudo" >&2
    exit 1
  fi
  download || { echo "install-promtool: apt-get download prometheus failed" >&2; exit 1; }
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$DEST"
cp "$work/root/usr/bin/promtool" "$DEST/promtool"
"$DEST/promtool" --version | head -n 1
