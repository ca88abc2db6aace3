"""python -m gpucheck.conv_wheel --dest DIR [--scratch DIR] [--python PYTHON3.12]

causal-conv1d 1.7.0 for the GPU machine (torch 2.11.0+cu130, Python 3.12, H100/H200), built here, where there is
no GPU. PyPI has 1.7.0 as an sdist only, and the GPU machine has no network. Built whole for sm_90 the wheel is
25 MB, almost all of it the backward kernels, which serving never runs; so this builds the same source
forward-only: the architectures cut to sm_90, the backward's .cu left out of the sources, the backward's entry
point raising instead of dispatching, and nvcc's line info left out (EDITS: exact text substitutions made at build
time, each failing loudly when its text is not there exactly once). The production image builds the whole package
(docker/triton).

Everything comes from the package index: the sdist (checked against SDIST_SHA256), torch 2.11.0 (PyPI's cp312
build is the CUDA 13.0 one) and the build tools in a scratch Python 3.12 environment, and nvcc, nvvm, the crt and
cccl headers (13.0, torch's CUDA) assembled with torch's own CUDA headers and libraries into a CUDA_HOME. The build
runs with CAUSAL_CONV1D_FORCE_BUILD=TRUE (its download step otherwise fails offline), MAX_JOBS=2 and no build
isolation; for the same bytes from one build to the next, with a fixed SOURCE_DATE_EPOCH, nvcc's seed fixed, the
scratch folder's paths written relative, and the extension stripped at link time. The wheel is then installed and
imported in that environment (on the CPU: the import loads the extension against torch), and DIR receives it with
a JSON describing it. A wheel built before under the same pins is reused from the scratch folder (`ensure`).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from gpucheck import carry, libpython

VERSION = "1.7.0"
SDIST_URL = ("https://files.pythonhosted.org/packages/f4/d1/"
             f"eba27735f31bd5527d39a3c7f693e6ded7b844cab275db719a15ad37b6cd/causal_conv1d-{VERSION}.tar.gz")
SDIST_SHA256 = "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b"
PYTHON_VERSION = "3.12"
TORCH = "torch==2.11.0"  # the GPU machine's: 2.11.0+cu130
BUILD_TOOLS = ("setuptools==81.0.0", "wheel==0.48.0", "ninja==1.13.2", "packaging==26.4")
CUDA_PIECES = ("nvidia-cuda-nvcc==13.0.*", "nvidia-nvvm==13.0.*", "nvidia-cuda-crt==13.0.*",
               "nvidia-cuda-cccl==13.0.*")
ARCH = "sm_90"
BUILD = "forward-only"
LOCAL_VERSION = "fwd.sm90"  # the wheel says what it is: causal_conv1d-1.7.0+fwd.sm90
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest a zip can say
# Stripped at link time: the host compiler's debug info (about two thirds of the extension's bytes), and the local
# symbols, one of which nvcc names after its temporary file (so that the bytes would differ from build to build).
LDFLAGS = "-Wl,--strip-all"
# nvcc names internal symbols with random numbers (different every run) unless given a seed; each file's names
# still carry its own file name.
NVCC_SEED = "-frandom-seed=causal-conv1d-1.7.0"
DEFAULT_SCRATCH = carry.REPO_ROOT / ".cache" / "conv-wheel"
FORWARD_ONLY_MESSAGE = "causal_conv1d: forward-only build (gpucheck.conv_wheel); the backward was left out"
BACKWARD_SOURCE = "csrc/causal_conv1d_bwd.cu"
IMPORT_CHECK = ("import os, causal_conv1d, causal_conv1d_cuda; from causal_conv1d import causal_conv1d_fn, "
                "causal_conv1d_update; print(causal_conv1d.__version__, os.path.basename(causal_conv1d_cuda.__file__))")


class EditMismatch(RuntimeError):
    """An upstream text the build edits was not found exactly once: the sdist is not the one the edits know."""


@dataclass(frozen=True)
class Edit:
    path: str
    old: str
    new: str


ALL_ARCHS = """\
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_75,code=sm_75")
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_80,code=sm_80")
        cc_flag.append("-gencode")
        cc_flag.append("arch=compute_87,code=sm_87")
        if bare_metal_version >= Version("11.8"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_90,code=sm_90")
        if bare_metal_version >= Version("12.8"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_100,code=sm_100")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_120,code=sm_120")
        if bare_metal_version >= Version("13.0"):
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_103,code=sm_103")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_110,code=sm_110")
            cc_flag.append("-gencode")
            cc_flag.append("arch=compute_121,code=sm_121")
"""
BACKWARD_DISPATCH = """\
    DISPATCH_ITYPE_FLOAT_AND_HALF_AND_BF16(x.scalar_type(), "causal_conv1d_bwd", [&] {
        DISPATCH_WTYPE_FLOAT_AND_HALF_AND_BF16(weight.scalar_type(), "causal_conv1d_bwd", [&] {
            if (!is_channel_last) {
                causal_conv1d_bwd_cuda<input_t, weight_t>(params, stream);
            } else {
                causal_conv1d_channellast_bwd_cuda<input_t, weight_t>(params, stream);
            }
        });
    });
"""
EDITS = (
    Edit("setup.py", ALL_ARCHS, f'        cc_flag.append("-gencode")\n'
                                f'        cc_flag.append("arch=compute_{ARCH[3:]},code={ARCH}")\n'),
    Edit("setup.py", f'                "{BACKWARD_SOURCE}",\n', ""),
    # Line info is for profilers; it would also write the build folder's paths into the GPU code.
    Edit("setup.py", '                    "-lineinfo",\n', ""),
    Edit("csrc/causal_conv1d.cpp", BACKWARD_DISPATCH, f'    TORCH_CHECK(false, "{FORWARD_ONLY_MESSAGE}");\n'),
)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pins_key() -> str:
    """A short hash of everything that decides the wheel: a cached wheel is reused only under the same key."""
    pins = [SDIST_SHA256, PYTHON_VERSION, TORCH, *BUILD_TOOLS, *CUDA_PIECES, ARCH, LOCAL_VERSION, SOURCE_DATE_EPOCH,
            LDFLAGS, NVCC_SEED, "file-prefix-map", *(f"{edit.path}\0{edit.old}\0{edit.new}" for edit in EDITS)]
    return hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12]


def download_sdist(scratch: Path, url: str = SDIST_URL, sha256: str = SDIST_SHA256) -> Path:
    """The pinned sdist in scratch (downloaded once); RuntimeError when its sha256 is not the pin."""
    path = scratch / url.rsplit("/", 1)[-1]
    if not path.is_file() or sha256_of(path) != sha256:
        scratch.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".part")
        with urllib.request.urlopen(url, timeout=120) as response, partial.open("wb") as out:
            shutil.copyfileobj(response, out)
        found = sha256_of(partial)
        if found != sha256:
            partial.unlink()
            raise RuntimeError(f"{path.name}: sha256 {found}, pinned {sha256}")
        partial.replace(path)
    return path


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """A fresh copy of the sdist's tree under dest; returns its root folder."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(dest, filter="data")
    (root,) = [path for path in dest.iterdir() if path.is_dir()]
    return root


def apply_edit(root: Path, edit: Edit) -> None:
    """One exact substitution; EditMismatch unless the old text is there exactly once."""
    path = root / edit.path
    text = path.read_text()
    found = text.count(edit.old)
    if found != 1:
        raise EditMismatch(f"{edit.path}: the text to replace is there {found} times, not once: "
                           f"{edit.old.strip().splitlines()[0]!r}")
    path.write_text(text.replace(edit.old, edit.new))


def forward_only(root: Path) -> None:
    """The sdist's tree edited for the forward-only sm_90 build: EDITS applied, the backward source removed."""
    for edit in EDITS:
        apply_edit(root, edit)
    backward = root / BACKWARD_SOURCE
    if not backward.is_file():
        raise EditMismatch(f"{BACKWARD_SOURCE} is not in the sdist")
    backward.unlink()


def prepare_sources(sdist: Path, dest: Path) -> Path:
    root = unpack_sdist(sdist, dest)
    forward_only(root)
    return root


def run(command: list, log: Path, env: dict | None = None, cwd: Path | None = None) -> None:
    """A command with its output appended to log; CalledProcessError names the log."""
    with log.open("a") as stream:
        stream.write(f"$ {' '.join(map(str, command))}\n")
        stream.flush()
        done = subprocess.run(list(map(str, command)), stdout=stream, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    if done.returncode:
        raise RuntimeError(f"{command[0]} … exited {done.returncode}: see {log}")


def build_python(scratch: Path, python: str | None, log: Path) -> Path:
    """A Python 3.12 environment with torch and the build tools (reused while its pins match); its python."""
    venv = scratch / f"venv-{TORCH.replace('==', '-')}"
    marker = venv / "gpucheck-pins.txt"
    pins = "\n".join([TORCH, *BUILD_TOOLS]) + "\n"
    venv_python = venv / "bin" / "python"
    if marker.is_file() and marker.read_text() == pins and venv_python.exists():
        return venv_python
    python = python or libpython.find_shared_python(PYTHON_VERSION) or shutil.which(f"python{PYTHON_VERSION}")
    if python is None:
        raise RuntimeError(f"no python{PYTHON_VERSION} found: pass --python")
    if venv.exists():
        shutil.rmtree(venv)
    run([python, "-m", "venv", venv], log)
    run([venv_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", TORCH, *BUILD_TOOLS], log)
    marker.write_text(pins)
    return venv_python


def sysconfig_path(venv_python: Path, name: str) -> str:
    """One of the environment's sysconfig paths (purelib, include)."""
    done = subprocess.run([str(venv_python), "-c", f"import sysconfig; print(sysconfig.get_paths()[{name!r}])"],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def cuda_pieces(scratch: Path, venv_python: Path, log: Path) -> Path:
    """nvcc, nvvm, the crt and cccl from the package index, without their dependencies (torch's CUDA runtime is the
    one built against); returns their nvidia/cu13 folder."""
    target = scratch / "cuda-13.0"
    marker = target / "gpucheck-pins.txt"
    pins = "\n".join(CUDA_PIECES) + "\n"
    if not (marker.is_file() and marker.read_text() == pins):
        if target.exists():
            shutil.rmtree(target)
        run([venv_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-deps",
             "--target", target, *CUDA_PIECES], log)
        marker.write_text(pins)
    return target / "nvidia" / "cu13"


def link_entries(source: Path, dest: Path) -> None:
    """dest/<name> a link to each entry of source (an entry already there is kept)."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if not (dest / entry.name).exists():
            (dest / entry.name).symlink_to(entry)


def assemble_cuda_home(pieces: Path, torch_cuda: Path, dest: Path) -> Path:
    """A CUDA_HOME: bin/ copied (nvcc finds nvvm/ and include/ beside its real location), nvvm/, include/ (torch's
    CUDA headers with the crt, cccl and nvvm ones), lib64/ (torch's CUDA libraries, with libcudart.so)."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(pieces / "bin", dest / "bin", symlinks=True)
    (dest / "nvvm").symlink_to(pieces / "nvvm")
    link_entries(torch_cuda / "include", dest / "include")
    link_entries(pieces / "include", dest / "include")
    link_entries(torch_cuda / "lib", dest / "lib64")
    link_entries(pieces / "lib", dest / "lib64")
    (dest / "lib64" / "libcudart.so").symlink_to("libcudart.so.13")
    (dest / "lib").symlink_to("lib64")
    return dest


def build_env(cuda_home: Path, scratch: Path, python_include: str) -> dict:
    """The build's environment. The host compiler writes the scratch folder's path and the interpreter's headers'
    as relative ones (into __FILE__), so that the wheel's bytes do not depend on where it was built."""
    prefix_map = f"-ffile-prefix-map={scratch}/= -ffile-prefix-map={python_include}/=python/"
    return {**os.environ, "CUDA_HOME": str(cuda_home), "PATH": f"{cuda_home / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "CAUSAL_CONV1D_FORCE_BUILD": "TRUE", "CAUSAL_CONV1D_LOCAL_VERSION": LOCAL_VERSION,
            "TORCH_CUDA_ARCH_LIST": f"{ARCH[3]}.{ARCH[4:]}", "MAX_JOBS": "2", "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
            "LDFLAGS": LDFLAGS, "CFLAGS": prefix_map,
            "NVCC_APPEND_FLAGS": " ".join([NVCC_SEED, *(f"-Xcompiler={flag}" for flag in prefix_map.split())])}


def build_wheel(root: Path, venv_python: Path, env: dict, out: Path, log: Path) -> Path:
    """pip wheel of the edited tree, without build isolation or dependencies; returns the wheel."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    run([venv_python, "-m", "pip", "wheel", "--no-input", "--disable-pip-version-check", "--no-build-isolation",
         "--no-deps", "--wheel-dir", out, root], log, env=env)
    (wheel,) = out.glob("causal_conv1d-*.whl")
    return wheel


def check_wheel(wheel: Path) -> dict:
    """What the wheel holds: its extension (forward-only message in it, no debug info) and no backward source."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (extension,) = [name for name in names if name.startswith("causal_conv1d_cuda") and name.endswith(".so")]
        data = archive.read(extension)
    if FORWARD_ONLY_MESSAGE.encode() not in data:
        raise RuntimeError(f"{wheel.name}: the extension lacks the forward-only check")
    if b".debug_info" in data:
        raise RuntimeError(f"{wheel.name}: the extension still has debug info")
    return {"extension": extension, "extension_bytes": len(data)}


def check_import(venv_python: Path, wheel: Path, scratch: Path, log: Path) -> str:
    """Installs the wheel into a scratch folder and imports it with the build's torch; returns what it printed."""
    target = scratch / "import-check"
    if target.exists():
        shutil.rmtree(target)
    run([venv_python, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-deps", "--no-index",
         "--target", target, wheel], log)
    code = f"import sys; sys.path.insert(0, {str(target)!r}); {IMPORT_CHECK}"
    done = subprocess.run([str(venv_python), "-c", code], capture_output=True, text=True, cwd=scratch, timeout=300)
    if done.returncode:
        raise RuntimeError(f"{wheel.name} does not import: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def describe(wheel: Path, **more) -> dict:
    return {"distribution": "causal-conv1d", "version": VERSION, "wheel": wheel.name, "sha256": sha256_of(wheel),
            "size": wheel.stat().st_size, "arch": ARCH, "build": BUILD, "python": PYTHON_VERSION, "torch": TORCH,
            "cuda": list(CUDA_PIECES), "sdist_sha256": SDIST_SHA256, "key": pins_key(), **more}


def build(scratch: Path, python: str | None = None) -> tuple[Path, dict]:
    """The whole build in scratch; returns (the wheel, its description). Writes scratch/built-<key>/."""
    scratch.mkdir(parents=True, exist_ok=True)
    log = scratch / "build.log"
    log.write_text("")
    started = time.monotonic()
    sdist = download_sdist(scratch)
    venv_python = build_python(scratch, python, log)
    torch_cuda = Path(sysconfig_path(venv_python, "purelib"), "nvidia", "cu13")
    cuda_home = assemble_cuda_home(cuda_pieces(scratch, venv_python, log), torch_cuda, scratch / "cuda-home")
    root = prepare_sources(sdist, scratch / "src")
    compile_started = time.monotonic()
    env = build_env(cuda_home, scratch, sysconfig_path(venv_python, "include"))
    wheel = build_wheel(root, venv_python, env, scratch / f"built-{pins_key()}", log)
    compile_seconds = round(time.monotonic() - compile_started, 1)
    contents = check_wheel(wheel)
    imported = check_import(venv_python, wheel, scratch, log)
    info = describe(wheel, **contents, imported=imported, build_seconds=compile_seconds,
                    total_seconds=round(time.monotonic() - started, 1))
    (wheel.parent / "causal-conv1d.json").write_text(json.dumps(info, indent=2) + "\n")
    return wheel, info


def cached(scratch: Path) -> tuple[Path, dict] | None:
    """A wheel built before under the same pins, whose bytes are still the ones described; else None."""
    folder = scratch / f"built-{pins_key()}"
    described = folder / "causal-conv1d.json"
    if not described.is_file():
        return None
    info = json.loads(described.read_text())
    wheel = folder / info.get("wheel", "")
    if info.get("key") != pins_key() or not wheel.is_file() or sha256_of(wheel) != info.get("sha256"):
        return None
    return wheel, info


def ensure(scratch: Path = DEFAULT_SCRATCH, python: str | None = None) -> tuple[Path, dict]:
    """The cached wheel, else a fresh build: (the wheel, its description)."""
    return cached(scratch) or build(scratch, python)


def write(dest: Path, wheel: Path, info: dict) -> Path:
    """The wheel and causal-conv1d.json into dest; returns the copied wheel."""
    dest.mkdir(parents=True, exist_ok=True)
    copied = dest / wheel.name
    shutil.copyfile(wheel, copied)
    (dest / "causal-conv1d.json").write_text(json.dumps(info, indent=2) + "\n")
    return copied


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.conv_wheel")
    parser.add_argument("--dest", type=Path, required=True, help="where the wheel and causal-conv1d.json go")
    parser.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH,
                        help="downloads, the build environment and the build (default .cache/conv-wheel)")
    parser.add_argument("--python", help="a Python 3.12 for the build environment (default: python3.12 or pyenv's)")
    parser.add_argument("--rebuild", action="store_true", help="build even when a wheel of the same pins is cached")
    args = parser.parse_args(argv)
    wheel, info = build(args.scratch, args.python) if args.rebuild else ensure(args.scratch, args.python)
    write(args.dest, wheel, info)
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
