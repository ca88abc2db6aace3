"""libpython carried as a fallback: the python backend stub links libpython3.12.so.1.0, and a machine whose Python
is linked statically has none. gpucheck.collect packs one from a Python 3.12 built with --enable-shared (stripped
of its symbol tables, then xz: 30 MB as built, about 1.5 MiB carried); the stub step unpacks it into the scratch
folder and puts it on the server's library path only when the service's interpreter has no libpython of its own.
The report says which one the stub used (stub.data.libpython).

A patch release other than the machine's (the fallback is built from the Python that collects) shares its ABI: the
stub then runs the machine's standard library on the carried runtime, which the report names.
"""
from __future__ import annotations

import glob
import json
import lzma
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

FOLDER = "libpython"  # under the carry, and under the scratch folder once unpacked
_PROBE = ("import json, sys, sysconfig; print(json.dumps({'version': '%d.%d.%d' % sys.version_info[:3], "
          "'shared': bool(sysconfig.get_config_var('Py_ENABLE_SHARED')), "
          "'libdir': sysconfig.get_config_var('LIBDIR'), 'soname': sysconfig.get_config_var('INSTSONAME'), "
          "'builtins': sorted(sys.builtin_module_names)}))")


def describe(python: str) -> dict:
    """{version, shared, libdir, soname} of an interpreter."""
    done = subprocess.run([python, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout)


def find_shared_python(version: str) -> str | None:
    """A Python of that version built with --enable-shared: python<version> on PATH, or one pyenv installed."""
    candidates = [shutil.which(f"python{version}")]
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True, timeout=30).stdout
        candidates += [str(folder / "bin" / f"python{version}")
                       for folder in sorted(Path(root.strip(), "versions").glob(f"{version}.*"), reverse=True)]
    except (OSError, subprocess.SubprocessError):
        pass
    for candidate in filter(None, candidates):
        try:
            facts = describe(candidate)
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
        if facts["version"].startswith(version + ".") and facts["shared"]:
            return candidate
    return None


def pack(python: str, dest: Path) -> dict:
    """Strip and xz the shared libpython of `python` into dest/<soname>.xz; returns what was packed and its sizes.
    RuntimeError when that interpreter has no shared libpython."""
    facts = describe(python)
    source = Path(facts["libdir"] or "") / (facts["soname"] or "")
    if not facts["shared"] or not source.is_file():
        raise RuntimeError(f"{python} (Python {facts['version']}) has no shared libpython to carry")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        stripped = Path(scratch) / source.name
        shutil.copyfile(source, stripped)
        # --strip-unneeded keeps the dynamic symbol table the stub links against; only the debug and local symbols go
        subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True, capture_output=True, timeout=120)
        packed = dest / f"{source.name}.xz"
        packed.write_bytes(lzma.compress(stripped.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
        stripped_bytes = stripped.stat().st_size
    info = {"version": facts["version"], "soname": source.name, "builtins": facts["builtins"],
            "built_bytes": source.stat().st_size,
            "stripped_bytes": stripped_bytes, "carried_bytes": packed.stat().st_size}
    (dest / "libpython.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def has_own(libdir: str, version: str) -> list[str]:
    """The interpreter's own libpython<version>.so* files in libdir."""
    return sorted(glob.glob(os.path.join(libdir, f"libpython{version}.so*"))) if libdir else []


def unpack(carry: Path, scratch: Path, version: str) -> dict | None:
    """The carried libpython for this version unpacked into scratch/libpython: {libdir, version, soname}; None when
    none is carried."""
    carried = carry / FOLDER
    packed = carried / f"libpython{version}.so.1.0.xz"
    if not packed.is_file():
        return None
    target = scratch / FOLDER
    target.mkdir(parents=True, exist_ok=True)
    library = target / packed.name[:-len(".xz")]
    library.write_bytes(lzma.decompress(packed.read_bytes()))
    library.chmod(0o755)
    info_path = carried / "libpython.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    return {"libdir": str(target), "version": info.get("version"), "soname": library.name}


def choose(libdir: str, version: str, carry: Path, scratch: Path) -> dict:
    """Which libpython the stub links: the interpreter's own when it has one, else the carried fallback.
    {used: "machine" | "carried" | None, libdir (the folders to put first on the library path), detail}."""
    own = has_own(libdir, version)
    if own:
        return {"used": "machine", "libdir": libdir, "detail": f"the interpreter's own: {', '.join(own)}"}
    fallback = unpack(carry, scratch, version)
    if fallback is None:
        return {"used": None, "libdir": libdir,
                "detail": f"none: the interpreter has no libpython{version}.so and none is carried"}
    return {"used": "carried", "libdir": os.pathsep.join(part for part in (fallback["libdir"], libdir) if part),
            "detail": f"the carried fallback, {fallback['soname']} from Python {fallback['version']} (stripped), "
                      f"unpacked into {fallback['libdir']}: the interpreter has none"}


def unmet_modules(machine_builtins, carried_builtins, dynload_names) -> list[str]:
    """The modules the machine's Python builds in that the carried libpython would look for as extension modules
    in the machine's lib-dynload, where there is none (a Debian or Ubuntu Python builds math, _struct, zlib and
    others in): with that libpython the stub fails at its first such import."""
    present = {name.split(".")[0] for name in dynload_names}
    return sorted(set(machine_builtins) - set(carried_builtins) - present)
