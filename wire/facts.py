"""The model's facts (pins, limits, kernels, boot_id), typed, and how they travel as the labels of INFO_METRIC on
Triton's metrics port, so reading them never waits behind an inference."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

INFO_METRIC = "intern_decision_model_info"


@dataclass(frozen=True)
class ModelFacts:
    name: str
    repo: str
    revision: str
    inference_sha256: str
    prompt_version: str
    dtype: str
    device: str
    vram_cap_gib: float | None
    max_tokens: int
    vision_tower: str
    fla_version: str  # "" when flash-linear-attention does not import
    causal_conv1d_version: str  # "" when causal-conv1d does not import
    # the kernels the model's linear-attention layers run: fast | reference | mixed | unknown | none
    linear_attention: str
    slow_kernels_allowed: bool
    pinned: bool  # false when the revision, inference.py hash or dtype was overridden (ALLOW_UNPINNED=1)
    boot_id: str  # random, new each time a model process starts: a restart or reload shows as a new one
    started_at: str  # when this model process started loading, UTC, ISO 8601
    cuda_graphs: str = "off"  # off | exact | bucketed: how the forward runs beneath predict()
    cuda_graphs_reason: str = ""  # why graphs are off when auto asked for them, "" otherwise

    def to_labels(self) -> dict[str, str]:
        return {field.name: _label(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> "ModelFacts":
        """ValueError (KeyError included) when a label is missing or does not read as its type."""
        return cls(**{field.name: _READERS[field.type](labels[field.name]) for field in dataclasses.fields(cls)})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def of_answer(self) -> dict:
        """The part every answer carries, naming the model that gave it."""
        return {key: getattr(self, key) for key in ("name", "repo", "revision", "inference_sha256", "dtype", "device")}


def _label(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _boolean(raw: str) -> bool:
    if raw not in ("true", "false"):
        raise ValueError(f"not a boolean label: {raw!r}")
    return raw == "true"


_READERS = {
    "str": str,
    "int": int,
    "bool": _boolean,
    "float | None": lambda raw: float(raw) if raw else None,
}
