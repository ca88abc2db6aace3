#!/usr/bin/env bash
# Creates .venv with everything the CPU development stack and the tests need, and puts the bundled
# tritonserver's python backend stub where the server looks for it. Re-running it is cheap: it reinstalls
# only when pyproject.toml or the constraints changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed
WANT=$(cat pyproject.toml constraints/cpu.txt constraints/typesafe-sdk-oldest.txt scripts/bootstrap.sh | sha256sum | cut -d' ' -f1)

"$PYTHON" - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"Python >= 3.11 is required, this is {sys.version.split()[0]}")
PY

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check --quiet"
$PIP install --upgrade pip
# torch first and alone, so that the CPU wheel is taken and nothing resolves to a multi-GB CUDA build.
$PIP install -c constraints/cpu.txt "torch==2.13.0"
$PIP install -c constraints/cpu.txt -e ".[model,shim,triton-cpu,fixture,test]"
"$VENV/bin/python" -m devstack install-stub
# The oldest SDK the README supports, with its own dependencies, in a folder of its own that the tests run it from.
rm -rf .cache/typesafe-sdk-oldest
$PIP install --target .cache/typesafe-sdk-oldest -r constraints/typesafe-sdk-oldest.txt
echo "$WANT" > "$STAMP"
