"""python -m gpucheck.collect [--dest .carry]

Collects what the GPU check installs on a machine with no network (see gpucheck.carry for the layout), on a
machine that reaches the package index:

1. the service's wheels for CPython 3.12 manylinux x86_64 with their dependencies (pip download), the
   flash-linear-attention wheels without theirs, and causal-conv1d 1.7.0 built forward-only for sm_90
   (gpucheck.conv_wheel; a wheel built before under the same pins is reused from .cache/conv-wheel);
2. the nvidia-pytriton wheel, trimmed to the server binary, the python backend with the 3.12 stub, the local cache
   and the vendored libraries they load, repacked as tar.xz with the wheel's relative layout (the binaries find
   their libraries through $ORIGIN-relative rpaths);
3. libpython/: the shared libpython of a Python of the same version (--libpython-from, else the first
   python3.12 on PATH or installed by pyenv, built with --enable-shared), stripped and xz-compressed
   (gpucheck.libpython), the fallback for a machine whose interpreter has none;
4. manifest.json: every file's size, the total with the repository (which must stay within 64 MiB), and what the
   server's binaries show about GPU support.
"""
from __future__ import annotations

import argparse
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from gpucheck import carry, conv_wheel, libpython

# Markers of a build with GPU support, looked for in the server's binaries.
GPU_MARKERS = {
    "links_cudart": b"libcudart",
    "links_dcgm": b"libdcgm",
    "counts_devices": b"cudaGetDeviceCount",
    "handles_kind_gpu": b"has kind KIND_GPU but no GPUs are available",
    "cuda_ipc_outputs": b"will use CUDA IPC for GPU output transfer",
}


def pip_download(dest: Path, requirements: tuple, with_deps: bool, python_version: str) -> None:
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir",
               "--dest", str(dest), "--only-binary=:all:", "--python-version", python_version,
               "--implementation", "cp", "--abi", "cp" + python_version.replace(".", "")]
    for platform in carry.PLATFORMS:
        command += ["--platform", platform]
    if not with_deps:
        command.append("--no-deps")
    subprocess.run(command + list(requirements), check=True)


def download_server_wheel(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-cache-dir",
                    "--no-deps", "--dest", str(dest), carry.SERVER_WHEEL], check=True)
    return next(dest.glob("nvidia_pytriton-*.whl"))


def trim_server(wheel: Path, tarball: Path, python_version: str) -> dict:
    """Repack the wanted members of the wheel; returns their count, unpacked size and the GPU markers found."""
    found = {name: [] for name in GPU_MARKERS}
    count, unpacked = 0, 0
    with zipfile.ZipFile(wheel) as archive, \
            tarfile.open(tarball, "w:xz", preset=9 | lzma.PRESET_EXTREME) as out:
        for info in sorted(archive.infolist(), key=lambda item: item.filename):
            if not carry.server_member_wanted(info.filename, python_version):
                continue
            data = archive.read(info)
            member = tarfile.TarInfo(info.filename)
            member.size = len(data)
            member.mode = (info.external_attr >> 16) & 0o777 or 0o644
            member.mtime = 0  # reproducible bytes
            out.addfile(member, io.BytesIO(data))
            count += 1
            unpacked += len(data)
            for marker, needle in GPU_MARKERS.items():
                if needle in data:
                    found[marker].append(info.filename.rsplit("/", 1)[-1])
    return {"files": count, "unpacked_bytes": unpacked, "gpu_support_markers": found}


def repository_bytes() -> int:
    """The working tree as it travels: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=carry.REPO_ROOT, check=True, capture_output=True).stdout
    total = 0
    for name in filter(None, listed.decode().split("\0")):
        path = carry.REPO_ROOT / name
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def sizes(folder: Path) -> dict:
    return {str(path.relative_to(folder)): path.stat().st_size
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != carry.MANIFEST}


def pack_libpython(dest: Path, python_version: str, python: str | None) -> dict | None:
    """The libpython fallback packed into dest/libpython; None (and a warning) when no such Python is found."""
    python = python or libpython.find_shared_python(python_version)
    if python is None:
        print(f"no Python {python_version} built with --enable-shared found: no libpython fallback carried",
              file=sys.stderr)
        return None
    try:
        return libpython.pack(python, dest / libpython.FOLDER)
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"no libpython fallback carried: {exc}", file=sys.stderr)
        return None


def carry_conv_wheel(dest: Path, python_version: str, ensure=conv_wheel.ensure) -> dict | None:
    """causal-conv1d's forward-only wheel (built, or reused from the cache) into dest/kernel-wheels; returns its
    description. None, and a note, for a Python other than the wheel's: that install would refuse it."""
    if python_version != conv_wheel.PYTHON_VERSION:
        print(f"causal-conv1d is built for Python {conv_wheel.PYTHON_VERSION}, not {python_version}: not carried",
              file=sys.stderr)
        return None
    wheel, info = ensure()
    folder = dest / carry.KERNEL_WHEELS
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheel, folder / wheel.name)
    return info


def collect(dest: Path, python_version: str = carry.PYTHON_VERSION, libpython_from: str | None = None,
            with_conv_wheel: bool = True) -> dict:
    if dest.exists():
        shutil.rmtree(dest)
    (dest / carry.WHEELS).mkdir(parents=True)
    pip_download(dest / carry.WHEELS, carry.SERVICE_REQUIREMENTS, True, python_version)
    for wheel in (dest / carry.WHEELS).glob("*.whl"):
        if carry.carried_on_machine(wheel.name):
            wheel.unlink()
        elif wheel.stat().st_size > carry.REPACK_ABOVE_BYTES:
            carry.repack_lzma(wheel)
    pip_download(dest / carry.KERNEL_WHEELS, carry.KERNEL_REQUIREMENTS, False, python_version)
    causal_conv1d = carry_conv_wheel(dest, python_version) if with_conv_wheel else None
    with tempfile.TemporaryDirectory() as scratch:
        wheel = download_server_wheel(Path(scratch))
        server = trim_server(wheel, dest / carry.SERVER_TARBALL, python_version)
        server["wheel"] = wheel.name
        server["wheel_bytes"] = wheel.stat().st_size
    fallback = pack_libpython(dest, python_version, libpython_from)
    files = sizes(dest)
    carried = sum(files.values())
    repository = repository_bytes()
    manifest = {
        "python": python_version,
        "platforms": list(carry.PLATFORMS),
        "service_requirements": list(carry.SERVICE_REQUIREMENTS),
        "kernel_requirements": list(carry.KERNEL_REQUIREMENTS),
        "causal_conv1d": causal_conv1d,
        "server": server,
        "libpython": fallback,
        "files": files,
        "carry_bytes": carried,
        "repository_bytes": repository,
        "total_bytes": carried + repository,
        "limit_bytes": carry.LIMIT_BYTES,
        "target_bytes": carry.TARGET_BYTES,
    }
    (dest / carry.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.collect")
    parser.add_argument("--dest", type=Path, default=carry.DEFAULT_DIR)
    parser.add_argument("--python-version", default=carry.PYTHON_VERSION,
                        help="the GPU machine's Python (another one only to rehearse the install elsewhere)")
    parser.add_argument("--libpython-from", help="a Python of that version built with --enable-shared, whose "
                        "libpython is carried as the fallback (default: python3.12 on PATH or pyenv's)")
    parser.add_argument("--no-conv-wheel", action="store_true", help="carry no causal-conv1d (the check then serves "
                        "fla with torch's convolution, the mixed path)")
    args = parser.parse_args(argv)
    manifest = collect(args.dest, args.python_version, args.libpython_from, not args.no_conv_wheel)
    mib = 1024 ** 2
    for name, size in manifest["files"].items():
        print(f"{size / mib:8.2f} MiB  {name}")
    print(f"{manifest['carry_bytes'] / mib:8.2f} MiB  carried ({args.dest})")
    print(f"{manifest['repository_bytes'] / mib:8.2f} MiB  repository")
    print(f"{manifest['total_bytes'] / mib:8.2f} MiB  together (the machine takes {carry.LIMIT_BYTES / mib:.0f}; "
          f"the carry alone may have {carry.TARGET_BYTES / mib:.0f})")
    if manifest["total_bytes"] > carry.LIMIT_BYTES - carry.HEADROOM_BYTES:
        print(f"over the limit less its {carry.HEADROOM_BYTES / mib:.0f} MiB of headroom: the carry and the "
              f"repository leave the repository no room to grow", file=sys.stderr)
        return 1
    if manifest["carry_bytes"] > carry.TARGET_BYTES:
        print("over the allowance: the carry leaves the repository no room to grow", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
