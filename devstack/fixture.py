"""Build (or reuse) the tiny fixture checkpoint and say which pins it needs."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devstack.triton import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "fixture_checkpoint" / "build.py"
DEFAULT_ROOT = REPO_ROOT / ".cache" / "fixture-hf"


@dataclass(frozen=True)
class FixturePins:
    checkpoint: Path
    revision: str
    inference_sha256: str

    def env(self) -> dict[str, str]:
        """The model-side settings that point the service at this checkpoint instead of the real pins, with the
        opt-in that overriding them needs (the model then reports pinned=false)."""
        return {
            "INTERN_DECISION_CHECKPOINT": str(self.checkpoint),
            "INTERN_DECISION_REVISION": self.revision,
            "INTERN_DECISION_INFERENCE_SHA256": self.inference_sha256,
            "INTERN_DECISION_ALLOW_UNPINNED": "1",
        }


def build_fixture(root: Path = DEFAULT_ROOT) -> FixturePins:
    """Runs the build script in its own process (it imports torch and transformers) and reads its JSON line."""
    done = subprocess.run([sys.executable, str(BUILD_SCRIPT), "--root", str(root)], check=True,
                          capture_output=True, text=True)
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    return FixturePins(Path(facts["checkpoint"]), facts["revision"], facts["inference_sha256"])
