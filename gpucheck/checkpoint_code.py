"""The checkpoint's own inference.py, loaded by path as the service loads it, and its prompt's token count."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

# HFBackend.encode renders the chat template with exactly these arguments.
TEMPLATE_ARGUMENTS = dict(tokenize=False, add_generation_prompt=False, enable_thinking=False, add_vision_id=True)


def load_inference(snapshot: Path):
    path = Path(snapshot) / "inference.py"
    source = path.read_bytes()
    name = "gpucheck_checkpoint_" + hashlib.sha256(source).hexdigest()[:16]
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[name] = module  # dataclasses in the file look their module up here
    exec(compile(source, str(path), "exec"), module.__dict__)
    return module


def prompt_tokens(module, tokenizer, request: dict) -> int:
    """The length predict() reports as usage.input_tokens, without running the model."""
    compiled = module.compile_row(module.validate_request(request))
    text = tokenizer.apply_chat_template(compiled.messages, **TEMPLATE_ARGUMENTS)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
