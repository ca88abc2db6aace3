#!/usr/bin/env bash
# Puts HAProxy where the tests look (the loopback replica test and `haproxy -c` on the production template): nothing
# to do when haproxy is on PATH or in /usr/sbin; else Debian's haproxy package is installed (no service is started
# where there is no init system). Needs apt-get, and root or password-less sudo.
set -euo pipefail
if command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; then
  exit 0
fi
"$(dirname "$0")/apt-install.sh" install-haproxy haproxy
haproxy -v | head -n 1
