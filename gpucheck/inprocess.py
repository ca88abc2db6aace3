"""python -m gpucheck.inprocess --checkpoint SNAP --shapes shapes.json --device D --dtype T --out result.json

predict() in this process, at the fitted shapes: the baseline that the service's time is compared with. Every
timed shape is warmed up first (--warmup rounds each: the first calls compile and autotune the kernels), then the
"probe" shape is scored once (--probe) to size the VRAM cap, then each timed shape gets up to --rounds rounds within
what --budget leaves; a round is every call of the shape's request, back to back, as the service runs them. With a
CUDA device it also records memory: resident after loading, the vision tower's share, and each shape's peak
(reserved and allocated), each measured from an emptied allocator so that no shape reports an earlier one's peak.

--kernels DIR puts carried kernel packages (flash-linear-attention, causal-conv1d) first on sys.path; --block-kernels
makes fla and causal_conv1d unimportable before transformers loads, so that transformers binds its torch
implementations, --block-conv causal_conv1d alone (the mixed path); --graphs measures CUDA graphs against eager
(gpucheck.graph_rounds) instead of the rounds. The
result says which implementation transformers bound and the model's linear-attention path, both read by the model
side's own probe (intern_decision_model.kernels). The JSON is rewritten after every stage.
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

from gpucheck import libraries
from intern_decision_model import kernels
from intern_decision_model.offline import set_offline


def block_kernels(names=tuple(kernels.PACKAGES)) -> None:
    for name in names:
        sys.modules[name] = None  # import raises ImportError; transformers falls back to torch


def import_error(name: str) -> str | None:
    try:
        __import__(name)
    except Exception as exc:  # any failure to import counts as not importable
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


def kernel_facts() -> dict:
    """{package: importable, version, error}, by the model side's own probe."""
    facts = {}
    for name in kernels.PACKAGES:
        version = kernels.package_version(name)
        facts[name] = {"importable": bool(version), "version": version or None,
                       "error": None if version else import_error(name)}
    return facts


class Memory:
    """torch's memory counters for one device, read so that each measurement starts from a clean allocator.

    The caching allocator keeps the blocks a call freed: without emptying it first, a shape measured after a larger
    one would report the larger one's reserved peak as its own."""

    def __init__(self, torch, device: str):
        self.torch = torch
        self.cuda = device.startswith("cuda")
        self.device = device

    def clean(self) -> dict | None:
        """Free what the allocator caches, then restart the peak counters from what is still in use; returns that
        starting point (None off CUDA)."""
        if not self.cuda:
            return None
        gc.collect()
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        cuda.empty_cache()
        cuda.reset_peak_memory_stats(self.device)
        return self.now()

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


def measure_shape(engine, memory: Memory, calls: list, rounds: int, seconds: float) -> dict:
    """One shape's rounds, its memory peak measured from a clean allocator."""
    start = memory.clean()
    entry = measure(engine, calls, rounds, seconds, warmup=0)
    entry["memory_start"], entry["peak"] = start, memory.peak()
    return entry


def score_probe(engine, memory: Memory, request: dict) -> dict:
    """The largest call, once, its peak measured from a clean allocator."""
    start = memory.clean()
    started = time.perf_counter()
    answer = engine.predict(request)
    return {"tokens": answer["usage"]["input_tokens"], "ms": round((time.perf_counter() - started) * 1000, 2),
            "memory_start": start, "peak": memory.peak()}


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


def graph_rounds(torch, engine, args, fitted: dict, timed: list, deadline: float, save, result: dict) -> dict:
    if not args.device.startswith("cuda"):
        return {"skipped": "CUDA graphs need a CUDA device"}
    from gpucheck.graph_rounds import measure_graphs
    from gpucheck.shapes import predict_calls
    from intern_decision_model.graphs import CudaCapture

    def keep(graphs: dict) -> None:
        result["graphs"] = graphs
        save()

    return measure_graphs(torch, engine, {name: predict_calls(fitted[name]["body"]) for name in timed},
                          lambda calls: time_round(engine, calls), args.rounds, max(3.0, deadline - time.monotonic()),
                          lambda: CudaCapture(torch, args.device), keep)


def time_round(engine, calls: list) -> float:
    """Milliseconds of one round: every call of the shape's request, back to back."""
    started = time.perf_counter()
    for request in calls:
        engine.predict(request)
    return (time.perf_counter() - started) * 1000


def serve_rounds(engine, fitted: dict) -> None:
    """One round per shape named on stdin, its milliseconds on stdout: another process decides the order, so that
    several interpreters are timed round by round in the same conditions (gpucheck.interpreter_rounds)."""
    from gpucheck.shapes import predict_calls

    print("ready", flush=True)
    for line in sys.stdin:
        name = line.strip()
        if not name:
            break
        print(f"{time_round(engine, predict_calls(fitted[name]['body'])):.3f}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.inprocess")
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--shapes", required=True, type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=90.0,
                        help="seconds for everything after the imports: loading, warm-ups, the probe, the rounds")
    parser.add_argument("--probe", action="store_true", help="score the probe shape once (memory)")
    parser.add_argument("--kernels", type=Path, help="a folder of kernel packages to put first on sys.path")
    parser.add_argument("--block-kernels", action="store_true")
    parser.add_argument("--block-conv", action="store_true",
                        help="hide causal_conv1d alone: the mixed path (fla for the delta rule, torch for the conv)")
    parser.add_argument("--graphs", action="store_true",
                        help="instead of the rounds: each shape eager, from exact and from bucketed CUDA graphs")
    parser.add_argument("--serve-rounds", action="store_true",
                        help="after the warm-ups: read a shape's name per line on stdin, print its round's ms")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)

    set_offline()
    if args.kernels and args.kernels.is_dir():
        sys.path.insert(0, str(args.kernels))
    if args.block_kernels:
        block_kernels()
    elif args.block_conv:
        block_kernels(("causal_conv1d",))
    result = {"device": args.device, "dtype": args.dtype, "kernels_blocked": args.block_kernels,
              "conv_blocked": args.block_conv,
              "kernels": kernel_facts()}

    def save() -> None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    import torch
    import transformers

    from gpucheck.checkpoint_code import load_inference
    from gpucheck.shapes import predict_calls

    result.update(torch=torch.__version__, transformers=transformers.__version__,
                  bound=kernels.report()["functions"])
    if args.device.startswith("cuda"):
        result["gpu"] = torch.cuda.get_device_name(args.device)
    save()

    begun = time.monotonic()
    module = load_inference(args.checkpoint)
    memory = Memory(torch, args.device)
    started = time.perf_counter()
    engine = module.DecisionEngine(checkpoint=str(args.checkpoint), device=args.device, dtype=args.dtype)
    result["load_seconds"] = round(time.perf_counter() - started, 2)
    model = engine.backend.model
    result["linear_attention"] = kernels.linear_attention_path(model)
    result["memory"] = {
        "weights_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "vision_bytes": sum(p.numel() * p.element_size() for p in model.model.visual.parameters()),
        "after_load": memory.now(),
    }
    result["shapes"] = {}
    save()

    fitted = json.loads(args.shapes.read_text())["shapes"]
    timed = [name for name, shape in fitted.items() if shape["timed"]]
    # Every warm-up first, inside this step's budget: the first call of each shape compiles (and, with
    # flash-linear-attention, autotunes) its kernels; the autotune cache then serves the server's process too.
    started = time.perf_counter()
    for name in timed:
        for position in range(args.warmup):
            round_started = time.perf_counter()
            for request in predict_calls(fitted[name]["body"]):
                engine.predict(request)
                result.setdefault("first_call_seconds", round(time.perf_counter() - started, 2))
            if position == 0:  # a bucket the kernel warm-up did not reach compiles here: this round is the slow one
                result.setdefault("first_round_seconds", {})[name] = round(time.perf_counter() - round_started, 2)
    result["warmup_seconds"] = round(time.perf_counter() - started, 2)
    result["libraries"] = libraries.loaded()  # after a forward pass; compared with the stub's by the server step
    save()
    if args.serve_rounds:
        serve_rounds(engine, fitted)
        return 0
    if args.graphs:
        result["graphs"] = graph_rounds(torch, engine, args, fitted, timed, begun + args.budget, save, result)
        save()
        return 0
    if args.probe and "probe" in fitted:  # before the timed rounds, so that the cap is measured whatever is left
        result["probe"] = score_probe(engine, memory, predict_calls(fitted["probe"]["body"])[0])
        save()
    deadline = begun + args.budget
    for position, name in enumerate(timed):
        slice_seconds = max(1.0, (deadline - time.monotonic()) / (len(timed) - position))
        entry = measure_shape(engine, memory, predict_calls(fitted[name]["body"]), args.rounds, slice_seconds)
        result["shapes"][name] = entry
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
