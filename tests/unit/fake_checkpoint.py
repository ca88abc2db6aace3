"""A fake checkpoint folder whose inference.py imitates the checkpoint API over the fake torch.

The file's knobs are written into its text, so each variant has its own hash, like a real changed file would.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

REVISION = "1" * 40

INFERENCE_TEMPLATE = '''
import json
import os
from types import SimpleNamespace

import torch

torch.events.append("inference.py executed")
OFFLINE_WHEN_LOADED = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
MODEL_NAME = "Fake-Decision"
TOKEN_OFFSET = {token_offset}
SCORES_DEPEND_ON_VISION = {scores_depend_on_vision}
WARMUP_FAILS = {warmup_fails}
PLACED_ON = {placed_on!r}
HAS_VISION = {has_vision}
FAST_KERNELS = {fast_kernels}


def _kernel(is_new_implementation):
    """Like transformers: the implementation chosen at import time lives in the kernel function's closure."""
    def kernel(*args, **kwargs):
        return is_new_implementation
    return kernel


causal_conv1d_fn = _kernel(FAST_KERNELS)
torch_chunk_gated_delta_rule = _kernel(FAST_KERNELS)


class FakeGatedDeltaNet:
    """A linear-attention layer."""


def validate_request(request):
    if not isinstance(request, dict) or "state" not in request:
        raise ValueError("Supply a JSON object containing state and questions.")
    return {{"state": request["state"], "questions": dict(request["questions"])}}


def compile_row(row):
    user = json.dumps(row, sort_keys=True)
    return SimpleNamespace(messages=[{{"role": "user", "content": user}}], fields=tuple(row["questions"]))


class Tokenizer:
    def apply_chat_template(self, messages, **arguments):
        torch.events.append(("template", tuple(sorted(arguments.items()))))
        return "<prompt> " + messages[0]["content"]

    def __call__(self, text, add_special_tokens=True):
        return {{"input_ids": text.split()}}


class Parameter:
    device = SimpleNamespace(type=PLACED_ON)


class Model:
    def __init__(self):
        self.model = SimpleNamespace(visual="original tower") if HAS_VISION else SimpleNamespace()

    def parameters(self):
        return iter([Parameter()])

    def modules(self):
        return iter([self, FakeGatedDeltaNet(), FakeGatedDeltaNet()])


class DecisionEngine:
    def __init__(self, checkpoint=None, *, max_length=8192, device="cuda", dtype="bfloat16", **ignored):
        torch.events.append(("engine constructed", device, dtype, max_length))
        self.tokenizer = Tokenizer()
        self.backend = SimpleNamespace(model=Model())

    def predict(self, request):
        if WARMUP_FAILS:
            raise RuntimeError("forward failed")
        row = validate_request(request)
        text = self.tokenizer.apply_chat_template(compile_row(row).messages)
        p = 0.75
        if SCORES_DEPEND_ON_VISION and self.backend.model.model.visual != "original tower":
            p = 0.7500000000000001
        answers = {{}}
        for field, question in row["questions"].items():
            values = list(question["criteria"])
            probabilities = {{values[0]: p, **{{value: (1 - p) / (len(values) - 1) for value in values[1:]}}}}
            answers[field] = {{"type": "choice", "probabilities": probabilities, "confidence": p,
                              "choice": values[0], "source": "local", "decision": values[0]}}
        return {{"answers": answers,
                "usage": {{"input_tokens": len(self.tokenizer(text)["input_ids"]) + TOKEN_OFFSET,
                          "output_tokens": len(answers), "decision_count": len(answers)}},
                "timing": {{"inference_ms": 1.23}},
                "calibration": {{"method": "temperature-scaling", "temperature": 1.99241824}},
                "model": MODEL_NAME, "backend": "hf"}}
'''


def write_checkpoint(root: Path, *, revision: str = REVISION, token_offset: int = 0,
                     scores_depend_on_vision: bool = False, warmup_fails: bool = False,
                     placed_on: str = "cuda", has_vision: bool = True,
                     fast_kernels: bool = True) -> tuple[Path, str]:
    """Returns (snapshot path, sha256 of its inference.py)."""
    snapshot = root / "models--internlm--Intern-Decision-4B" / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    text = INFERENCE_TEMPLATE.format(token_offset=token_offset, scores_depend_on_vision=scores_depend_on_vision,
                                     warmup_fails=warmup_fails, placed_on=placed_on, has_vision=has_vision,
                                     fast_kernels=fast_kernels)
    (snapshot / "inference.py").write_text(text)
    return snapshot, hashlib.sha256(text.encode()).hexdigest()
