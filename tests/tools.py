"""External tools the tests need: found or the test fails, never skipped; fixtures for them are in tests/conftest.py.

Where a tool may be: on PATH, beside this interpreter (a console script of the test extras, e.g. hadolint), or in
.cache/tools/bin, where the install scripts unpack what Debian ships (promtool, prometheus)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_VERSION_DIR = REPO_ROOT / "model_repository" / "intern_decision" / "1"
LOCAL_TOOLS = REPO_ROOT / ".cache" / "tools" / "bin"
PROMETHEUS_HINT = "it comes with Debian's prometheus package; run scripts/install-prometheus-tools.sh (.ci/run does)"


def required_tool(name: str, hint: str = PROMETHEUS_HINT) -> str:
    """The tool's path; the test fails, saying where the tool comes from, when it is missing."""
    found = shutil.which(name)
    for place in (Path(sysconfig.get_path("scripts")), Path(sys.executable).parent, LOCAL_TOOLS):
        candidate = place / name
        if found is None and candidate.is_file() and os.access(candidate, os.X_OK):
            found = str(candidate)
    if found is None:
        pytest.fail(f"{name} is not installed: {hint}", pytrace=False)
    return found


def run(command: list[str], cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
