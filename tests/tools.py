"""External tools the tests need that do not come from PyPI: found or the test fails, never skipped."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Where scripts may unpack a tool without installing it system-wide.
LOCAL_TOOLS = REPO_ROOT / ".cache" / "tools" / "bin"


def required_tool(name: str) -> str:
    """The tool's path, on PATH or in .cache/tools/bin; the test fails when it is missing."""
    local = LOCAL_TOOLS / name
    found = shutil.which(name) or (str(local) if local.is_file() else None)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with Debian's prometheus package; run "
                    f"scripts/install-prometheus-tools.sh (.ci/run does)", pytrace=False)
    return found
