"""Reading Prometheus text exposition: the model's memory gauges and call counters."""
from __future__ import annotations

from dataclasses import dataclass

MEMORY_SERIES = "intern_decision_gpu_memory_bytes"
MEMORY_KINDS = ("reserved", "allocated", "peak_reserved", "baseline")
ESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def _labels(text: str) -> dict[str, str]:
    """Parse the inside of {...}: name="value" pairs, values with \\n, \\\\ and \\" escapes."""
    labels: dict[str, str] = {}
    index = 0
    while index < len(text):
        while index < len(text) and text[index] in " ,":
            index += 1
        if index >= len(text):
            break
        equals = text.index("=", index)
        name = text[index:equals].strip()
        if text[equals + 1] != '"':
            raise ValueError(f"label {name!r} has no quoted value")
        index = equals + 2
        value = []
        while text[index] != '"':
            if text[index] == "\\":
                index += 1
                value.append(ESCAPES.get(text[index], "\\" + text[index]))
            else:
                value.append(text[index])
            index += 1
        labels[name] = "".join(value)
        index += 1
    return labels


def parse_samples(text: str) -> list[Sample]:
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            closing = _closing_brace(rest)
            labels = _labels(rest[:closing])
            value_text = rest[closing + 1:].split()[0]
        else:
            name, value_text = line.split()[:2]
            labels = {}
        try:
            value = float(value_text)
        except ValueError:
            continue
        samples.append(Sample(name.strip(), labels, value))
    return samples


def _closing_brace(text: str) -> int:
    quoted = False
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and quoted:
            index += 2
            continue
        if char == '"':
            quoted = not quoted
        elif char == "}" and not quoted:
            return index
        index += 1
    raise ValueError("unterminated label set")


def memory_bytes(samples: list[Sample]) -> dict[str, float]:
    """The model's memory gauges by kind; a kind the model does not publish is absent."""
    found: dict[str, float] = {}
    for sample in samples:
        kind = sample.labels.get("kind")
        if sample.name == MEMORY_SERIES and kind in MEMORY_KINDS and kind not in found:
            found[kind] = sample.value
    return found
