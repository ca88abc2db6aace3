"""python -m gpucheck.inprocess --checkpoint SNAP --shapes shapes.json --device D --dtype T --out result.json

predict() in this process, at the fitted shapes: the baseline that the service's time is compared with. For each
timed shape, after --warmup rounds, up to --rounds rounds within the time budget; a round is every call of the
shape's request, back to back, as the service runs them. With a CUDA device it also records memory: resident after
loading, the vision tower's share, and each shape's peak (reserved and allocated), and scores the "probe" shape
once (--probe) to size the VRAM cap.

--kernels DIR puts carried kernel packages (flash-linear-attention) first on sys.path; --block-kernels makes fla and
causal_conv1d unimportable before transformers loads, so that transformers binds its torch implementations. The
result says which implementation transformers bound. The JSON is rewritten after every shape.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from pathlib import Path

KERNEL_PACKAGES = {"fla": ("flash-linear-attention", "fla-core"), "causal_conv1d": ("causal-conv1d",)}
BOUND_FUNCTIONS = ("torch_chunk_gated_delta_rule", "causal_conv1d_fn")


def block_kernels() -> None:
    for name in KERNEL_PACKAGES:
        sys.modules[name] = None  # import raises ImportError; transformers falls back to torch


def kernel_facts() -> dict:
    facts = {}
    for module_name, distributions in KERNEL_PACKAGES.items():
        entry = {"importable": False, "version": None, "error": None}
        try:
            module = __import__(module_name)
            entry["importable"] = True
            entry["version"] = getattr(module, "__version__", None)
        except Exception as exc:  # any failure to import counts as not importable
            entry["error"] = f"{type(exc).__name__}: {exc}"[:300]
        for distribution in distributions:
            try:
                entry["version"] = entry["version"] or importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                pass
        facts[module_name] = entry
    return facts


def bound_implementation(function) -> str:
    """Which implementation transformers bound behind one of its kernel-or-fallback functions."""
    seen, stack = set(), [function]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        code, closure = getattr(current, "__code__", None), getattr(current, "__closure__", None)
        if code is not None and closure:
            for name, cell in zip(code.co_freevars, closure):
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                if name == "implementation" and callable(value):
                    module = getattr(value, "__module__", "") or ""
                    return "torch (transformers' reference)" if module.startswith("transformers") else module
                if callable(value):
                    stack.append(value)
        wrapped = getattr(current, "__wrapped__", None)
        if wrapped is not None:
            stack.append(wrapped)
    return "unknown"


def bindings() -> dict:
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return {name: bound_implementation(getattr(modeling_qwen3_5, name, None)) for name in BOUND_FUNCTIONS
            if getattr(modeling_qwen3_5, name, None) is not None}


class Memory:
    def __init__(self, torch, device: str):
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.device = device

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def now(self) -> dict | None:
        if not self.cuda:
            return None
        cuda = self.torch.cuda
        return {"allocated": cuda.memory_allocated(self.device), "reserved": cuda.memory_reserved(self.device)}

    def peak(self) -> dict | None:
        if not self.cuda:
            return None
        cuda = self.torch.cuda
        return {"allocated": cuda.max_memory_allocated(self.device),
                "reserved": cuda.max_memory_reserved(self.device)}


def measure(engine, calls: list, rounds: int, seconds: float, warmup: int) -> dict:
    for _ in range(warmup):
        for request in calls:
            engine.predict(request)
    round_ms, forward_ms, tokens = [], [], []
    stop = time.monotonic() + seconds
    while len(round_ms) < rounds and (not round_ms or time.monotonic() < stop):
        total, forward = 0.0, 0.0
        for request in calls:
            started = time.perf_counter()
            result = engine.predict(request)
            total += time.perf_counter() - started
            forward += result["timing"]["inference_ms"]
            if len(tokens) < len(calls):
                tokens.append(result["usage"]["input_tokens"])
        round_ms.append(total * 1000)
        forward_ms.append(forward)
    from gpucheck.stats import summary

    return {"calls": len(calls), "tokens": tokens, "round_ms": [round(ms, 3) for ms in round_ms],
            "predict": summary(round_ms), "forward": summary(forward_ms)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.inprocess")
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--shapes", required=True, type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=90.0, help="seconds for the timed shapes together")
    parser.add_argument("--probe", action="store_true", help="score the probe shape once (memory)")
    parser.add_argument("--kernels", type=Path, help="a folder of kernel packages to put first on sys.path")
    parser.add_argument("--block-kernels", action="store_true")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    if args.kernels and args.kernels.is_dir():
        sys.path.insert(0, str(args.kernels))
    if args.block_kernels:
        block_kernels()
    result = {"device": args.device, "dtype": args.dtype, "kernels_blocked": args.block_kernels,
              "kernels": kernel_facts()}

    def save() -> None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    import torch
    import transformers

    from gpucheck.checkpoint_code import load_inference

    result.update(torch=torch.__version__, transformers=transformers.__version__, bound=bindings())
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(args.device)
    save()

    module = load_inference(args.checkpoint)
    memory = Memory(torch, args.device)
    started = time.perf_counter()
    engine = module.DecisionEngine(checkpoint=str(args.checkpoint), device=args.device, dtype=args.dtype)
    result["load_seconds"] = round(time.perf_counter() - started, 2)
    model = engine.backend.model
    result["memory"] = {
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "vision_bytes": sum(p.numel() * p.element_size() for p in model.model.visual.parameters()),
        "after_load": memory.now(),
    }
    result["shapes"] = {}
    save()

    fitted = json.loads(args.shapes.read_text())["shapes"]
    timed = [name for name, shape in fitted.items() if shape["timed"]]
    deadline = time.monotonic() + args.budget
    for position, name in enumerate(timed):
        from gpucheck.shapes import predict_calls

        slice_seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position))
        memory.reset_peak()
        entry = measure(engine, predict_calls(fitted[name]["body"]), args.rounds, slice_seconds, args.warmup)
        entry["peak"] = memory.peak()
        result["shapes"][name] = entry
        save()
    if args.probe and "probe" in fitted:
        from gpucheck.shapes import predict_calls

        memory.reset_peak()
        started = time.perf_counter()
        answer = engine.predict(predict_calls(fitted["probe"]["body"])[0])
        result["probe"] = {"tokens": answer["usage"]["input_tokens"],
                           "ms": round((time.perf_counter() - started) * 1000, 2), "peak": memory.peak()}
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
