#!/usr/bin/env bash
# Puts checkov (the policy linter the Kubernetes manifests are held to) in .cache/tools/checkov, a virtual
# environment of its own, at the version constraints/policy-lint.txt pins; from PyPI, nothing else. Nothing to do
# when that version is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.cache/tools/checkov
PIN=$(grep -E '^checkov==' constraints/policy-lint.txt)
if [ -x "$VENV/bin/checkov" ] && [ "$(cat "$VENV/.pin" 2>/dev/null)" = "$PIN" ]; then
  exit 0
fi
"${PYTHON:-python3}" -m venv "$VENV"
"$VENV/bin/python" -m pip --disable-pip-version-check --quiet install "$PIN"
echo "$PIN" > "$VENV/.pin"
"$VENV/bin/checkov" --version
