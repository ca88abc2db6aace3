"""Whether the linear-attention layers run the fast kernels or transformers' silent reference fallback, read from
the closure the layers call, not from what is installed."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

# fla-core carries fla's kernels since 0.3
PACKAGES = {"fla": ("flash-linear-attention", "fla-core"), "causal_conv1d": ("causal-conv1d",)}
KERNEL_FUNCTIONS = {"causal_conv1d_fn": "causal_conv1d", "torch_chunk_gated_delta_rule": "fla"}
LINEAR_ATTENTION_SUFFIX = "GatedDeltaNet"
QWEN3_5_MODELING = "transformers.models.qwen3_5.modeling_qwen3_5"

FAST, REFERENCE, MIXED, UNKNOWN, NONE = "fast", "reference", "mixed", "unknown", "none"


@dataclass(frozen=True)
class KernelFacts:
    fla_version: str  # "" when it does not import
    causal_conv1d_version: str
    linear_attention: str


def package_version(name: str) -> str:
    """"" when it does not import (a broken build raises anything)."""
    try:
        module = importlib.import_module(name)
    except Exception:
        return ""
    version = getattr(module, "__version__", None)
    for distribution in PACKAGES.get(name, ()):
        if version:
            break
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return version or "unknown"


def _choice(function: Callable) -> tuple[str, str]:
    seen, pending = set(), [function]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        code, closure = getattr(current, "__code__", None), getattr(current, "__closure__", None)
        cells = {}
        if code is not None and closure:
            for name, cell in zip(code.co_freevars, closure):
                try:
                    cells[name] = cell.cell_contents
                except ValueError:
                    continue
        if "is_new_implementation" in cells:
            bound = cells.get("implementation")
            module = getattr(bound, "__module__", "") or ""
            return (FAST if cells["is_new_implementation"] else REFERENCE), module
        pending.extend(value for value in cells.values() if callable(value))
        pending.append(getattr(current, "__wrapped__", None))
    return UNKNOWN, ""


def implementation_of(function: Callable) -> str:
    return _choice(function)[0]


def bound_module(function: Callable) -> str:
    return _choice(function)[1]


def combine(paths) -> str:
    paths = set(paths)
    if not paths or UNKNOWN in paths:
        return UNKNOWN
    return paths.pop() if len(paths) == 1 else MIXED


def module_paths(module: Any) -> dict[str, str]:
    return {name: implementation_of(getattr(module, name)) for name in KERNEL_FUNCTIONS if hasattr(module, name)}


def linear_attention_path(model: Any) -> str:
    modules = {type(layer).__module__ for layer in model.modules()
               if type(layer).__name__.endswith(LINEAR_ATTENTION_SUFFIX)}
    if not modules:
        return NONE
    return combine(path for name in modules for path in module_paths(sys.modules[name]).values())


def qwen3_5_paths() -> dict[str, str]:
    """Without a model (importing the modelling binds)."""
    return module_paths(importlib.import_module(QWEN3_5_MODELING))


def qwen3_5_path() -> str:
    return combine(qwen3_5_paths().values())


def report(model: Any | None = None) -> dict:
    module = importlib.import_module(QWEN3_5_MODELING)
    functions = {name: dict(zip(("path", "bound"), _choice(getattr(module, name))))
                 for name in KERNEL_FUNCTIONS if hasattr(module, name)}
    return {"packages": {name: package_version(name) for name in PACKAGES}, "functions": functions,
            "linear_attention": linear_attention_path(model) if model is not None
            else combine(entry["path"] for entry in functions.values())}


def kernel_facts(model: Any) -> KernelFacts:
    return KernelFacts(package_version("fla"), package_version("causal_conv1d"), linear_attention_path(model))


def slow_path_refusal(facts: KernelFacts, device: str, allowed: bool) -> str | None:
    if not device.startswith("cuda") or allowed or facts.linear_attention in (FAST, NONE):
        return None
    return (f"kernel check failed: the linear-attention layers run the {facts.linear_attention} path "
            f"(flash-linear-attention: {facts.fla_version or 'does not import'}, "
            f"causal-conv1d: {facts.causal_conv1d_version or 'does not import'}); install both against this torch, "
            f"or set INTERN_DECISION_ALLOW_SLOW_KERNELS=1 to serve on the reference path knowingly")
