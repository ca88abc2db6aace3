"""What the GPU check does about the GPU machine's own packages: which of them cannot work beside the carried
numpy 1.x (read from their metadata), how they are hidden from the service's interpreters, and what a rehearsal
checks of the folder that comes back."""
import subprocess
import sys
from importlib import metadata

import pytest

from gpucheck import install, rehearse, shadowed


def _distribution(root, name, requires=(), files=()):
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A site folder shaped like the GPU machine's: scipy needs numpy 2, scikit-learn needs scipy."""
    _distribution(tmp_path, "numpy", files=("numpy/__init__.py",))
    _distribution(tmp_path, "scipy", ["numpy<2.8,>=2.0.0"], ("scipy/__init__.py", "scipy.libs/libx.so"))
    _distribution(tmp_path, "scikit_learn", ["numpy>=1.22", "scipy>=1.8", 'pytest; extra == "tests"'],
                  ("sklearn/__init__.py", "scikit_learn.libs/liby.so"))
    _distribution(tmp_path, "pandas", ['numpy>=1.26.0; python_version >= "3.12"'], ("pandas/__init__.py",))
    _distribution(tmp_path, "uses-learn", ["scikit-learn"], ("useslearn.py",))
    _distribution(tmp_path, "tests-only", ['scipy; extra == "test"'], ("testsonly/__init__.py",))
    monkeypatch.setattr(metadata, "distributions", lambda: metadata.Distribution.discover(path=[str(tmp_path)]))
    return tmp_path


def test_what_needs_numpy_2_and_what_depends_on_it_is_listed_with_its_import_names(machine):
    listed = {entry["distribution"]: entry for entry in shadowed.shadowed("1.26.4")}
    assert set(listed) == {"scipy", "scikit-learn", "uses-learn"}
    assert listed["scipy"]["imports"] == ["scipy"] and listed["scipy"]["why"] == "requires numpy<2.8,>=2.0.0"
    assert listed["scikit-learn"]["imports"] == ["sklearn"] and listed["scikit-learn"]["why"] == "requires scipy"
    assert listed["uses-learn"]["imports"] == ["useslearn"]


def test_with_numpy_2_in_front_nothing_is_hidden(machine):
    assert shadowed.shadowed("2.5.2") == []


def test_the_hiding_line_makes_a_module_absent_to_import_and_to_find_spec(tmp_path):
    (tmp_path / "present_here.py").write_text("VALUE = 1\n")
    (tmp_path / "hide.pth").write_text(install.hide_line(["present_here", "json_not_hidden_twice", "present_here"]))
    code = ("import importlib.util, site, sys; site.addsitedir(sys.argv[1]); "
            "assert importlib.util.find_spec('present_here') is None\n"
            "try:\n import present_here\nexcept ImportError:\n print('absent')")
    done = subprocess.run([sys.executable, "-I", "-c", code, str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "absent"


def test_what_would_not_come_back_from_the_gpu_machine(tmp_path):
    assert rehearse.what_comes_back(tmp_path) == []
    for index in range(9):
        (tmp_path / f"f{index}").write_text("x")
    deep = tmp_path / "a" / "b" / "c"
    deep.mkdir(parents=True)
    (deep / "d.txt").write_text("x")
    problems = rehearse.what_comes_back(tmp_path)
    assert problems == ["10 files, at most 8 come back", "a/b/c/d.txt is deeper than 2 folders"]


def test_the_carry_holds_every_package_of_the_shim_but_the_one_the_gpu_machine_has():
    import tomllib

    from packaging.requirements import Requirement

    from gpucheck import carry
    from tests.unit.deploy_files import REPO

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    shim = {Requirement(text).name for text in extras["shim"]}
    carried = {Requirement(text).name for text in carry.SERVICE_REQUIREMENTS}
    # uvloop: on the GPU machine already, and uvicorn runs asyncio's loop without it; mcp: its closure would not
    # fit the carry, and the check serves with INTERN_DECISION_MCP=0; OpenTelemetry: the check traces nothing, and
    # the shim imports none of it while tracing is off
    assert shim - carried == {"uvloop", "mcp", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}
    assert "numpy" in carried  # numpy<2 for the python backend stub


def test_what_the_environment_installed_from_the_carry_is_never_hidden(tmp_path):
    for name in ("ml_dtypes-0.5.1.dist-info", "numpy-1.26.4.dist-info", "python_rapidjson-1.20.dist-info"):
        (tmp_path / name).mkdir()
    (tmp_path / "gpucheck-hidden.pth").write_text("")
    assert install.installed_here(tmp_path) == {"ml-dtypes", "numpy", "python-rapidjson"}
