"""A wheel built from pyproject.toml holds every package and every data file beside them (the smoke rows, the OpenAPI
document, ...), and building it warns of nothing: a file a wheel leaves out is one the editable install would
still find, so nothing else would notice."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def packages() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]


def shipped_files(top: str) -> set[str]:
    """The files under a top-level package that a wheel must hold: all but the bytecode caches."""
    return {path.relative_to(ROOT).as_posix() for path in (ROOT / top).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The wheel built from a copy of pyproject.toml and the packages it lists (the tree's other files are not
    needed, and the copy keeps build/ and *.egg-info out of the tree), with pip's output."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    for top in sorted({name.split(".")[0] for name in packages()}):
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path_factory.mktemp("wheel")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                          "--disable-pip-version-check", "--verbose", "-w", str(out), str(source)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    return names, run.stdout + run.stderr


def test_the_wheel_holds_the_package_data(built):
    names, _ = built
    assert {"acceptance/data/smoke_rows.jsonl", "shim/openapi.json"} <= names


def test_the_wheel_holds_every_file_of_every_listed_package(built):
    names, _ = built
    tops = {name.split(".")[0] for name in packages()}
    expected = set().union(*(shipped_files(top) for top in tops))
    assert sorted(expected - names) == []


def test_building_the_wheel_warns_of_nothing(built):
    _, output = built
    assert "is absent from the `packages` configuration" not in output
    assert "Warning" not in output, [line for line in output.splitlines() if "Warning" in line]
