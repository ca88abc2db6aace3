"""python -m gpucheck.shadowed --numpy VERSION  (run by the machine's own interpreter)

The service's environment sees the machine's packages, but with the carried numpy 1.x in front of the machine's
numpy 2 (the python backend stub of Triton 24.10 needs numpy 1.x). A package of the machine built for numpy 2 then
breaks on import: scipy 1.18 raises "module 'numpy' has no attribute 'long'", and transformers imports scipy and
scikit-learn as soon as they are installed (`generation/candidate_generator.py`), so the model class itself fails to
import. This lists the machine's distributions that cannot work beside that numpy, from their own metadata: those
whose requirement on numpy excludes it, and, transitively, those that require one of them. The install step hides
their import names from the service's interpreters, the stub's included (gpucheck.install), so that transformers
sees them as absent, as it does on the production image, which has neither.

Prints JSON: [{"distribution", "imports", "why"}].
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def hard_requirements(distribution: metadata.Distribution) -> list[Requirement]:
    """The requirements that hold without extras, on this interpreter."""
    wanted = []
    for text in distribution.requires or ():
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        wanted.append(requirement)
    return wanted


def import_names(distribution: metadata.Distribution) -> list[str]:
    """Top-level import names: top_level.txt, else the first parts of the files it installed."""
    listed = distribution.read_text("top_level.txt")
    if listed:
        return sorted({line.strip() for line in listed.splitlines() if line.strip()})
    names = set()
    for path in distribution.files or ():
        first = path.parts[0] if path.parts else ""
        if not first or first == ".." or first.endswith((".dist-info", ".libs", ".data")) or first == "__pycache__":
            continue
        if len(path.parts) == 1:
            if not first.endswith((".py", ".so", ".pyd")):
                continue
            first = first.split(".", 1)[0]
        if first.isidentifier():
            names.add(first)
    return sorted(names)


def shadowed(numpy_version: str) -> list[dict]:
    distributions = {}
    for distribution in metadata.distributions():
        name = canonical(distribution.metadata["Name"] or "")
        if name and name not in distributions:
            distributions[name] = distribution
    requirements = {name: hard_requirements(distribution) for name, distribution in distributions.items()}
    why = {}
    for name, wanted in requirements.items():
        for requirement in wanted:
            if canonical(requirement.name) == "numpy" and not requirement.specifier.contains(numpy_version,
                                                                                             prereleases=True):
                why[name] = f"requires {requirement}"
    changed = True
    while changed:  # whatever requires a hidden distribution cannot import either
        changed = False
        for name, wanted in requirements.items():
            if name in why or name == "numpy":
                continue
            for requirement in wanted:
                if canonical(requirement.name) in why:
                    why[name] = f"requires {canonical(requirement.name)}"
                    changed = True
                    break
    return [{"distribution": name, "imports": import_names(distributions[name]), "why": reason}
            for name, reason in sorted(why.items())]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.shadowed")
    parser.add_argument("--numpy", required=True, help="the numpy version the service's environment runs")
    args = parser.parse_args(argv)
    print(json.dumps(shadowed(args.numpy)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
