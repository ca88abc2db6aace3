"""What is carried to the GPU machine besides the repository: one folder, by default .carry/ (git-ignored).

    .carry/wheels/            the service's Python packages for CPython 3.12, manylinux x86_64, with their
                              dependencies (torch and transformers are on the machine already)
    .carry/kernel-wheels/     flash-linear-attention and fla-core (pure Python), and causal-conv1d 1.7.0 built
                              forward-only for sm_90 against torch 2.11.0+cu130 (gpucheck.conv_wheel); optional
    .carry/tritonserver.tar.xz  the server from the nvidia-pytriton wheel, trimmed to what it runs with
    .carry/libpython/         libpython3.12.so.1.0, stripped, as xz: the stub's fallback (gpucheck.libpython)
    .carry/manifest.json      sizes, and what was found about the server's GPU support

gpucheck.collect writes it; gpucheck's install step reads it.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO_ROOT / ".carry"
WHEELS = "wheels"
KERNEL_WHEELS = "kernel-wheels"
SERVER_TARBALL = "tritonserver.tar.xz"
MANIFEST = "manifest.json"

LIMIT_BYTES = 64 * 1024 ** 2  # the carry and the repository together: what the GPU machine takes
# What gpucheck.collect wrote, measured (MiB; docs/gpu-check.md, "What to carry"); the libpython fallback is a
# stripped 3.12.1 (30.4 MB as built, 7.0 stripped).
MEASURED_MIB = {"tritonserver.tar.xz": 23.97, "wheels": 19.24, "kernel-wheels": 1.67, "libpython": 1.46}
HEADROOM_BYTES = 6 * 1024 ** 2  # kept free of the 64 MiB by the carry and the repository, for the repository to grow
TARGET_BYTES = 56 * 1024 ** 2  # what gpucheck.collect allows the carry alone
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")

# The shim's packages (pyproject's "shim" extra) and numpy<2, which the python backend stub of Triton 24.10 needs in
# the interpreter it runs (with numpy 2 it dies on the first string tensor while readiness stays green). uvloop is
# not carried (4.3 MiB): the GPU machine has it, and without it uvicorn runs asyncio's own loop. mcp is not carried
# either (its closure, cryptography and pydantic among it, would not fit): the check's shim runs with
# INTERN_DECISION_MCP=0. Nor is OpenTelemetry: the check's shim traces nothing, and imports none of it then.
SERVICE_REQUIREMENTS = (
    "tritonclient[http]==2.73.0",
    "starlette>=0.40",
    "uvicorn>=0.30",
    "httptools>=0.6",
    "prometheus-client>=0.20",
    "backports-zstd>=1.0",
    "numpy<2",
)
# Distributions of the service's closure that the GPU machine's Python already has, at versions that satisfy it and
# need no numpy 2: pip keeps an installed version that satisfies, so their wheels are not carried (about 3.6 MiB).
# ml_dtypes is not among them: the machine's is newer than tritonclient's `ml-dtypes<=0.5.4` (seen there), so the
# carried 0.5.4 is the one installed. The rehearsal's base has them, and a newer ml_dtypes, as the machine does.
ON_MACHINE = ("aiohttp", "aiohappyeyeballs", "aiosignal", "anyio", "attrs", "certifi", "click", "frozenlist", "h11",
              "idna", "multidict", "propcache", "typing_extensions", "urllib3", "yarl")
MACHINE_ALSO = ("ml_dtypes>0.5.4",)
# Wheels above this size are carried with their members recompressed as LZMA (zipfile reads it, and so pip does; the
# RECORD's hashes are of the members' bytes, which do not change): numpy 17.1 MiB as published, 9.8 carried.
REPACK_ABOVE_BYTES = 1024 ** 2
KERNEL_REQUIREMENTS = ("flash-linear-attention==0.5.2", "fla-core==0.5.2", "einops")
SERVER_WHEEL = "nvidia-pytriton==0.7.0"

# After installing, run with -I as the python backend stub runs Python (no current folder, no PYTHONPATH): what the
# shim and the model side import, the model classes themselves (`import transformers` alone is lazy and proves
# nothing), the repository's packages through the environment, and the numpy bound.
IMPORT_CHECK = (
    "import json, numpy, starlette, uvicorn, httptools, prometheus_client, aiohttp, backports.zstd, shim.app, "
    "tritonclient.http.aio, tritonclient.utils, torch, transformers, wire.protocol, intern_decision_model.kernels; "
    "from transformers import AutoProcessor, Qwen3_5ForConditionalGeneration; "
    "assert int(numpy.__version__.split('.')[0]) < 2, 'numpy ' + numpy.__version__; "
    "print(json.dumps({m.__name__: getattr(m, '__version__', '?') for m in "
    "(numpy, starlette, uvicorn, torch, transformers)}))"
)

SERVER_PREFIX = "pytriton/tritonserver/"
LIBS_PREFIX = "nvidia_pytriton.libs/"


def server_member_wanted(name: str, python_version: str = PYTHON_VERSION) -> bool:
    """Whether a file of the nvidia-pytriton wheel belongs in the trimmed server: the binary, the python backend, the
    local cache, the stub for the Python version and the vendored libraries, except the bundled libpython 3.13 (only
    the 3.13 stub uses it)."""
    if name.endswith("/") or "__pycache__" in name:
        return False
    if name.startswith(LIBS_PREFIX):
        return not name[len(LIBS_PREFIX):].startswith("libpython")
    if not name.startswith(SERVER_PREFIX):
        return False
    rest = name[len(SERVER_PREFIX):]
    return (rest.startswith(("bin/", "backends/python/", "caches/"))
            or rest.startswith(f"python_backend_stubs/{python_version}/"))


def carried_on_machine(wheel_name: str) -> bool:
    """Whether a downloaded wheel is of a distribution the GPU machine has (ON_MACHINE), and so is not carried."""
    return wheel_name.split("-")[0].lower().replace("-", "_").replace(".", "_") in ON_MACHINE


def repack_lzma(wheel: Path) -> None:
    """The wheel rewritten in place with every member LZMA-compressed, names, order and bytes unchanged."""
    packed = wheel.with_name(wheel.name + ".lzma")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_LZMA) as target:
        for info in source.infolist():
            target.writestr(info, source.read(info), compress_type=zipfile.ZIP_LZMA)
    packed.replace(wheel)
