"""The sequence lengths flash-linear-attention's kernels are warmed at, and which of its compiles a length needs.

Of the kernels the chunked gated delta rule runs (fla 0.5.2), one autotunes on a key that depends on the length:
the l2norm of the queries and keys (`use_qk_l2norm_in_kernel`), keyed on `NB = cdiv(rows, 2048 * 32)`, where rows
are the tokens times the heads it is given (the model repeats its 16 key heads up to its 32 value heads first). With
32 heads that is one bucket per 2,048 tokens: 1-2,048, 2,049-4,096, 4,097-6,144 and 6,145-8,192. NB is a
compile-time constant, so each bucket is its own compile and its own autotuning. Every other kernel of that path
keys on head counts, head dimensions and the chunk size only.

The check sends the shapes' calls (gpucheck.shapes) and, through the acceptance kit's checks 5 and 6, states grown
toward MAX_TOKENS one probe at a time, at lengths nobody can list in advance: any length from the smallest prompt
to MAX_TOKENS. So the warm-up takes the shapes' own lengths first (the timed ones are what the latency table
measures), then one length inside each bucket they leave out, so that no request of the check autotunes.
"""
from __future__ import annotations

import math

from gpucheck import shapes

MAX_TOKENS = 8192  # the model's default MAX_TOKENS (intern_decision_model.settings): the longest call the check sends
L2NORM_ROWS_PER_BUCKET = 2048 * 32  # fla 0.5.2, fla/modules/l2norm.py: NB = triton.cdiv(T, 2048 * 32)
HEADS = 32  # Intern-Decision-4B's linear-attention value heads; the keys and queries are repeated up to them
# The 21 criteria's two calls over the anchor's state, with the synthetic checkpoint's tokenizer (which counts like
# the real one): 16 questions, then 5.
CRITERIA_CALLS = (798, 364)


def bucket(tokens: int, heads: int = HEADS) -> int:
    """The l2norm kernel's autotuning key (NB) for a call of this many tokens."""
    return math.ceil(tokens * heads / L2NORM_ROWS_PER_BUCKET)


def shape_lengths() -> list[int]:
    """The lengths of the shapes' calls: the timed shapes' in the order they are measured, then the probe's."""
    timed = [target for _, _, target, is_timed in shapes.SHAPES.values() if target and is_timed]
    untimed = [target for _, _, target, is_timed in shapes.SHAPES.values() if target and not is_timed]
    ordered = []
    for length in [timed[0], *CRITERIA_CALLS, *timed[1:], *untimed]:
        if length not in ordered:
            ordered.append(length)
    return ordered


def sent_buckets(max_tokens: int = MAX_TOKENS) -> set[int]:
    """Every bucket a call of the check may fall in: the kit's growth probes reach any length up to max_tokens."""
    return {bucket(length) for length in range(1, max_tokens + 1)}


def warm_lengths(max_tokens: int = MAX_TOKENS) -> list[int]:
    """The shapes' lengths, then the middle of each bucket none of them falls in (in the order to warm them: the
    warm-up may be cut, and the in-process run compiles what it did not reach)."""
    lengths = shape_lengths()
    covered = {bucket(length) for length in lengths}
    rows = L2NORM_ROWS_PER_BUCKET // HEADS  # tokens per bucket
    for missing in sorted(sent_buckets(max_tokens) - covered):
        lengths.append(min(max_tokens, (missing - 1) * rows + rows // 2 + 1))
    return lengths


def where_compiled(call_lengths: dict, warmed: list[int]) -> dict:
    """{shape: {tokens: "warm-up" | "in-process"}}: whether the warm-up already compiled and autotuned the bucket of
    each call's length, or the in-process run's first call of it did."""
    done = {bucket(length) for length in warmed}
    return {name: {str(tokens): "warm-up" if bucket(tokens) in done else "in-process" for tokens in lengths}
            for name, lengths in call_lengths.items()}
