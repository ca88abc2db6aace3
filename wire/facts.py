"""The model's facts: the pins and limits in force, typed, and how they travel as the info metric's labels.

The model publishes them once it has started, as the labels of the gauge INFO_METRIC (value 1) on Triton's metrics
port; the shim reads them from there for /health, so reading them never waits behind an inference.
"""
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

    def to_labels(self) -> dict[str, str]:
        return {field.name: _label(getattr(self, field.name)) for field in dataclasses.fields(self)}

    @classmethod
    def from_labels(cls, labels: dict[str, str]) -> "ModelFacts":
        """ValueError (KeyError included) when a label is missing or does not read as its type."""
        values = {}
        for field in dataclasses.fields(cls):
            raw = labels[field.name]
            if field.name == "vram_cap_gib":
                values[field.name] = float(raw) if raw else None
            elif field.name == "max_tokens":
                values[field.name] = int(raw)
            else:
                values[field.name] = raw
        return cls(**values)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    def of_answer(self) -> dict:
        """The part every answer carries, naming the model that gave it."""
        return {key: getattr(self, key) for key in ("name", "repo", "revision", "inference_sha256", "dtype", "device")}


def _label(value: object) -> str:
    return "" if value is None else str(value)
