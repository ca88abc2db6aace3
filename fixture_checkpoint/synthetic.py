"""Build a synthetic checkpoint with Intern-Decision-4B's shapes: Qwen3.5-4B's architecture, random seeded bf16 weights.

The snapshot has the real one's layout in a Hugging Face hub cache:

    <root>/models--internlm--Intern-Decision-4B/refs/main
    <root>/models--internlm--Intern-Decision-4B/snapshots/<revision>/
        config.json  generation_config.json  model.safetensors.index.json  model-0000N-of-0000M.safetensors
        tokenizer.json  tokenizer_config.json  chat_template.jinja
        preprocessor_config.json  video_preprocessor_config.json  processor_config.json  inference.py

so that the real loading and forward path runs at the real size: 4,539,265,536 parameters (text: hidden 2560,
32 layers with every fourth full attention, intermediate 9216, 16 heads / 4 KV heads, head_dim 256, vocabulary
248,320, tied embeddings; vision: depth 24, hidden 1024), about 9.1 GB. ``--size small`` writes the same structure
with tiny dimensions, for tests.

* inference.py, the chat template, the added tokens and the processor files are the tiny fixture's (build.py). The
  tokenizer is the fixture's too, trained with merges enough to make the checkpoint's own prompt text and the
  words of prompt_corpus one token each: the fixture's 192 merges make a prompt about twice as long as Qwen's
  tokenizer does, and the 289-token anchor prompt would not fit. Its ids only have to fit the vocabulary.
* Weights are never held as a model: every tensor is generated on its own from a generator seeded with its name
  and written shard by shard, by worker processes in parallel. Matrices get Hugging Face's own init
  (normal(0, initializer_range), zero biases); the small remaining parameters (norms, the Gated DeltaNet decay
  terms) are initialised by the model class's own _init_weights. The bytes do not depend on the number of workers.
* The revision is the sha1 of the snapshot's content, as for the fixture.

Usage:  python -m fixture_checkpoint.synthetic --root DIR [--size full|small] [--workers N] [--max-shard-mib M]
prints one JSON line: {"checkpoint", "revision", "inference_sha256", "size", "parameters", "weight_bytes", "shards",
"seconds"}.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fixture_checkpoint import build as fixture
from fixture_checkpoint.prompt_corpus import training_texts

SEED = 20260930
SYNTHETIC_BPE_VOCAB = 3072  # an upper bound: training stops once every word of the corpus is one token

_LAYER_PATTERN = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]

SIZES = {
    "full": {
        "text": dict(
            vocab_size=248320, hidden_size=2560, intermediate_size=9216, num_hidden_layers=32,
            num_attention_heads=16, num_key_value_heads=4, head_dim=256,
            linear_conv_kernel_dim=4, linear_key_head_dim=128, linear_value_head_dim=128,
            linear_num_key_heads=16, linear_num_value_heads=32, max_position_embeddings=262144,
            # rotary dims = 256 * 0.25 = 64, i.e. 32 frequencies: mrope_section sums to 32
            mrope_section=[11, 11, 10],
        ),
        "vision": dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16,
                       num_position_embeddings=2304),
    },
    "small": {
        "text": dict(
            vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=8,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4, max_position_embeddings=32768,
            mrope_section=[2, 1, 1],
        ),
        "vision": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, num_position_embeddings=64),
    },
}


def make_config(size: str, ids: dict):
    """The Qwen3_5Config of a size, with the tokenizer's special-token ids."""
    from transformers import Qwen3_5Config

    text = dict(SIZES[size]["text"])
    vision = dict(SIZES[size]["vision"])
    mrope_section = text.pop("mrope_section")
    text.update(
        layer_types=_LAYER_PATTERN * (text["num_hidden_layers"] // len(_LAYER_PATTERN)),
        hidden_act="silu",
        rms_norm_eps=1e-6,
        rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                             mrope_section=mrope_section, mrope_interleaved=True),
        attention_bias=False,
        tie_word_embeddings=True,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=None,
        bos_token_id=None,
    )
    vision.update(
        in_channels=3,
        patch_size=fixture.PATCH_SIZE,
        temporal_patch_size=fixture.TEMPORAL_PATCH_SIZE,
        spatial_merge_size=fixture.MERGE_SIZE,
        out_hidden_size=text["hidden_size"],
        hidden_act="gelu_pytorch_tanh",
    )
    config = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True,
                           **fixture.special_token_ids(ids))
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    config.dtype = "bfloat16"
    return config


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple
    init: str  # "normal" (seeded, std), "zeros", or "value" (computed here by the model class's own init)
    std: float = 0.0
    value: object = None  # a small float32 tensor for "value"

    @property
    def nbytes(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return 2 * count  # bf16


def meta_model(config):
    import torch
    from transformers import Qwen3_5ForConditionalGeneration

    with torch.device("meta"):
        return Qwen3_5ForConditionalGeneration(config)


def parameter_count(config) -> int:
    """Distinct parameters (tied embeddings counted once), computed on the meta device: nothing is allocated.

    The checkpoint is written from tensor_plan; this count comes from the model class instead, so the tests hold the
    plan to it (every tensor once, the published 4B size) with a figure the plan did not produce."""
    return sum(p.numel() for p in meta_model(config).parameters())


def tensor_plan(config) -> list:
    """Every tensor the checkpoint holds, in the model's order, with how it is initialised.

    Tied weights are written once, under the name save_pretrained keeps (the input embeddings).
    """
    import torch
    from torch import nn

    model = meta_model(config)
    text_std = config.get_text_config().initializer_range
    vision_std = config.vision_config.initializer_range
    matrix_types = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Embedding)
    torch.manual_seed(SEED)  # the model's own init draws its few random small values from the global generator
    specs, seen = [], set()
    for module_name, module in model.named_modules():
        own = [(name, param) for name, param in module.named_parameters(recurse=False) if id(param) not in seen]
        if not own:
            continue
        seen.update(id(param) for _, param in own)
        std = vision_std if module_name.startswith("model.visual") else text_std
        values = {}
        if not isinstance(module, matrix_types):
            # Small parameters (norm weights, decay terms): materialise only this module's own tensors on the CPU
            # and let the model class initialise them exactly as it would.
            module.to_empty(device="cpu", recurse=False)
            model._init_weights(module)
            values = {name: param.detach().float().clone() for name, param in module.named_parameters(recurse=False)}
        for name, param in own:
            full = f"{module_name}.{name}" if module_name else name
            if name in values:
                specs.append(TensorSpec(full, tuple(param.shape), "value", value=values[name]))
            elif name == "bias":
                specs.append(TensorSpec(full, tuple(param.shape), "zeros"))
            else:
                specs.append(TensorSpec(full, tuple(param.shape), "normal", std=std))
    return specs


def pack_shards(specs: list, max_bytes: int) -> list:
    """Consecutive tensors into shards of at most max_bytes (a larger tensor gets a shard of its own)."""
    shards, current, size = [], [], 0
    for spec in specs:
        if current and size + spec.nbytes > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.append(spec)
        size += spec.nbytes
    if current:
        shards.append(current)
    return shards


def tensor_seed(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{SEED}/{name}".encode()).digest()[:8], "big") & (2 ** 63 - 1)


def make_tensor(spec: TensorSpec):
    import torch

    if spec.init == "zeros":
        return torch.zeros(spec.shape, dtype=torch.bfloat16)
    if spec.init == "value":
        return spec.value.to(torch.bfloat16)
    generator = torch.Generator().manual_seed(tensor_seed(spec.name))
    return torch.empty(spec.shape, dtype=torch.bfloat16).normal_(0.0, spec.std, generator=generator)


def write_shard(job) -> str:
    """Worker: generate one shard's tensors and save them. job = (path, specs)."""
    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    path, specs = job
    save_file({spec.name: make_tensor(spec) for spec in specs}, str(path), metadata={"format": "pt"})
    return Path(path).name


def write_weights(snap: Path, config, workers: int, max_shard_bytes: int) -> dict:
    """All shards and model.safetensors.index.json; returns {parameters, weight_bytes, shards}."""
    specs = tensor_plan(config)
    shards = pack_shards(specs, max_shard_bytes)
    names = [f"model-{index + 1:05d}-of-{len(shards):05d}.safetensors" for index in range(len(shards))]
    jobs = [(snap / name, shard) for name, shard in zip(names, shards)]
    workers = max(1, min(workers, len(jobs)))
    if workers == 1:
        for job in jobs:
            write_shard(job)
    else:
        import multiprocessing

        # spawn: the workers must not inherit this process's torch thread pools
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for _ in pool.imap_unordered(write_shard, jobs):
                pass
    weight_map = {spec.name: name for name, shard in zip(names, shards) for spec in shard}
    total = sum(spec.nbytes for spec in specs)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (snap / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    count = sum(spec.nbytes // 2 for spec in specs)
    return {"parameters": count, "weight_bytes": total, "shards": len(shards)}


def prompt_texts() -> tuple:
    """The fixed texts of the fixture's inference.py prompt, read from its source without running it."""
    wanted = ("SYSTEM_PROMPT", "USER_PREAMBLE", "DEFAULT_YES", "DEFAULT_NO")
    found = {}
    for node in ast.parse(fixture.INFERENCE_SOURCE.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in wanted and isinstance(node.value, ast.Constant):
                found[node.targets[0].id] = node.value.value
    missing = [name for name in wanted if name not in found]
    if missing:
        raise RuntimeError(f"inference.py no longer defines {missing} as plain strings")
    return tuple(found[name] for name in wanted)


def build_synthetic(root: Path, size: str = "full", workers: int | None = None,
                    max_shard_bytes: int = 1 << 30) -> dict:
    """Build (or reuse) the synthetic snapshot under ``root``; returns the pins plus build facts."""
    facts, seconds = {}, {}

    def write_content(snap: Path) -> None:
        started = time.perf_counter()
        vocab = SIZES[size]["text"]["vocab_size"]
        ids = fixture.write_tokenizer(snap, model_vocab=vocab, bpe_vocab=SYNTHETIC_BPE_VOCAB,
                                      texts=training_texts(prompt_texts()), exact=False)
        config = make_config(size, ids)
        config.save_pretrained(str(snap))
        fixture.write_generation_config(snap, ids)
        fixture.write_processor_configs(snap)
        fixture.copy_inference(snap)
        seconds["files"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        facts.update(write_weights(snap, config, workers or os.cpu_count() or 1, max_shard_bytes))
        seconds["weights"] = round(time.perf_counter() - started, 2)

    started = time.perf_counter()
    pins = fixture.build_snapshot(root, write_content)
    seconds["total"] = round(time.perf_counter() - started, 2)
    return {**pins, "size": size, **facts, "seconds": seconds}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", required=True, type=Path, help="HF hub cache root to build into")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--workers", type=int, default=None, help="processes writing shards (default: one per CPU)")
    parser.add_argument("--max-shard-mib", type=int, default=1024)
    args = parser.parse_args(argv)
    print(json.dumps(build_synthetic(args.root, args.size, args.workers, args.max_shard_mib << 20)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
