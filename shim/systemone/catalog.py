"""The names the model answers to on System One, and GET /v1/models: the canonical name pins the revision, the
others are exact aliases."""
from __future__ import annotations

from dataclasses import dataclass

from wire.facts import ModelFacts

from ..port.chunking import MAX_QUESTIONS_PER_CALL
from ..settings import ShimSettings
from .request import MAX_OPTIONS

REVISION_DIGITS = 12


@dataclass(frozen=True)
class Catalog:
    canonical: str
    aliases: tuple[str, ...]

    @classmethod
    def of(cls, facts: ModelFacts, settings: ShimSettings) -> "Catalog":
        short = facts.repo.rsplit("/", 1)[-1]
        canonical = f"{facts.repo}@{facts.revision[:REVISION_DIGITS]}"
        aliases = []
        for name in (facts.repo, short, *settings.extra_model_names):
            if name != canonical and name not in aliases:
                aliases.append(name)
        return cls(canonical, tuple(aliases))

    @property
    def names(self) -> tuple[str, ...]:
        return (self.canonical, *self.aliases)

    def accepts(self, name: str) -> bool:
        return name in self.names


def models_body(catalog: Catalog, facts: ModelFacts, settings: ShimSettings) -> dict:
    limits = {
        "max_questions_per_call": MAX_QUESTIONS_PER_CALL,
        "max_questions_per_request": settings.max_decisions,
        "max_options_per_question": MAX_OPTIONS,
        "max_tokens_per_call": facts.max_tokens,
        "max_batch_items": settings.max_batch_items,
    }
    pins = {"revision": facts.revision, "inference_sha256": facts.inference_sha256, "pinned": facts.pinned}
    described = (f"{facts.name} ({facts.repo} at revision {facts.revision[:REVISION_DIGITS]}, the pinned "
                 f"inference.py), served on Triton: choice, score and noul questions with calibrated "
                 f"probabilities; no images. Deltas from TypeSafe: confidence is the checkpoint's own (its "
                 f"calibrated top probability), not TypeSafe's rescaled confidence; at most {MAX_OPTIONS} options "
                 f"or levels per question (the checkpoint's single-token answer symbols; TypeSafe takes 255)")
    entries = [{"name": catalog.canonical, "description": described, "release_date": settings.model_release_date,
                **pins, "limits": limits}]
    entries += [{"name": alias, "description": f"Alias of {catalog.canonical}.",
                 "release_date": settings.model_release_date, "alias_of": catalog.canonical, **pins,
                 "limits": limits} for alias in catalog.aliases]
    return {"models": entries}
