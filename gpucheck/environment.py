"""python -m gpucheck.environment --out env.json: what this interpreter and machine have (run in its own process:
it imports torch). Also nvidia_smi(), which the orchestrator calls to keep nvidia-smi's view in the report folder."""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path


def facts() -> dict:
    found = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "prefix": sys.prefix,
        "platform": platform.platform(),
        "libc": " ".join(platform.libc_ver()),
        "cpus": os.cpu_count(),
    }
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        found["memory_gib"] = round(pages * size / 1024 ** 3, 1)
    except (ValueError, OSError):
        pass
    for name in ("numpy", "transformers", "tokenizers", "safetensors", "triton"):
        try:
            module = __import__(name)
            found[name] = getattr(module, "__version__", "?")
        except Exception as exc:
            found[name] = f"not importable: {type(exc).__name__}: {exc}"[:200]
    from gpucheck.inprocess import kernel_facts

    found["kernels"] = kernel_facts()
    import torch

    found["torch"] = torch.__version__
    found["torch_cuda"] = torch.version.cuda
    found["cuda_available"] = torch.cuda.is_available()
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        found["gpu"] = {
            "name": properties.name,
            "capability": "sm_%d%d" % (properties.major, properties.minor),
            "memory_gib": round(properties.total_memory / 1024 ** 3, 1),
            "count": torch.cuda.device_count(),
            "arch_list": torch.cuda.get_arch_list(),
        }
    return found


def nvidia_smi(out: Path, label: str, timeout: float = 30) -> bool:
    """Append nvidia-smi's summary and its memory query under a heading, within timeout seconds in all; False when
    there is no nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return False
    with open(out, "a") as log:
        log.write(f"==== {label} ({time.strftime('%H:%M:%S')})\n")
        for command in (["nvidia-smi"],
                        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used,utilization.gpu",
                         "--format=csv"],
                        ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"]):
            try:
                done = subprocess.run(command, capture_output=True, text=True, timeout=timeout / 3)
                log.write(done.stdout + done.stderr + "\n")
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.write(f"{' '.join(command)}: {exc}\n")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.environment")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(facts(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
