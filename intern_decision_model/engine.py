"""Startup checks and per-call scoring around the checkpoint's own DecisionEngine, whose prompt and readout are never
ours: start() refuses to serve when a check fails (docs/configuration.md)."""
from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from wire import answer as wire_answer
from wire.facts import ModelFacts

from .checkpoint import StartupRefused, load_inference_module, verify_snapshot_path
from .graph_start import GraphState, WarmUp, start_graphs
from .graphs import OFF, GraphFacts
from .guard import CallGuard
from .kernels import kernel_facts, slow_path_refusal
from .offline import set_offline
from .settings import PINNED_REPO, Settings

log = logging.getLogger("intern_decision.engine")

GIB = 1024 ** 3

# The decision scored at startup: plain, short, and valid under every MAX_TOKENS the real prompt fits in.
WARMUP_REQUEST = {
    "state": {"order": "shipped", "customer_request": "refund", "days_since_delivery": 3},
    "questions": {
        "q": {
            "type": "choice",
            "instructions": "Should the refund be approved?",
            "criteria": {"approve": "Approve the refund.", "reject": "Reject the refund."},
        }
    },
}

# HFBackend.encode renders the chat template with exactly these arguments.
TEMPLATE_ARGUMENTS = dict(tokenize=False, add_generation_prompt=False, enable_thinking=False, add_vision_id=True)


def render_prompt(module: ModuleType, tokenizer: Any, request: dict) -> str:
    """The chat-template text predict() tokenises for this request, from the checkpoint's own functions."""
    compiled = module.compile_row(module.validate_request(request))
    return tokenizer.apply_chat_template(compiled.messages, **TEMPLATE_ARGUMENTS)


class PromptCapture:
    """Keeps the last text the tokenizer's chat template rendered, by wrapping apply_chat_template on the instance:
    the prompt hash is taken from the very text the model saw, never from a second render."""

    def __init__(self, tokenizer: Any):
        self._last: str | None = None
        render = tokenizer.apply_chat_template

        def rendering(*args: Any, **kwargs: Any) -> Any:
            self._last = rendered = render(*args, **kwargs)
            return rendered

        tokenizer.apply_chat_template = rendering

    def clear(self) -> None:
        self._last = None

    def take(self) -> str | None:
        """The text rendered since clear(), or None if predict() rendered none through the tokenizer."""
        last, self._last = self._last, None
        return last if isinstance(last, str) else None


def count_tokens(tokenizer: Any, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def scored_part(result: dict) -> dict:
    """What must be bit-identical between two scorings of one request (timing is not)."""
    return {key: result.get(key) for key in ("answers", "usage", "calibration")}


def vision_stub(torch: Any) -> Any:
    class VisionTowerRemoved(torch.nn.Module):
        """Stands where model.model.visual was; this service takes no images."""

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the vision tower was removed at startup (INTERN_DECISION_KEEP_VISION=0)")

    return VisionTowerRemoved()


def check_cuda(torch: Any, device: str) -> None:
    if not torch.cuda.is_available():
        raise StartupRefused(f"CUDA check failed: {device} was asked for and torch sees no CUDA device "
                             f"(set INTERN_DECISION_DEVICE=cpu explicitly to run on the CPU)")
    major, minor = torch.cuda.get_device_capability(device)
    arch = f"sm_{major}{minor}"
    arch_list = list(torch.cuda.get_arch_list())
    if arch not in arch_list:
        raise StartupRefused(f"CUDA check failed: the card is {arch} and torch was built for {arch_list}")


def apply_vram_cap(torch: Any, device: str, cap_gib: float | None) -> None:
    if cap_gib is None:
        return
    if not device.startswith("cuda"):
        raise StartupRefused("VRAM cap check failed: INTERN_DECISION_VRAM_CAP_GIB is set but the device is the CPU")
    total = torch.cuda.get_device_properties(device).total_memory
    fraction = cap_gib * GIB / total
    if fraction > 1:
        raise StartupRefused(f"VRAM cap check failed: {cap_gib} GiB is more than the card's {total / GIB:.1f} GiB")
    torch.cuda.set_per_process_memory_fraction(fraction, device)


class ServingEngine:
    def __init__(self, settings: Settings, device: str, module: ModuleType, engine: Any, guard: CallGuard,
                 facts: ModelFacts, graphs: GraphState = GraphState(OFF, "", None)):
        self.settings = settings
        self.device = device
        self._module = module
        self._engine = engine
        self._guard = guard
        self.facts = facts
        self.graphs = graphs
        self._answer_facts = facts.of_answer()
        self._prompts = PromptCapture(engine.tokenizer)

    @classmethod
    def start(cls, settings: Settings, device: str, torch: Any = None) -> "ServingEngine":
        started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        set_offline()
        if not settings.pinned:
            log.warning("UNPINNED: %s override the contract's pins (INTERN_DECISION_ALLOW_UNPINNED=1); "
                        "/health and the info metric report pinned=false", ", ".join(settings.unpinned))
        verify_snapshot_path(settings.checkpoint, settings.revision)
        module = load_inference_module(settings.checkpoint, settings.inference_sha256)
        if torch is None:
            import torch
        if device != "cpu":
            check_cuda(torch, device)
        apply_vram_cap(torch, device, settings.vram_cap_gib)
        engine = module.DecisionEngine(checkpoint=str(settings.checkpoint), max_length=settings.max_tokens,
                                       device=device, dtype=settings.dtype)
        model = engine.backend.model
        if device != "cpu":
            placed = next(model.parameters()).device
            if placed.type != "cuda":
                raise StartupRefused(f"CUDA check failed: the model's weights are on {placed}, not on {device}")
        kernels = kernel_facts(model)
        refusal = slow_path_refusal(kernels, device, settings.allow_slow_kernels)
        if refusal is not None:
            raise StartupRefused(refusal)
        guard = CallGuard(torch, device, settings.release_slack_bytes)

        first = cls._warm_up(engine)
        cls._check_prompt_is_what_predict_scored(module, engine.tokenizer, first)
        vision = "kept"
        if not settings.keep_vision:
            if not hasattr(model.model, "visual"):
                raise StartupRefused("vision-tower check failed: the model has no model.model.visual to remove "
                                     "(set INTERN_DECISION_KEEP_VISION=1 for a model without one)")
            model.model.visual = vision_stub(torch)
            guard.release()
            second = cls._warm_up(engine)
            if scored_part(second) != scored_part(first):
                raise StartupRefused("vision-tower check failed: the warm-up scored differently without the tower "
                                     f"({scored_part(first)} before, {scored_part(second)} after)")
            vision = "removed"
        graphs = start_graphs(torch, engine, settings, device, WarmUp(WARMUP_REQUEST, first), scored_part)
        guard.release()  # what a capture or a graph turned off left in the cache is not the baseline; the graphs'
        # own memory is: every graph is captured by now, none on the serving path
        guard.mark_baseline()

        facts = ModelFacts(
            name=module.MODEL_NAME,
            repo=PINNED_REPO,
            revision=settings.revision,
            inference_sha256=settings.inference_sha256,
            prompt_version=settings.prompt_version,
            dtype=settings.dtype,
            device=device,
            vram_cap_gib=settings.vram_cap_gib,
            max_tokens=settings.max_tokens,
            vision_tower=vision,
            fla_version=kernels.fla_version,
            causal_conv1d_version=kernels.causal_conv1d_version,
            linear_attention=kernels.linear_attention,
            slow_kernels_allowed=settings.allow_slow_kernels,
            pinned=settings.pinned,
            boot_id=uuid.uuid4().hex,
            started_at=started_at,
            cuda_graphs=graphs.mode,
            cuda_graphs_reason=graphs.reason,
        )
        log.info("serving %s", " ".join(f"{key}={value}" for key, value in facts.as_dict().items()))
        return cls(settings, device, module, engine, guard, facts, graphs)

    @staticmethod
    def _warm_up(engine: Any) -> dict:
        try:
            result = engine.predict(WARMUP_REQUEST)
        except Exception as exc:
            raise StartupRefused(f"warm-up check failed: the warm-up decision did not score: "
                                 f"{type(exc).__name__}: {exc}") from exc
        answer = (result.get("answers") or {}).get("q") or {}
        if set(answer.get("probabilities") or {}) != set(WARMUP_REQUEST["questions"]["q"]["criteria"]):
            raise StartupRefused(f"warm-up check failed: the warm-up answer has no probabilities per option: {result}")
        return result

    @staticmethod
    def _check_prompt_is_what_predict_scored(module: ModuleType, tokenizer: Any, warm_up: dict) -> None:
        text = render_prompt(module, tokenizer, WARMUP_REQUEST)
        counted = count_tokens(tokenizer, text)
        reported = wire_answer.input_tokens(warm_up)
        if counted != reported:
            raise StartupRefused(f"prompt-hash check failed: the rendered prompt is {counted} tokens, "
                                 f"predict() reported {reported}; refusing to hash a prompt the model never saw")

    @property
    def memory(self) -> tuple[int, int, int]:
        """(reserved, allocated, peak reserved) bytes on the device; 0 on the CPU."""
        guard = self._guard
        return guard.reserved_bytes(), guard.allocated_bytes(), guard.peak_reserved_bytes()

    def graph_facts(self) -> GraphFacts:
        """What the CUDA graphs do now (mode, shapes captured and refused, memory, calls replayed and eager)."""
        return self.graphs.facts()

    @property
    def memory_baseline(self) -> int:
        """Reserved bytes after the warm-up, what a call's memory returns to (0 on the CPU)."""
        return self._guard.baseline or 0

    def answer_calls(self, requests: list[dict]) -> Iterator[dict]:
        """Stops at the first call that fails; an answer is predict()'s output plus prompt_sha256, prompt_version and
        the model facts."""
        for request in requests:
            yield self._guard.call(self._score, request)

    def _score(self, request: dict) -> dict:
        self._prompts.clear()
        predicted = self._engine.predict(request)
        # a checkpoint whose predict() renders its prompt some other way is hashed from a render of our own
        prompt = self._prompts.take() or render_prompt(self._module, self._engine.tokenizer, request)
        return wire_answer.written(predicted, hashlib.sha256(prompt.encode("utf-8")).hexdigest(),
                                   self.settings.prompt_version, self._answer_facts)

    def close(self) -> None:
        if self.graphs.runner is not None:
            self.graphs.runner.turn_off("the engine closed")
        self._engine = None
        self._guard.release()
