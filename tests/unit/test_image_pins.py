"""The images' constraints are complete and consistent: pip, asked to resolve each image's direct requirements under
its constraints for the image's Python and platform, must pick exactly the pinned set (nothing unpinned, no stale
pin). A dry run: only metadata is fetched from the package index, nothing is installed.

The Triton image's torch and torchvision are +cu128 builds that only PyTorch's index serves; here they resolve as
PyPI's 2.10.0 and 0.25.0, which are the same CUDA 12.8 builds and declare the same dependencies. causal-conv1d is an
sdist whose metadata needs torch to compute, so it is left out of the resolution (its own needs, torch, packaging
and ninja, are direct requirements of the image). pip evaluates environment markers for the interpreter running
the test (3.11 in CI), not the image's 3.12; the one 3.12-only need, setuptools, is a direct requirement anyway.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.unit.deploy_files import DOCKER, REPO, normalize, read_pins

pytestmark = pytest.mark.network

PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64"]


def resolve(tmp_path, requirements, constraints: str, python: str) -> dict[str, str]:
    (tmp_path / "constraints.txt").write_text(constraints)
    report = tmp_path / "report.json"
    # fast-deps reads each wheel's metadata with HTTP range requests instead of downloading it (torch alone is
    # close to 1 GB, its CUDA wheels several more).
    command = [sys.executable, "-m", "pip", "install", "--use-feature=fast-deps", "--dry-run", "--quiet", "--no-input",
               "--disable-pip-version-check", "--ignore-installed", "--target", str(tmp_path / "target"),
               "--only-binary=:all:", "--python-version", python, "--implementation", "cp",
               "--abi", "cp" + python.replace(".", ""), "--abi", "abi3", "--abi", "none",
               *[word for platform in PLATFORMS for word in ("--platform", platform)],
               "--report", str(report), "-c", str(tmp_path / "constraints.txt"), "-r", str(requirements)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0 and "fast-deps" in result.stderr and "invalid choice" in result.stderr:
        # A pip without the feature: the same resolution, downloading whole wheels.
        command.remove("--use-feature=fast-deps")
        result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        errors = [line for line in result.stderr.splitlines() if "is ignored" not in line]
        pytest.fail("pip could not resolve the pinned set:\n" + "\n".join(errors[-30:]))
    installed = json.loads(report.read_text())["install"]
    return {normalize(item["metadata"]["name"]): item["metadata"]["version"] for item in installed}


def differences(resolved: dict[str, str], pins: dict[str, str]) -> list[str]:
    problems = [f"{name}=={version} is needed but not pinned" for name, version in sorted(resolved.items())
                if name not in pins]
    problems += [f"{name} is pinned but nothing needs it" for name in sorted(set(pins) - set(resolved))]
    problems += [f"{name}: pinned {pins[name]}, resolved {version}" for name, version in sorted(resolved.items())
                 if name in pins and pins[name] != version]
    return problems


def test_the_shim_images_pins_are_exactly_its_closure(tmp_path):
    path = REPO / "constraints" / "shim-image.txt"
    resolved = resolve(tmp_path, DOCKER / "shim" / "requirements.txt", path.read_text(), "3.11")
    assert differences(resolved, read_pins(path)) == []


def test_the_triton_images_pins_are_exactly_its_closure(tmp_path):
    path = REPO / "constraints" / "triton-image.txt"
    pins = read_pins(path)
    built_in_the_image = {"causal-conv1d"}
    local = {name: version for name, version in pins.items() if "+" in version}
    assert set(local) == {"torch", "torchvision"}
    public = {name: version.split("+", 1)[0] if name in local else version
              for name, version in pins.items() if name not in built_in_the_image}
    constraints = "".join(f"{name}=={version}\n" for name, version in public.items())
    resolved = resolve(tmp_path, DOCKER / "triton" / "requirements.txt", constraints, "3.12")
    assert differences(resolved, public) == []
