#!/usr/bin/env bash
# apt-install.sh WHO PACKAGE...: installs Debian packages for the install-*.sh scripts, as root or through
# password-less sudo, fetching the package lists only when the first try fails. WHO names the caller in its errors.
set -euo pipefail
who=$1
shift
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$who: no apt-get on this machine; install $* and put it on PATH" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "$who: installing Debian's $* needs root or password-less sudo" >&2
  exit 1
fi
install() {
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! install "$@"; then
  "${as_root[@]}" apt-get update -qq
  install "$@" || { echo "$who: apt-get install $* failed" >&2; exit 1; }
fi
