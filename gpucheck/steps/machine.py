"""The steps that prepare the machine: what it is (environment), the service's own environment installed from the
carry (install), and the python backend stub with the libraries it links (stub)."""
from __future__ import annotations

import json
from pathlib import Path

from devstack.triton import bundled_server_root, interpreter_libdir
from gpucheck import install, libpython, stub
from gpucheck.context import Context, Skip, keeping
from gpucheck.environment import nvidia_smi
from gpucheck.findings import Found


def environment_step(ctx: Context) -> Found:
    path = ctx.out / "environment.json"
    ctx.script("gpucheck.environment", ["--out", path], "environment.log", python=ctx.machine_python)
    facts = json.loads(path.read_text())
    facts["nvidia_smi"] = nvidia_smi(ctx.out / "nvidia-smi.txt", "at start")
    gpu = facts.get("gpu")
    card = f"{gpu['name']} ({gpu['capability']}, {gpu['memory_gib']} GiB)" if gpu else "none"
    kernels = facts.get("kernels", {})
    detail = (f"Python {facts['python']}, torch {facts.get('torch')} (CUDA {facts.get('torch_cuda')}), "
              f"transformers {facts.get('transformers')}, numpy {facts.get('numpy')}; GPU: {card}; "
              + "; ".join(f"{name} {'imports, ' + str(entry['version']) if entry['importable'] else 'does not import'}"
                          for name, entry in kernels.items()))
    if ctx.cuda and not facts.get("cuda_available"):
        with keeping(facts):
            raise RuntimeError(f"torch sees no CUDA device. {detail}")
    return Found(detail, facts)


def install_step(ctx: Context) -> Found:
    if not ctx.gpu:
        raise Skip(".venv (scripts/bootstrap.sh) has everything the CPU run needs")
    facts = install.install(ctx.machine_python, ctx.options.carry, ctx.options.scratch, ctx.out / "install.log",
                            ctx.budget)
    manifest = ctx.options.carry / "manifest.json"
    if manifest.is_file():
        carried = json.loads(manifest.read_text())
        facts["carried_bytes"] = carried.get("carry_bytes")
        facts["carried_with_repository_bytes"] = carried.get("total_bytes")
    python, kernels = facts["python"], Path(facts["kernels"]) if facts["kernels"] else None
    return Found(f"environment {python}: " + ", ".join(f"{k} {v}" for k, v in facts["versions"].items())
                 + f"; server unpacked; kernel packages {'installed apart' if kernels else 'not carried'}", facts,
                 python=python, server_root=Path(facts["server_root"]), kernels=kernels)


def stub_step(ctx: Context) -> Found:
    root = ctx.options.server_root or ctx.findings.server_root or bundled_server_root()
    version = install.version_of(ctx.findings.python)
    placed = stub.place(root, version)
    chosen = libpython.choose(interpreter_libdir(ctx.findings.python), version, ctx.options.carry,
                              ctx.options.scratch)
    problems = stub.linkage_problems(root, chosen["libdir"], ctx.out / "ldd.txt")
    data = {"server_root": str(root), "python_version": version, "stub": str(placed), "libdir": chosen["libdir"],
            "libpython": chosen["used"], "libpython_detail": chosen["detail"], "linkage_problems": problems}
    if problems:
        with keeping(data):
            raise RuntimeError("the server or its stub cannot load: " + "; ".join(problems))
    return Found(f"stub for Python {version} in place; libpython: {chosen['detail']}; every library of the server "
                 f"and the stub found (ldd.txt)", data, server_root=root,
                 libpython_dir=chosen["libdir"] if chosen["used"] == "carried" else None)
