"""CUDA graphs beneath predict(): the model's forward recorded once per input shape and replayed; predict() stays
the checkpoint's own, and a call the runner does not cover runs eager (docs/benchmarks.md, "CUDA graphs")."""
from __future__ import annotations

import contextlib
import logging
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from .guard import is_out_of_memory

log = logging.getLogger("intern_decision.graphs")

OFF, EXACT, BUCKETED = "off", "exact", "bucketed"
MAX_POSITIONS = 16  # predict() reads one position per question, and takes at most 16 questions
COVERED_KEYWORDS = frozenset({"input_ids", "attention_mask", "use_cache", "logits_to_keep"})
# The mask builders the Qwen3.5 modelling calls; for one unpadded row without a cache both return None in eager.
MASK_BUILDERS = ("create_causal_mask", "create_recurrent_attention_mask")


@dataclass(frozen=True, order=True)
class Shape:
    length: int  # input tokens, padded to the bucket in bucketed mode
    positions: int  # positions whose logits are read (logits_to_keep)

    def __str__(self) -> str:
        return f"{self.length}x{self.positions}"

    @classmethod
    def parse(cls, text: str) -> "Shape":
        length, _, positions = text.strip().partition("x")
        if length.isdigit() and positions.isdigit() and int(length) >= 1 and 1 <= int(positions) <= MAX_POSITIONS:
            return cls(int(length), int(positions))
        raise ValueError(f"not a shape LENGTHxPOSITIONS (positions 1..{MAX_POSITIONS}): {text!r}")


class Recorded(Protocol):
    output: Any  # what the recorded forward returned; replay() writes into its tensors

    def replay(self) -> None: ...


class Capture(Protocol):
    """How a forward is recorded: CudaCapture on the card, a fake in the tests."""

    def record(self, run: Callable[[], Any]) -> Recorded: ...

    def reserved_bytes(self) -> int: ...


class CudaCapture:
    """torch.cuda.graph with one memory pool shared by every graph: replays never overlap and each output is copied
    out before the next replay, so the graphs may reuse each other's intermediate memory."""

    WARMUPS = 3  # on a side stream before capture, so that lazy initialisation and autotuning happen outside it

    def __init__(self, torch: Any, device: str):
        self._torch, self._device = torch, device
        self._pool = torch.cuda.graph_pool_handle()

    def record(self, run: Callable[[], Any]) -> Recorded:
        cuda = self._torch.cuda
        side = cuda.Stream(self._device)
        side.wait_stream(cuda.current_stream(self._device))
        with cuda.stream(side):
            for _ in range(self.WARMUPS):
                run()
        cuda.current_stream(self._device).wait_stream(side)
        graph = cuda.CUDAGraph()
        with cuda.graph(graph, pool=self._pool):
            output = run()
        graph.output = output
        return graph

    def reserved_bytes(self) -> int:
        return int(self._torch.cuda.memory_reserved(self._device))


@contextlib.contextmanager
def eager_masks(model: Any) -> Iterator[None]:
    """Under capture the mask builders would build an explicit mask where eager builds none for an unpadded row:
    they return None, as in eager, so that the graph records eager's kernels."""
    modules = masking_modules(model)
    saved = [(module, name, getattr(module, name)) for module in modules for name in MASK_BUILDERS]
    try:
        for module, name, _ in saved:
            setattr(module, name, _no_mask)
        yield
    finally:
        for module, name, builder in saved:
            setattr(module, name, builder)


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


def masking_modules(model: Any) -> list:
    names = {type(layer).__module__ for layer in model.modules()}
    return [sys.modules[name] for name in sorted(names)
            if name in sys.modules and all(hasattr(sys.modules[name], builder) for builder in MASK_BUILDERS)]


def unsupported(model: Any) -> str:
    """Why the runner cannot cover this model, or "" when it can."""
    config = getattr(model, "config", None)
    implementation = getattr(getattr(config, "get_text_config", lambda: config)(), "_attn_implementation", None)
    if implementation != "sdpa":
        return f"the attention runs {implementation!r}, not sdpa, whose causal path the graphs replay"
    if not masking_modules(model):
        return "the model's modelling module has no create_causal_mask / create_recurrent_attention_mask"
    return ""


def bucket_for(length: int, buckets: tuple[int, ...]) -> int | None:
    return next((bucket for bucket in sorted(buckets) if bucket >= length), None)


def buckets_needed(buckets: tuple[int, ...], max_tokens: int) -> list[int]:
    """The buckets an input of at most max_tokens can fall in."""
    largest = bucket_for(max_tokens, buckets)
    return [bucket for bucket in sorted(buckets) if bucket < max_tokens] + ([largest] if largest else [])


class Graph:

    def __init__(self, torch: Any, forward: Callable[..., Any], shape: Shape, device: Any, pad_id: int,
                 capture: Capture, masks: Callable[[], Any]):
        self.shape = shape
        self._pad_id = pad_id
        self.input_ids = torch.full((1, shape.length), pad_id, dtype=torch.long, device=device)
        self.positions = torch.zeros(shape.positions, dtype=torch.long, device=device)

        def run() -> Any:
            with masks():
                return forward(input_ids=self.input_ids, attention_mask=None, use_cache=False,
                               logits_to_keep=self.positions)

        self._recorded = capture.record(run)

    def run(self, input_ids: Any, positions: Any) -> Any:
        """The forward of this call, replayed: its output type, logits for exactly its positions."""
        length, count = input_ids.shape[1], positions.shape[0]
        self.input_ids[:, :length].copy_(input_ids)
        if length < self.shape.length:  # right padding: causal layers leave the first `length` positions as they are
            self.input_ids[:, length:].fill_(self._pad_id)
        self.positions[:count].copy_(positions)
        if count < self.shape.positions:
            self.positions[count:].copy_(positions[-1:].expand(self.shape.positions - count))
        self._recorded.replay()
        output = self._recorded.output
        return type(output)(logits=output.logits[:, :count].clone())


class GraphRunner:
    """Wraps model.forward: a covered call is replayed from its shape's graph, any other call runs eager."""

    def __init__(self, torch: Any, model: Any, capture: Capture, mode: str, budget_bytes: int,
                 buckets: tuple[int, ...] = (), on_growth: Callable[[int], None] = lambda grown: None):
        if mode not in (EXACT, BUCKETED):
            raise ValueError(f"a graph runner runs exact or bucketed, not {mode!r}")
        self._torch, self._model, self._capture = torch, model, capture
        self.mode, self.budget_bytes, self.buckets = mode, budget_bytes, tuple(sorted(buckets))
        self._on_growth = on_growth
        self._eager = model.forward
        self._device = next(model.parameters()).device
        self._pad_id = int(getattr(getattr(model, "config", None), "pad_token_id", None) or 0)
        self.graphs: dict[Shape, Graph] = {}
        self.sightings: Counter[Shape] = Counter()
        self.refused: set[Shape] = set()  # shapes whose capture ran out of memory: eager from then on
        self.calls: Counter[str] = Counter()  # replayed | eager | captured
        self.memory_bytes = 0
        self.off_reason = ""
        self._paused = False

    def install(self) -> "GraphRunner":
        self._model.forward = self
        return self

    def uninstall(self) -> None:
        if self._model.__dict__.get("forward") is self:
            del self._model.forward

    @property
    def on(self) -> bool:
        return not self.off_reason

    def turn_off(self, reason: str) -> None:
        log.warning("CUDA graphs off: %s", reason)
        self.off_reason, self.graphs = reason, {}
        self.uninstall()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Every call inside runs eager: the reference a gate compares against."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    def shape_of(self, length: int, positions: int) -> Shape | None:
        if self.mode == EXACT:
            return Shape(length, positions)
        bucket = bucket_for(length, self.buckets)
        return None if bucket is None else Shape(bucket, MAX_POSITIONS)

    def prepare(self, shapes: list[Shape]) -> None:
        """Capture these shapes now, the largest first, so that the smaller ones reuse its memory."""
        for shape in sorted(set(shapes), reverse=True):
            if shape not in self.graphs and self.on:
                self._record(shape)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        covered = self._covered(args, kwargs)
        if covered is None:
            self.calls["eager"] += 1
            return self._eager(*args, **kwargs)
        shape, input_ids, positions = covered
        graph = self.graphs.get(shape)
        if graph is None and shape not in self.refused:
            self.sightings[shape] += 1
            if self.sightings[shape] >= 2 and self.memory_bytes < self.budget_bytes:
                graph = self._record(shape)
        if graph is None:
            self.calls["eager"] += 1
            return self._eager(*args, **kwargs)
        self.calls["replayed"] += 1
        return graph.run(input_ids, positions)

    def _covered(self, args: tuple, kwargs: dict) -> tuple[Shape, Any, Any] | None:
        """(shape, input ids, positions) of a call the graphs can replay, else None."""
        if args or self._paused or not self.on or not COVERED_KEYWORDS.issuperset(kwargs):
            return None
        if self._torch.is_grad_enabled():  # a forward for autograd is not one to replay
            return None
        tensor = self._torch.Tensor
        input_ids, mask, positions = (kwargs.get(name) for name in ("input_ids", "attention_mask", "logits_to_keep"))
        if kwargs.get("use_cache") is not False or not isinstance(input_ids, tensor) \
                or not isinstance(positions, tensor):
            return None
        if input_ids.dim() != 2 or input_ids.shape[0] != 1 or input_ids.device != self._device:
            return None
        if positions.dim() != 1 or not 1 <= positions.shape[0] <= MAX_POSITIONS or positions.device != self._device:
            return None
        if mask is not None and (tuple(mask.shape) != tuple(input_ids.shape) or not bool(mask.all())):
            return None
        shape = self.shape_of(int(input_ids.shape[1]), int(positions.shape[0]))
        return None if shape is None else (shape, input_ids, positions)

    def _record(self, shape: Shape) -> Graph | None:
        before = self._capture.reserved_bytes()
        try:
            # normal tensors, not inference ones: predict() may score under no_grad as well as inference_mode
            with self._torch.inference_mode(False), self._torch.no_grad():
                graph = Graph(self._torch, self._eager, shape, self._device, self._pad_id, self._capture,
                              lambda: eager_masks(self._model))
        except Exception as exc:
            first_line = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
            if is_out_of_memory(exc, self._torch):  # this shape does not fit under the cap; the others still do
                self.refused.add(shape)
                log.warning("CUDA graph for %s not captured, out of memory: %s", shape, first_line)
            else:
                self.turn_off(f"capturing {shape} failed: {first_line}")
            return None
        grown = max(0, self._capture.reserved_bytes() - before)
        self.memory_bytes += grown
        self.graphs[shape] = graph
        self.calls["captured"] += 1
        self._on_growth(grown)
        log.info("CUDA graph captured for %s (%d MiB, %d MiB in all)", shape, grown >> 20, self.memory_bytes >> 20)
        return graph
