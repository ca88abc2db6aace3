"""Comparisons between sets of answers: accuracy, row-by-row agreement, the negative control, chunk equality."""
from __future__ import annotations

from .rows import Prediction, Row

FOLLOW, STAY, OTHER = "follow", "stay", "other"
# What must be identical between a chunked answer and the same question asked in its own request.
CHUNK_KEYS = ("probabilities", "top", "confidence", "input_tokens")


def accuracy(rows: list[Row], predictions: dict[str, Prediction]) -> dict:
    """Correct tops overall and per set; rows without a prediction count as scored wrong and as missing."""
    sets: dict[str, dict] = {}
    for row in rows:
        counts = sets.setdefault(row.set, {"correct": 0, "total": 0, "missing": 0})
        counts["total"] += 1
        prediction = predictions.get(row.id)
        if prediction is None:
            counts["missing"] += 1
        elif prediction.top == row.label:
            counts["correct"] += 1
    overall = {key: sum(counts[key] for counts in sets.values()) for key in ("correct", "total", "missing")}
    for counts in [overall, *sets.values()]:
        counts["accuracy"] = counts["correct"] / counts["total"] if counts["total"] else None
    return {"overall": overall, "per_set": dict(sorted(sets.items()))}


def compare_predictions(rows: list[Row], first: dict[str, Prediction], second: dict[str, Prediction]) -> dict:
    """Rows whose tops differ and the largest absolute probability difference over every row and option."""
    differing: list[str] = []
    missing: list[str] = []
    largest, largest_at = 0.0, None
    compared = 0
    for row in rows:
        a, b = first.get(row.id), second.get(row.id)
        if a is None or b is None:
            missing.append(row.id)
            continue
        compared += 1
        if a.top != b.top:
            differing.append(row.id)
        for option_id in row.option_ids:
            gap = abs(a.probabilities[option_id] - b.probabilities[option_id])
            if gap > largest:
                largest, largest_at = gap, {"id": row.id, "option": option_id}
    return {"compared": compared, "tops_differ": len(differing), "differing_ids": differing,
            "missing_ids": missing, "max_probability_gap": largest, "max_gap_at": largest_at}


def rotation_outcome(row: Row, original_top: str, rotated_top: str, places: int = 1) -> str:
    """follow: the top moved with its description to the next id; stay: the top kept its id; other: neither."""
    ids = row.option_ids
    moved_to = ids[(ids.index(original_top) + places) % len(ids)]
    if rotated_top == moved_to:
        return FOLLOW
    if rotated_top == original_top:
        return STAY
    return OTHER


def negative_control(rows: list[Row], original: dict[str, Prediction], rotated: dict[str, Prediction],
                     places: int = 1) -> dict:
    counts = {FOLLOW: 0, STAY: 0, OTHER: 0}
    label_follows = 0
    scored = 0
    for row in rows:
        before, after = original.get(row.id), rotated.get(row.id)
        if before is None or after is None:
            continue
        scored += 1
        counts[rotation_outcome(row, before.top, after.top, places)] += 1
        ids = row.option_ids
        if after.top == ids[(ids.index(row.label) + places) % len(ids)]:
            label_follows += 1
    return {"rows": len(rows), "scored": scored, **counts, "label_follows": label_follows,
            "follow_rate": counts[FOLLOW] / scored if scored else None,
            "stay_rate": counts[STAY] / scored if scored else None}


def chunk_differences(chunked: dict, alone: dict) -> list[str]:
    """The keys among CHUNK_KEYS whose values are not exactly equal (every number compared as given)."""
    return [key for key in CHUNK_KEYS if chunked.get(key) != alone.get(key) or key not in chunked]


def facts_differences(before: dict, after: dict) -> dict:
    """Keys whose values changed between two /health fact sets, with both values."""
    keys = sorted(set(before) | set(after))
    return {key: {"before": before.get(key), "after": after.get(key)}
            for key in keys if before.get(key) != after.get(key)}
