"""The pinned snapshot: where it must sit, and loading its inference.py only after its hash matches (INV-3)."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class StartupRefused(RuntimeError):
    """The message names the check. The model must not serve."""


def verify_snapshot_path(checkpoint: Path, revision: str) -> None:
    if checkpoint.name != revision or checkpoint.parent.name != "snapshots":
        raise StartupRefused(f"checkpoint path check failed: {checkpoint} does not end in snapshots/{revision}")
    if not checkpoint.is_dir():
        raise StartupRefused(f"checkpoint path check failed: {checkpoint} is not a directory")


def load_inference_module(checkpoint: Path, expected_sha256: str) -> ModuleType:
    """Executes exactly the bytes that were hashed, under a name no other 'inference' can clash with."""
    path = checkpoint / "inference.py"
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise StartupRefused(f"inference.py hash check failed: cannot read {path}: {exc}") from None
    digest = hashlib.sha256(source).hexdigest()
    if digest != expected_sha256:
        raise StartupRefused(f"inference.py hash check failed: {path} has sha256 {digest}, "
                             f"the pin is {expected_sha256}")
    name = f"intern_decision_checkpoint_{digest[:16]}"
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses in the file look their module up here
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module
