#!/usr/bin/env bash
# Puts Prometheus's two tools where the tests look: promtool (metrics pages, alert rules and their unit tests) and
# prometheus (a real server scraping Triton and the shim in an integration test). Nothing to do for a tool on PATH
# already; else Debian's prometheus package is downloaded and only those binaries are unpacked into
# .cache/tools/bin (no service is installed or started). Needs apt-get, and root or password-less sudo when the
# package lists must be fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.cache/tools/bin
TOOLS="prometheus promtool"

missing=""
for tool in $TOOLS; do
  command -v "$tool" >/dev/null 2>&1 || [ -x "$DEST/$tool" ] || missing="$missing $tool"
done
if [ -z "$missing" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-prometheus-tools: no apt-get on this machine; install Prometheus ($missing ) and put it on PATH" >&2
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
    echo "install-prometheus-tools: the package lists need 'apt-get update', which needs root or password-less sudo" >&2
    exit 1
  fi
  download || { echo "install-prometheus-tools: apt-get download prometheus failed" >&2; exit 1; }
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$DEST"
for tool in $missing; do
  cp "$work/root/usr/bin/$tool" "$DEST/$tool"
  "$DEST/$tool" --version 2>&1 | head -n 1
done
