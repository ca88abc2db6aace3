#!/usr/bin/env bash
# Puts HAProxy where the tests look (the loopback replica test and `haproxy -c` on the production template): nothing
# to do when haproxy is on PATH or in /usr/sbin; else Debian's haproxy package is installed (no service is started
# where there is no init system). Needs apt-get, and root or password-less sudo.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-haproxy: no apt-get on this machine; install HAProxy (>= 2.6) and put it on PATH" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "install-haproxy: installing Debian's haproxy package needs root or password-less sudo" >&2
  exit 1
fi
install() { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null; }
if ! install; then
  "${as_root[@]}" apt-get update -qq
  install || { echo "install-haproxy: apt-get install haproxy failed" >&2; exit 1; }
fi
haproxy -v | head -n 1
