"""The linters CI runs: ruff with pyproject.toml's configuration, and pycodestyle's continuation-line checks, which
ruff does not have, over the same files ruff checks. Both are the test extra's pinned versions, run from beside this
interpreter; a missing one is a failure."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.tools import REPO_ROOT, run

# The one place pycodestyle's selection is written: continuation lines (E12x) and their visual indent (E13x).
PYCODESTYLE_ARGS = ["--select=E12,E13", "--max-line-length=120"]


def beside_python(name: str) -> str:
    tool = Path(sys.executable).parent / name
    if not tool.is_file():
        pytest.fail(f"{name} is not installed beside {sys.executable}: it comes with the test extra "
                    "(pip install -e '.[test]'; ./dev test does it)", pytrace=False)
    return str(tool)


@pytest.fixture(scope="module")
def ruff() -> str:
    return beside_python("ruff")


@pytest.fixture(scope="module")
def pycodestyle() -> str:
    return beside_python("pycodestyle")


def python_files(ruff: str) -> list[str]:
    """The files ruff checks under pyproject.toml's [tool.ruff] (its excludes and .gitignore applied)."""
    listed = run([ruff, "check", "--no-cache", "--show-files", "."])
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return [str(Path(line).relative_to(REPO_ROOT)) for line in listed.stdout.splitlines() if line.endswith(".py")]


def test_ruff_finds_nothing(ruff):
    result = run([ruff, "check", "--no-cache", "--output-format", "concise", "."])
    assert result.returncode == 0, f"ruff check . (pyproject.toml's [tool.ruff]):\n{result.stdout}{result.stderr}"


def test_pycodestyle_finds_no_misaligned_continuation_line(ruff, pycodestyle):
    files = python_files(ruff)
    assert "shim/app.py" in files and "tests/unit/test_lint.py" in files
    result = run([pycodestyle, *PYCODESTYLE_ARGS, *files])
    assert result.returncode == 0, f"pycodestyle {' '.join(PYCODESTYLE_ARGS)}:\n{result.stdout}{result.stderr}"


def test_the_linters_report_what_they_are_run_to_find(ruff, pycodestyle, tmp_path: Path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\n\n\nvalue = max(1,\n    2)\n")
    found = run([ruff, "check", "--no-cache", "--config", str(REPO_ROOT / "pyproject.toml"), str(sample)])
    assert found.returncode == 1 and "F401" in found.stdout, found.stdout + found.stderr
    found = run([pycodestyle, *PYCODESTYLE_ARGS, str(sample)])
    assert found.returncode == 1 and "E128" in found.stdout, found.stdout + found.stderr
