"""INV-5, no network: the environment that keeps huggingface_hub and transformers off every hub; standard library
only, so that it applies before they are imported (model.py sets the same two variables first)."""
from __future__ import annotations

import os

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def set_offline() -> None:
    os.environ.update(OFFLINE_ENV)
