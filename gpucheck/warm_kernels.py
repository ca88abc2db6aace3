"""python -m gpucheck.warm_kernels --size full --device cuda --dtype bfloat16 --lengths 289,512,3900,7900
                                 --out warm.json [--kernels DIR]

flash-linear-attention's kernels compiled and autotuned before anything is timed. It calls the chunked gated delta
rule exactly as transformers bound it for Qwen3.5's linear-attention layers (the function the model's layers call),
on random tensors of the model's own head counts, head dimensions and dtype, once per sequence length the check
will send (some of fla's autotuning keys depend on the length), twice each: the first call's seconds are the
compiles and the autotuning, the second's the warm kernel. It writes into the OpenAI Triton cache its environment
names (TRITON_CACHE_DIR, with TRITON_CACHE_AUTOTUNING=1), the one the in-process run and the server then read; run
with TRITON_PRINT_AUTOTUNING=1, its log holds every autotuning's choice and time.

It runs beside the checkpoint's build (other cores, a few MB of GPU memory). Without CUDA it stops after the
import, the binding and the tensors of the smallest length (the rehearsal runs that far), and says why. The JSON is
rewritten after every length: {fla, bound, device, dims, lengths: {T: {first_seconds, second_seconds} | {error}},
seconds, warmed, reason}.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from intern_decision_model import kernels

GATED_DELTA_RULE = "torch_chunk_gated_delta_rule"


def head_dims(size: str) -> dict:
    """The linear-attention layers' dimensions as the model's layers pass them to the kernel (keys repeated up to the
    value heads)."""
    from fixture_checkpoint.synthetic import SIZES

    text = SIZES[size]["text"]
    return {"heads": text["linear_num_value_heads"], "key_dim": text["linear_key_head_dim"],
            "value_dim": text["linear_value_head_dim"]}


def inputs(torch, length: int, dims: dict, device: str, dtype, seed: int = 0) -> dict:
    generator = torch.Generator(device=device).manual_seed(seed + length)

    def normal(*shape, kind=dtype):
        return torch.randn(*shape, generator=generator, device=device, dtype=kind)

    heads = dims["heads"]
    return {
        "query": normal(1, length, heads, dims["key_dim"]),
        "key": normal(1, length, heads, dims["key_dim"]),
        "value": normal(1, length, heads, dims["value_dim"]),
        # as the layer computes them: a float32 decay below zero, a gate in (0, 1) in the model's dtype
        "g": -torch.nn.functional.softplus(normal(1, length, heads, kind=torch.float32)),
        "beta": torch.sigmoid(normal(1, length, heads)),
    }


def call(function, tensors: dict) -> None:
    function(tensors["query"], tensors["key"], tensors["value"], g=tensors["g"], beta=tensors["beta"],
             initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.warm_kernels")
    parser.add_argument("--size", choices=("full", "small"), default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--lengths", required=True, help="comma-separated sequence lengths")
    parser.add_argument("--kernels", type=Path, help="a folder of kernel packages to put first on sys.path")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    if args.kernels and args.kernels.is_dir():
        sys.path.insert(0, str(args.kernels))
    lengths = list(dict.fromkeys(int(part) for part in args.lengths.split(",")))  # as given: the most needed first
    begun = time.monotonic()
    result = {"device": args.device, "dtype": args.dtype, "fla": kernels.package_version("fla") or None,
              "lengths": {}, "warmed": False}

    def save(reason: str | None = None) -> None:
        result.update(seconds=round(time.monotonic() - begun, 2), reason=reason)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    import importlib

    import torch

    modeling = importlib.import_module(kernels.QWEN3_5_MODELING)
    function = getattr(modeling, GATED_DELTA_RULE)
    result["bound"] = kernels.implementation_of(function)
    result["bound_module"] = kernels.bound_module(function)
    result["dims"] = dims = head_dims(args.size)
    if result["bound"] != kernels.FAST:
        save(f"transformers did not bind fla's gated delta rule (fla: {result['fla'] or 'does not import'})")
        return 0
    dtype = getattr(torch, args.dtype)
    cuda = args.device.startswith("cuda") and torch.cuda.is_available()
    if not cuda:
        inputs(torch, min(lengths), dims, "cpu", dtype)
        save(f"no CUDA device: fla's kernels compile for a GPU (fla {result['fla']} imported and bound)")
        return 0
    for length in lengths:
        entry = result["lengths"][str(length)] = {}
        try:
            tensors = inputs(torch, length, dims, args.device, dtype)
            for label in ("first_seconds", "second_seconds"):
                started = time.perf_counter()
                call(function, tensors)
                torch.cuda.synchronize(args.device)
                entry[label] = round(time.perf_counter() - started, 3)
        except Exception as exc:  # recorded per length; the check reads the JSON
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
        save()
    failed = [length for length, entry in result["lengths"].items() if "error" in entry]
    result["warmed"] = not failed
    save(f"failed at lengths {', '.join(failed)}" if failed else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
