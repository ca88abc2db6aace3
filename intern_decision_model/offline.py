"""INV-5, no network: the environment that keeps huggingface_hub and transformers off every hub. Standard library only,
so that whatever loads a checkpoint can apply it before torch or transformers are imported. model.py sets the same
two variables itself, as its first statements (tests/unit/test_engine_load.py holds it to them)."""
from __future__ import annotations

import os

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def set_offline() -> None:
    os.environ.update(OFFLINE_ENV)
