"""Which linear-attention kernels the model runs: the fast ones (flash-linear-attention, causal-conv1d) or
transformers' reference PyTorch path, which gives the same numbers far more slowly and which transformers falls
back to silently when a package is missing or does not import.

transformers picks each kernel once, when its modelling module is imported, and keeps the choice in the closure of
the function the model's linear-attention layers call; that choice is what is reported, not merely whether a
package is installed.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

# import name -> distribution name
PACKAGES = {"fla": "flash-linear-attention", "causal_conv1d": "causal-conv1d"}
# The module-level functions a linear-attention layer's prefill forward calls.
KERNEL_FUNCTIONS = ("causal_conv1d_fn", "torch_chunk_gated_delta_rule")
LINEAR_ATTENTION_SUFFIX = "GatedDeltaNet"


@dataclass(frozen=True)
class KernelFacts:
    fla_version: str  # "" when it does not import
    causal_conv1d_version: str
    linear_attention: str  # fast | reference | mixed | unknown | none (the model has no linear-attention layers)


def package_version(name: str) -> str:
    try:
        module = importlib.import_module(name)
    except Exception:  # a broken build raises anything from ImportError to OSError
        return ""
    try:
        return getattr(module, "__version__", None) or metadata.version(PACKAGES[name])
    except metadata.PackageNotFoundError:
        return "unknown"


def implementation_of(function: Callable) -> str:
    """fast, reference or unknown: what transformers resolved the kernel function to."""
    for candidate in (function, getattr(function, "__wrapped__", None)):
        if candidate is None:
            continue
        try:
            nonlocals = inspect.getclosurevars(candidate).nonlocals
        except (TypeError, ValueError):
            continue
        if "is_new_implementation" in nonlocals:
            return "fast" if nonlocals["is_new_implementation"] else "reference"
    return "unknown"


def linear_attention_path(model: Any) -> str:
    modules = {type(layer).__module__ for layer in model.modules()
               if type(layer).__name__.endswith(LINEAR_ATTENTION_SUFFIX)}
    if not modules:
        return "none"
    paths = {implementation_of(getattr(sys.modules[name], function)) for name in modules
             for function in KERNEL_FUNCTIONS if hasattr(sys.modules[name], function)}
    if not paths or "unknown" in paths:
        return "unknown"
    return paths.pop() if len(paths) == 1 else "mixed"


def kernel_facts(model: Any) -> KernelFacts:
    return KernelFacts(package_version("fla"), package_version("causal_conv1d"), linear_attention_path(model))


def slow_path_refusal(facts: KernelFacts, device: str, allowed: bool) -> str | None:
    """Why a CUDA model may not serve on these kernels, or None. The CPU never has the fast path."""
    if not device.startswith("cuda") or allowed or facts.linear_attention in ("fast", "none"):
        return None
    return (f"kernel check failed: the linear-attention layers run the {facts.linear_attention} path "
            f"(flash-linear-attention: {facts.fla_version or 'does not import'}, "
            f"causal-conv1d: {facts.causal_conv1d_version or 'does not import'}); install both against this torch, "
            f"or set INTERN_DECISION_ALLOW_SLOW_KERNELS=1 to serve on the reference path knowingly")
