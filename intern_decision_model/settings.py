"""Model-side configuration, read once from the environment and validated; a bad value is a ValueError naming it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from wire.env import PREFIX, get, integer, positive_number

from .graphs import BUCKETED, EXACT, OFF, Shape

PINNED_REPO = "internlm/Intern-Decision-4B"
PINNED_REVISION = "0e5e6aa7d6d750e2b1504ba11a8136cb58aeb3cd"
PINNED_INFERENCE_SHA256 = "c904e2c67ca0775621a22375ee373d2ba30b52117cda870c6c9ef74143b29863"
PINNED_DTYPE = "bfloat16"
HF_CACHE_ROOT = Path("/hf/hub")

DTYPES = ("bfloat16", "float16", "float32")
_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")
_REVISION = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
AUTO = "auto"
GRAPH_MODES = (AUTO, OFF, EXACT, BUCKETED)
DEFAULT_GRAPH_BUCKETS = (256, 512, 1024, 2048, 4096, 8192)


@dataclass(frozen=True)
class Settings:
    checkpoint: Path
    revision: str
    inference_sha256: str
    dtype: str
    vram_cap_gib: float | None
    keep_vision: bool
    allow_slow_kernels: bool
    device: str = "cuda"
    max_tokens: int = 8192
    release_slack_mib: int = 512
    cuda_graphs: str = AUTO  # auto: exact on CUDA, off on the CPU
    graph_shapes: tuple[Shape, ...] = ()  # exact mode: captured at start-up beside the warm-up's
    graph_buckets: tuple[int, ...] = DEFAULT_GRAPH_BUCKETS
    graph_budget_mib: int = 1024
    graph_gate: float = 0.01  # bucketed mode: the most |Δp| against eager the start-up gate accepts
    unpinned: tuple[str, ...] = ()  # by variable name (ALLOW_UNPINNED=1)

    @property
    def pinned(self) -> bool:
        return not self.unpinned

    @property
    def release_slack_bytes(self) -> int:
        return self.release_slack_mib * 1024 * 1024

    @property
    def prompt_version(self) -> str:
        return f"inference.py@sha256:{self.inference_sha256[:16]}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Settings":
        revision = _pattern(env, "REVISION", _REVISION, PINNED_REVISION, "40 lowercase hex characters")
        default_checkpoint = HF_CACHE_ROOT / ("models--" + PINNED_REPO.replace("/", "--")) / "snapshots" / revision
        checkpoint = Path(get(env, "CHECKPOINT") or default_checkpoint)
        if not checkpoint.is_absolute():
            raise ValueError(f"{PREFIX}CHECKPOINT must be an absolute path, got {str(checkpoint)!r}")
        device = get(env, "DEVICE") or cls.device
        if not _DEVICE.fullmatch(device):
            raise ValueError(f"{PREFIX}DEVICE must be cpu, cuda or cuda:N, got {device!r}")
        dtype = get(env, "DTYPE") or PINNED_DTYPE
        if dtype not in DTYPES:
            raise ValueError(f"{PREFIX}DTYPE must be one of {', '.join(DTYPES)}, got {dtype!r}")
        inference_sha256 = _pattern(env, "INFERENCE_SHA256", _SHA256, PINNED_INFERENCE_SHA256,
                                    "64 lowercase hex characters")
        unpinned = tuple(PREFIX + name for name, value, pin in (
            ("REVISION", revision, PINNED_REVISION),
            ("INFERENCE_SHA256", inference_sha256, PINNED_INFERENCE_SHA256),
            ("DTYPE", dtype, PINNED_DTYPE),
        ) if value != pin)
        allow_unpinned = _flag(env, "ALLOW_UNPINNED")
        if unpinned and not allow_unpinned:
            raise ValueError(f"{', '.join(unpinned)} override the contract's pins; set {PREFIX}ALLOW_UNPINNED=1 "
                             f"to serve unpinned (reported as pinned=false)")
        return cls(
            checkpoint=checkpoint,
            revision=revision,
            inference_sha256=inference_sha256,
            device=device,
            dtype=dtype,
            vram_cap_gib=positive_number(env, "VRAM_CAP_GIB", "> 0 (GiB)"),
            max_tokens=integer(env, "MAX_TOKENS", cls.max_tokens, minimum=1),
            release_slack_mib=integer(env, "RELEASE_SLACK_MIB", cls.release_slack_mib, minimum=0),
            keep_vision=_flag(env, "KEEP_VISION"),
            allow_slow_kernels=_flag(env, "ALLOW_SLOW_KERNELS"),
            cuda_graphs=_choice(env, "CUDA_GRAPHS", GRAPH_MODES, cls.cuda_graphs),
            graph_shapes=_listed(env, "GRAPH_SHAPES", Shape.parse, cls.graph_shapes),
            graph_buckets=_listed(env, "GRAPH_BUCKETS", _bucket, cls.graph_buckets),
            graph_budget_mib=integer(env, "GRAPH_BUDGET_MIB", cls.graph_budget_mib, minimum=0),
            graph_gate=positive_number(env, "GRAPH_GATE", "> 0 (the most |Δp|)") or cls.graph_gate,
            unpinned=unpinned,
        )


def _pattern(env: Mapping[str, str], name: str, pattern: re.Pattern, default: str, what: str) -> str:
    value = get(env, name) or default
    if not pattern.fullmatch(value):
        raise ValueError(f"{PREFIX}{name} must be {what}, got {value!r}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    value = get(env, name) or default
    if value not in choices:
        raise ValueError(f"{PREFIX}{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _listed(env: Mapping[str, str], name: str, read, default: tuple) -> tuple:
    """A comma-separated list; default when unset."""
    raw = get(env, name)
    if raw == "":
        return default
    try:
        return tuple(read(item) for item in raw.split(","))
    except ValueError as exc:
        raise ValueError(f"{PREFIX}{name}: {exc}") from None


def _bucket(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise ValueError(f"not a bucket length (an integer >= 1): {text!r}")
    return int(text)


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = get(env, name) or "0"
    if raw not in ("0", "1"):
        raise ValueError(f"{PREFIX}{name} must be 0 or 1, got {raw!r}")
    return raw == "1"


def instance_device(configured: str, instance_kind: str, device_id: int | str) -> str:
    """Refuses a mismatch between the config and the env."""
    if instance_kind == "CPU":
        if configured != "cpu":
            raise ValueError(f"{PREFIX}DEVICE is {configured!r} but the model instance is KIND_CPU; "
                             f"a CPU run must set {PREFIX}DEVICE=cpu explicitly")
        return "cpu"
    if instance_kind == "GPU":
        assigned = f"cuda:{device_id}"
        if configured == "cuda":
            return assigned
        if configured != assigned:
            raise ValueError(f"{PREFIX}DEVICE is {configured!r} but Triton placed this instance on {assigned}")
        return assigned
    return configured
