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

# One line per step on stderr, so that the first run says what its minutes go to.
step() { echo "bootstrap: $*" >&2; }

if [ -f "$STAMP" ]; then
  step "pyproject.toml, the constraints or this script changed: updating $VENV"
else
  step "first run: installing everything into $VENV (a few minutes, once)"
fi
[ -x "$VENV/bin/python" ] || { step "creating $VENV with $("$PYTHON" --version 2>&1)"; "$PYTHON" -m venv "$VENV"; }
PIP="$VENV/bin/python -m pip --disable-pip-version-check --quiet"
step "upgrading pip"
$PIP install --upgrade pip
# torch first and alone, so that the CPU wheel is taken and nothing resolves to a multi-GB CUDA build.
step "installing torch 2.13.0 (the CPU build where the index has one; the largest download)"
$PIP install -c constraints/cpu.txt "torch==2.13.0"
step "installing the project and its extras: the model side, the shim, Triton's CPU server, the fixture, the tests"
$PIP install -c constraints/cpu.txt -e ".[model,shim,triton-cpu,fixture,test]"
step "putting Triton's python backend stub where the bundled tritonserver looks for it"
"$VENV/bin/python" -m devstack install-stub
# The oldest SDK docs/systemone.md supports, with its own dependencies, in a folder of its own that the tests run it
# from.
step "installing the oldest supported TypeSafe SDK into .cache/typesafe-sdk-oldest"
rm -rf .cache/typesafe-sdk-oldest
$PIP install --target .cache/typesafe-sdk-oldest -r constraints/typesafe-sdk-oldest.txt
echo "$WANT" > "$STAMP"
step "done: $VENV is ready"
