"""libpython carried as a fallback for the python backend stub: packed stripped and compressed from a Python built
with --enable-shared, used only where the service's interpreter has none (the preflight and the stub step say
which), and the carry with it still inside the 64 MiB the GPU machine takes."""
from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import pytest

from gpucheck import carry, collect, libpython, preflight

MIB = 1024 ** 2
VERSION = "%d.%d" % sys.version_info[:2]
SHARED = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """This interpreter's libpython packed as gpucheck.collect packs the GPU machine's version's."""
    if not SHARED:  # the project's interpreter (scripts/bootstrap.sh, pyenv) is built with --enable-shared
        pytest.fail("this interpreter has no shared libpython to pack")
    folder = tmp_path_factory.mktemp("carry")
    return folder, libpython.pack(sys.executable, folder / libpython.FOLDER)


def test_the_fallback_is_stripped_and_small_enough_to_carry(packed):
    _, info = packed
    assert info["soname"] == f"libpython{VERSION}.so.1.0"
    assert info["stripped_bytes"] < info["built_bytes"] / 2
    assert info["carried_bytes"] <= 1.25 * carry.MEASURED_MIB["libpython"] * MIB


def test_where_the_interpreter_has_none_the_carried_one_is_unpacked_and_the_interpreter_runs_on_it(packed, tmp_path):
    folder, _ = packed
    without = tmp_path / "lib"  # an interpreter's library folder without libpython
    without.mkdir()
    chosen = libpython.choose(str(without), VERSION, folder, tmp_path / "scratch")
    assert chosen["used"] == "carried" and "the carried fallback" in chosen["detail"]
    unpacked = tmp_path / "scratch" / libpython.FOLDER
    assert chosen["libdir"].split(os.pathsep) == [str(unpacked), str(without)]
    env = {**os.environ, "LD_LIBRARY_PATH": chosen["libdir"]}
    linked = subprocess.run(["ldd", sys.executable], capture_output=True, text=True, env=env, check=True).stdout
    assert str(unpacked / f"libpython{VERSION}.so.1.0") in linked
    ran = subprocess.run([sys.executable, "-c", "import json, ssl; print(json.dumps([1]))"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "[1]"


def test_the_interpreters_own_libpython_is_used_when_it_has_one(packed, tmp_path):
    folder, _ = packed
    own = tmp_path / "lib"
    own.mkdir()
    (own / f"libpython{VERSION}.so.1.0").write_bytes(b"")
    chosen = libpython.choose(str(own), VERSION, folder, tmp_path / "scratch")
    assert chosen["used"] == "machine" and chosen["libdir"] == str(own)
    assert not (tmp_path / "scratch").exists()  # nothing unpacked


def test_without_either_the_choice_says_none(tmp_path):
    chosen = libpython.choose(str(tmp_path), VERSION, tmp_path / "carry", tmp_path / "scratch")
    assert chosen["used"] is None and "none is carried" in chosen["detail"]


def test_the_preflight_goes_on_with_the_carried_one_and_says_so(tmp_path, monkeypatch, capsys):
    carried = tmp_path / "carry" / libpython.FOLDER
    carried.mkdir(parents=True)
    (carried / f"libpython{VERSION}.so.1.0.xz").write_bytes(b"")
    monkeypatch.setattr(preflight, "libpython", lambda: [])
    monkeypatch.setattr(preflight, "free_bytes", lambda folder: 50 * preflight.GIB)
    out = tmp_path / "out"
    assert preflight.main(["--out", str(out), "--scratch", str(tmp_path / "s"), "--carry", str(tmp_path / "carry")]) \
        == 0
    assert "the stub will use the carried fallback" in capsys.readouterr().out
    assert not out.exists()


def test_the_carry_with_the_fallback_and_the_repository_leave_6_mib_of_the_machines_64():
    carried = sum(carry.MEASURED_MIB.values()) * MIB
    assert carry.HEADROOM_BYTES >= 6 * MIB
    assert carried <= carry.TARGET_BYTES
    assert carried + collect.repository_bytes() <= carry.LIMIT_BYTES - carry.HEADROOM_BYTES


def test_the_service_dependencies_the_machine_has_are_not_carried_and_the_rest_are():
    assert carry.carried_on_machine("aiohttp-3.14.5-cp312-cp312-manylinux2014_x86_64.whl")
    assert carry.carried_on_machine("typing_extensions-4.16.0-py3-none-any.whl")
    # the machine's ml_dtypes is newer than tritonclient takes: the carried one is installed there
    for kept in ("numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.whl", "tritonclient-2.73.0-py3-none-any.whl",
                 "ml_dtypes-0.5.4-cp312-cp312-manylinux_2_27_x86_64.whl",
                 "gevent-26.9.0-cp312-cp312-manylinux_2_28_x86_64.whl", "starlette-1.10.0-py3-none-any.whl"):
        assert not carry.carried_on_machine(kept), kept
    # numpy itself is never taken from the machine: the stub needs numpy 1.x, the machine has 2
    assert "numpy" not in carry.ON_MACHINE



def test_a_carried_libpython_that_would_miss_the_machines_built_in_modules_stops_the_run_by_name_in_seconds(
        tmp_path, monkeypatch, capsys):
    # An Ubuntu Python 3.12 builds math, _struct, zlib, ... in, and its lib-dynload has no .so for them; a pyenv
    # build's libpython loads them as extension modules.
    assert libpython.unmet_modules(["math", "_struct", "zlib", "sys"], ["sys"],
                                   ["_ssl.cpython-312-x86_64-linux-gnu.so", "zlib.cpython-312-x86_64-linux-gnu.so"]) \
        == ["_struct", "math"]
    carried = tmp_path / "carry" / libpython.FOLDER
    carried.mkdir(parents=True)
    (carried / f"libpython{VERSION}.so.1.0.xz").write_bytes(b"")
    (carried / "libpython.json").write_text('{"version": "%s.1", "builtins": ["sys"]}' % VERSION)
    monkeypatch.setattr(preflight, "libpython", lambda: [])
    monkeypatch.setattr(preflight, "free_bytes", lambda folder: 50 * preflight.GIB)
    monkeypatch.setattr(preflight.sys, "builtin_module_names", ("sys", "math", "_definitely_not_in_dynload"))
    out = tmp_path / "out"
    assert preflight.main(["--out", str(out), "--scratch", str(tmp_path / "s"), "--carry", str(tmp_path / "carry")]) \
        == 3
    assert "_definitely_not_in_dynload" in capsys.readouterr().out
    report = (out / "report.json").read_text()
    assert '"status": "inconclusive"' in report and "the machine's limit" in report


def test_what_the_carried_libpython_builds_in_is_recorded_when_it_is_packed(packed):
    _, info = packed
    assert "sys" in info["builtins"] and "builtins" in info["builtins"]


def test_debians_own_python_with_a_carried_pyenv_libpython_is_stopped_by_name(packed):
    # Debian's python3 builds math, _struct, _socket, select, zlib and binascii in, as the GPU machine's Ubuntu Python
    # does; the carried libpython here is this pyenv build's, which loads them from lib-dynload.
    debian = f"/usr/bin/python{VERSION}"
    assert os.path.exists(debian), f"{debian}: Debian's python{VERSION} (the machines of this project have it)"
    folder, _ = packed
    done = subprocess.run(
        [debian, "-I", "-c", "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
         "from gpucheck import preflight; print(','.join(preflight.carried_unmet(Path(sys.argv[2]))))",
         str(carry.REPO_ROOT), str(folder)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    unmet = set(done.stdout.strip().split(","))
    assert {"math", "_struct", "_socket", "select", "zlib", "binascii"} <= unmet
    # and this interpreter, whose own build the carry is, misses nothing
    assert preflight.carried_unmet(folder) == []


def test_a_repacked_wheel_installs_with_the_same_files_and_hashes(tmp_path):
    import base64
    import hashlib
    import zipfile

    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    payload = b"VALUE = 42\n" * 5000
    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as out:
        out.writestr("demo/__init__.py", payload)
        out.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        out.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\n"
                                                 "Tag: py3-none-any\n")
        out.writestr("demo-1.0.dist-info/RECORD", f"demo/__init__.py,sha256={digest},{len(payload)}\n"
                                                  "demo-1.0.dist-info/METADATA,,\ndemo-1.0.dist-info/WHEEL,,\n"
                                                  "demo-1.0.dist-info/RECORD,,\n")
    before = zipfile.ZipFile(wheel).namelist()
    carry.repack_lzma(wheel)
    with zipfile.ZipFile(wheel) as packed:
        assert packed.namelist() == before
        assert {info.compress_type for info in packed.infolist()} == {zipfile.ZIP_LZMA}
        assert packed.read("demo/__init__.py") == payload
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps",
                           "--disable-pip-version-check", "--target", str(tmp_path / "site"), str(wheel)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "demo" / "__init__.py").read_bytes() == payload


def test_the_shared_launcher_runs_an_environment_on_its_shared_libpython(tmp_path):
    """Beside a virtual environment's interpreter, the launcher is that environment: its prefix, its packages and
    what its .pth files do (the check hides packages with one), on the shared libpython."""
    import sysconfig

    from gpucheck import shared_launcher

    version = "%d.%d" % sys.version_info[:2]
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        pytest.fail("the development interpreter is expected to be built with --enable-shared (pyenv's default here)")
    venv = tmp_path / "venv"
    subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "carried_by_pth.py").write_text("VALUE = 7\n")
    (venv / "lib" / f"python{version}" / "site-packages" / "extra.pth").write_text(str(tmp_path / "extra") + "\n")
    library = shared_launcher.shared_library(sysconfig.get_config_var("LIBDIR"), version)
    launcher = shared_launcher.build(library, venv / "bin")
    assert shared_launcher.runs_shared(launcher) == {"version": sys.version.split()[0], "prefix": str(venv),
                                                     "shared": True}
    done = subprocess.run([str(launcher), "-c", "import carried_by_pth; print(carried_by_pth.VALUE)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "7", done.stderr


def test_no_shared_libpython_is_named(tmp_path):
    from gpucheck import shared_launcher

    with pytest.raises(shared_launcher.LauncherUnavailable, match="no libpython3.12.so.1.0 in"):
        shared_launcher.shared_library(str(tmp_path), "3.12")
