"""CUDA graphs beneath predict(): the model's forward recorded once per input shape and replayed; an uncovered call
runs eager (docs/benchmarks.md, "CUDA graphs")."""
from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from .guard import is_out_of_memory

log = logging.getLogger("intern_decision.graphs")

OFF, EXACT, BUCKETED = "off", "exact", "bucketed"
MAX_POSITIONS = 16  # predict() takes at most 16 questions
COVERED_KEYWORDS = frozenset({"input_ids", "attention_mask", "use_cache", "logits_to_keep"})
# For one unpadded row without a cache both return None in eager.
MASK_BUILDERS = ("create_causal_mask", "create_recurrent_attention_mask")


@dataclass(frozen=True, order=True)
class Shape:
    length: int
    positions: int

    def __str__(self) -> str:
        return f"{self.length}x{self.positions}"

    @classmethod
    def parse(cls, text: str) -> "Shape":
        length, _, positions = text.strip().partition("x")
        if length.isdigit() and positions.isdigit() and int(length) >= 1 and 1 <= int(positions) <= MAX_POSITIONS:
            return cls(int(length), int(positions))
        raise ValueError(f"not a shape LENGTHxPOSITIONS (positions 1..{MAX_POSITIONS}): {text!r}")


class Recorded(Protocol):
    output: Any  # replay() writes into its tensors

    def replay(self) -> None: ...


class Capture(Protocol):
    def record(self, run: Callable[[], Any]) -> Recorded: ...

    def reserved_bytes(self) -> int: ...


class CudaCapture:
    """One pool for every graph (replays never overlap, outputs are copied out) and one stream (torch keeps a cuBLAS
    workspace per stream for the process's life)."""

    WARMUPS = 3  # lazy initialisation and autotuning happen outside the capture

    def __init__(self, torch: Any, device: str):
        self._torch, self._device = torch, device
        self._pool = torch.cuda.graph_pool_handle()
        self._stream = torch.cuda.Stream(device)

    def record(self, run: Callable[[], Any]) -> Recorded:
        cuda = self._torch.cuda
        self._stream.wait_stream(cuda.current_stream(self._device))
        with cuda.stream(self._stream):
            for _ in range(self.WARMUPS):
                run()
        cuda.current_stream(self._device).wait_stream(self._stream)
        graph = cuda.CUDAGraph()
        # thread_local: another thread's CUDA call (the metrics) cannot poison the capture
        with cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
            output = run()
        graph.output = output
        return graph

    def reserved_bytes(self) -> int:
        """Measured with the cache emptied, as capture empties it."""
        cuda = self._torch.cuda
        cuda.synchronize(self._device)
        cuda.empty_cache()
        return int(cuda.memory_reserved(self._device))


@contextlib.contextmanager
def eager_masks(model: Any) -> Iterator[None]:
    """Under capture the mask builders would build a mask eager does not: they return None, as in eager."""
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
    largest = bucket_for(max_tokens, buckets)
    return [bucket for bucket in sorted(buckets) if bucket < max_tokens] + ([largest] if largest else [])


def logit_tolerance(gate: float) -> float:
    """A softmax (temperature ≥ 1) moves each p by at most p·(e^(2δ) − 1) when every logit moves by at most δ."""
    return math.log1p(gate) / 2


OUT_OF_MEMORY, BUDGET, DIFFERS = "out_of_memory", "budget", "differs"
REFUSALS = (OUT_OF_MEMORY, BUDGET, DIFFERS)


@dataclass(frozen=True)
class GraphFacts:
    mode: str
    reason: str  # "" when on or never asked for
    captured: tuple[Shape, ...]
    refused: dict[Shape, str]  # eager for good
    memory_bytes: int
    replayed: int
    eager: int

    def refused_by_kind(self) -> dict[str, int]:
        return {kind: sum(1 for why in self.refused.values() if why == kind) for kind in REFUSALS}


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
        length, count = input_ids.shape[1], positions.shape[0]
        self.input_ids[:, :length].copy_(input_ids)
        if length < self.shape.length:  # causal layers leave the first `length` positions as they are
            self.input_ids[:, length:].fill_(self._pad_id)
        self.positions[:count].copy_(positions)
        if count < self.shape.positions:
            self.positions[count:].copy_(positions[-1:].expand(self.shape.positions - count))
        self._recorded.replay()
        output = self._recorded.output
        return type(output)(logits=output.logits[:, :count].clone())


class GraphRunner:
    """Wraps model.forward: a shape with a proven graph is replayed, any other call runs eager."""

    def __init__(self, torch: Any, model: Any, capture: Capture, mode: str, budget_bytes: int,
                 buckets: tuple[int, ...] = (), gate: float = 0.01):
        if mode not in (EXACT, BUCKETED):
            raise ValueError(f"a graph runner runs exact or bucketed, not {mode!r}")
        self._torch, self._model, self._capture = torch, model, capture
        self.mode, self.budget_bytes, self.buckets = mode, budget_bytes, tuple(sorted(buckets))
        self.tolerance = 0.0 if mode == EXACT else logit_tolerance(gate)
        self._eager = model.forward
        self._device = next(model.parameters()).device
        self._pad_id = int(getattr(getattr(model, "config", None), "pad_token_id", None) or 0)
        self.graphs: dict[Shape, Graph] = {}
        self.refused: dict[Shape, str] = {}
        self.uncovered: Counter[Shape] = Counter()
        self.calls: Counter[str] = Counter(replayed=0, eager=0, captured=0)  # every key present: read live
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

    def facts(self) -> GraphFacts:
        return GraphFacts(self.mode if self.on else OFF, self.off_reason, tuple(sorted(self.graphs)),
                          dict(self.refused), self.memory_bytes, self.calls["replayed"], self.calls["eager"])

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
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
        """The largest first, so that the smaller ones reuse its memory."""
        for shape in sorted(set(shapes), reverse=True):
            if not self.on:
                return
            if shape in self.graphs or shape in self.refused:
                continue
            if self.memory_bytes >= self.budget_bytes:
                self._refuse(shape, BUDGET, f"the graphs hold {self.memory_bytes >> 20} MiB, "
                                            f"the budget {self.budget_bytes >> 20} MiB")
                continue
            self._capture_and_prove(shape)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        covered = self._covered(args, kwargs)
        graph = None
        if covered is not None:
            shape, input_ids, positions = covered
            graph = self.graphs.get(shape)
            if graph is None:
                self.uncovered[shape] += 1
        if graph is not None:
            try:
                output = graph.run(input_ids, positions)
            except Exception as exc:  # answered eager; no graph is trusted after this
                self.turn_off(f"replaying {shape} failed: {_first_line(exc)}")
            else:
                self.calls["replayed"] += 1
                return output
        self.calls["eager"] += 1
        return self._eager(*args, **kwargs)

    def _covered(self, args: tuple, kwargs: dict) -> tuple[Shape, Any, Any] | None:
        if args or self._paused or not self.on or not COVERED_KEYWORDS.issuperset(kwargs):
            return None
        if self._torch.is_grad_enabled():
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

    def _refuse(self, shape: Shape, kind: str, why: str) -> None:
        self.refused[shape] = kind
        log.warning("CUDA graph for %s not served (%s): %s", shape, kind, why)

    def _capture_and_prove(self, shape: Shape) -> None:
        before = self._capture.reserved_bytes()
        try:
            # not inference tensors: predict() may score under no_grad as well as inference_mode
            with self._torch.inference_mode(False), self._torch.no_grad():
                graph = Graph(self._torch, self._eager, shape, self._device, self._pad_id, self._capture,
                              lambda: eager_masks(self._model))
                self.calls["captured"] += 1
                worst = self._replay_against_eager(graph)
        except Exception as exc:
            if is_out_of_memory(exc, self._torch):  # the other shapes still may fit
                self._refuse(shape, OUT_OF_MEMORY, _first_line(exc))
            else:
                self.turn_off(f"capturing {shape} failed: {_first_line(exc)}")
            return
        finally:
            self.memory_bytes += max(0, self._capture.reserved_bytes() - before)
        if not worst <= self.tolerance:  # NaN included
            self._refuse(shape, DIFFERS, f"a replay differs from eager by {worst:.3g} in a logit "
                                         f"(at most {self.tolerance:.3g} in {self.mode} mode)")
            return
        self.graphs[shape] = graph
        log.info("CUDA graph captured and proven for %s (%d MiB in all)", shape, self.memory_bytes >> 20)

    def _replay_against_eager(self, graph: Graph) -> float:
        """Max |Δ| of the logits on random ids (fixed seed), so that a replay that did not recompute shows."""
        torch, shape = self._torch, graph.shape
        generator = torch.Generator().manual_seed(shape.length * 131 + shape.positions)
        vocabulary = int(self._model.get_input_embeddings().num_embeddings)
        input_ids = torch.randint(0, vocabulary, (1, shape.length), generator=generator).to(self._device)
        positions = torch.linspace(0, shape.length - 1, shape.positions).long().to(self._device)
        eager = self._eager(input_ids=input_ids, attention_mask=None, use_cache=False, logits_to_keep=positions).logits
        replayed = graph.run(input_ids, positions).logits
        if replayed.shape != eager.shape:
            return math.inf
        if torch.equal(replayed, eager):
            return 0.0
        return float((replayed.float() - eager.float()).abs().max())


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
