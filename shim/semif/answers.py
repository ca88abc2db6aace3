"""Results in the contract's shapes: one per ordering (INV-1: the model's numbers, only re-keyed), and the average."""
from __future__ import annotations

import math

from wire.answer import AnswerUnreadable, CallAnswer, ChoiceAnswer

from ..errors import IncompleteAnswer
from .plan import Call, Slot
from .request import Decision

READOUT = ("intern-decision: softmax over the answer-symbol logits before each <decision> marker, "
           "temperature-scaled by the checkpoint's inference.py")
PROBABILITY_STATUS = "calibrated"
LOG_FLOOR = 1e-300


def ordering_result(decision: Decision, result_id: str, slot: Slot, call: Call, answer: CallAnswer) -> dict:
    try:
        native = answer.field(slot.field)
    except AnswerUnreadable:
        raise IncompleteAnswer(f"the model's answer for decision {decision.id!r} lacks {slot.field!r}") from None
    if not isinstance(native, ChoiceAnswer):
        raise IncompleteAnswer(f"the model's answer for decision {decision.id!r} is a {native.type}, not a choice")
    option_ids = [option.id for option in slot.options]
    missing = [option_id for option_id in option_ids if option_id not in native.probabilities]
    if missing:
        raise IncompleteAnswer(f"the model's answer for decision {decision.id!r} lacks option ids {missing}")
    return {
        "id": result_id,
        "option_ids": option_ids,
        "probabilities": [native.probabilities[option_id] for option_id in option_ids],
        "top": native.choice,
        "confidence": native.confidence,
        "calibration": answer.calibration,
        "native": native.native,
        "input_tokens": answer.input_tokens,
        "prompt_sha256": answer.prompt_sha256,
        "prompt_version": answer.prompt_version,
        "model": answer.model_facts,
        "readout": READOUT,
        "probability_status": PROBABILITY_STATUS,
        "call": {"index": call.index, "field": slot.field, "questions": len(call.slots)},
    }


def averaged_result(decision: Decision, orderings: list[dict]) -> dict:
    """semif's averaged shape: mean log p per option, renormalised; the first maximum in the caller's order."""
    option_ids = decision.option_ids
    per_ordering = [dict(zip(result["option_ids"], result["probabilities"])) for result in orderings]
    mean_log = [sum(math.log(p[option_id] if p[option_id] > 0 else LOG_FLOOR) for p in per_ordering)
                / len(per_ordering) for option_id in option_ids]
    peak = max(mean_log)
    weights = [math.exp(value - peak) for value in mean_log]
    total = sum(weights)
    combined = [weight / total for weight in weights]
    top = option_ids[combined.index(max(combined))]
    return {
        "id": decision.id,
        "option_ids": option_ids,
        "combined": {
            "method": decision.orderings,
            "orderings": len(orderings),
            "probabilities": combined,
            "top": top,
            "agreement": sum(result["top"] == top for result in orderings) / len(orderings),
            "spread": {option_id: [min(p[option_id] for p in per_ordering), max(p[option_id] for p in per_ordering)]
                       for option_id in option_ids},
        },
        "orderings": orderings,
    }
