#!/usr/bin/env python3
"""Build the tiny Intern-Decision-4B fixture checkpoint (a randomly initialised Qwen3.5), offline and reproducibly.

The result is a Hugging Face hub cache entry:

    <root>/models--internlm--Intern-Decision-4B/refs/main               <revision>, no trailing newline
    <root>/models--internlm--Intern-Decision-4B/snapshots/<revision>/
        config.json  model.safetensors  generation_config.json
        tokenizer.json  tokenizer_config.json  chat_template.jinja
        preprocessor_config.json  video_preprocessor_config.json  processor_config.json
        inference.py                                                   (a copy of fixture_checkpoint/inference.py)

so that both ``from_pretrained("internlm/Intern-Decision-4B", cache_dir=<root>, local_files_only=True)`` and
``from_pretrained(<snapshot path>)`` work.

* The weights are random (seeded), stored in bf16 like the real checkpoint; 4 text layers (3 Gated DeltaNet + 1 full
  attention) and a one-block vision tower, about 0.33 M parameters, about 0.7 MB on disk.
* The tokenizer is a byte-level BPE trained here on a few sentences, with the Qwen special tokens and the added
  special token ``<decision>``; every character of ANSWER_SYMBOLS is a single token.
* processor_config.json declares ``Qwen3_5Tokenizer`` (the "text-only processor" variant): AutoProcessor then
  returns the tokenizer, so neither pillow nor torchvision is needed. The real checkpoint's processor is a
  Qwen3VLProcessor; images are therefore not supported by the fixture.
* The revision is the sha1 of the snapshot's content (file names and bytes, sorted by name), so any change to the
  fixture (including inference.py) gives a new revision. Building is byte-for-byte reproducible.

Usage:  python fixture_checkpoint/build.py --root DIR
prints one JSON line: {"checkpoint": <absolute snapshot path>, "revision": ..., "inference_sha256": ...}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from intern_decision_model.offline import set_offline

set_offline()  # INV-5, before torch or transformers load
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ID = "internlm/Intern-Decision-4B"
HERE = Path(__file__).resolve().parent
INFERENCE_SOURCE = HERE / "inference.py"
SEED = 20240611
BPE_VOCAB = 448  # the 256 byte-level symbols + 192 merges
MODEL_VOCAB = 512  # >= BPE_VOCAB + added tokens, padded like real checkpoints
DECISION_TOKEN = "<decision>"

# Added tokens in id order after the BPE vocabulary: (content, special).
ADDED_TOKENS = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    (DECISION_TOKEN, True),
)

# The split regex Qwen3.5's tokenizer uses before byte-level encoding.
SPLIT_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# Training text for the toy BPE: prompt-like sentences, so that the fixture's prompts stay short.
TRAINING_TEXT = (
    "You are a careful decision assistant. Use the state and decision schema in the user message.",
    "Return one answer for every field using the supplied answer symbols.",
    "## State\n## Decision schema\n    A = yes: The answer is yes (affirmative, or align with the claim).",
    "    B = no: The answer is no (negative, or disagree with the claim).",
    '{\n    "team": "billing",\n    "urgency": "high"\n}',
    "The customer was charged twice and asks for the extra payment back. Which team should handle it?",
    "Rate the priority: low, medium, high. Choose exactly one option from the listed options.",
    "The quick brown fox jumps over the lazy dog; 0123456789 and a few more numbers 42, 3.14.",
    "Unicode text: naïve café, über, 日本語, 中文, emoji 🙂 and quotes \"like this\".",
    "system user assistant tool image video picture think reasoning content decision",
)

# A Qwen3.5-style chat template, written for this fixture (chat_template.jinja beside this file: the notes' template;
# same rendered format as the published Qwen3.5 template for system/user/assistant/tool turns, vision placeholders
# with add_vision_id, the <think> block of assistant turns after the last user query, and the generation prompt).
# The file ends its last line with a newline; the template the checkpoint carries never had one.
CHAT_TEMPLATE = (HERE / "chat_template.jinja").read_text(encoding="utf-8").removesuffix("\n")

# The vision geometry shared by the model's vision config and the (unused on CPU) processor configs.
PATCH_SIZE = 16
TEMPORAL_PATCH_SIZE = 2
MERGE_SIZE = 2


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n", encoding="utf-8")


def _train_tokenizer(bpe_vocab: int = BPE_VOCAB, texts=TRAINING_TEXT, exact: bool = True):
    """The byte-level BPE plus the added tokens. ``exact``: the BPE must reach ``bpe_vocab`` (the tiny fixture's);
    otherwise training may stop earlier, when the texts hold no pair left to merge."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=bpe_vocab,
        min_frequency=1,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(texts) * 3, trainer=trainer)
    if exact and tok.get_vocab_size() != bpe_vocab:
        raise RuntimeError("BPE training produced %d tokens, expected %d" % (tok.get_vocab_size(), bpe_vocab))
    for content, special in ADDED_TOKENS:
        token = AddedToken(content, special=special, normalized=False, single_word=False, lstrip=False, rstrip=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
    return tok


def write_tokenizer(snap: Path, model_vocab: int = MODEL_VOCAB, bpe_vocab: int = BPE_VOCAB,
                    texts=TRAINING_TEXT, exact: bool = True) -> dict:
    """Train and save the tokenizer (with the chat template); return the added tokens' ids."""
    from transformers import PreTrainedTokenizerFast

    raw = _train_tokenizer(bpe_vocab, texts, exact)
    ids = {content: raw.token_to_id(content) for content, _ in ADDED_TOKENS}
    if max(ids.values()) >= model_vocab:
        raise RuntimeError("added token ids exceed the model vocabulary")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=262144,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
        add_prefix_space=False,
        errors="replace",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(snap))
    # Declare the class Qwen checkpoints declare (transformers maps model_type qwen3_5 to its own Qwen tokenizer).
    config_path = snap / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["tokenizer_class"] = "Qwen2Tokenizer"
    _write_json(config_path, tokenizer_config)
    return ids


def special_token_ids(ids: dict) -> dict:
    """The Qwen3_5Config arguments that name the tokenizer's vision tokens."""
    return dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def write_generation_config(snap: Path, ids: dict) -> None:
    from transformers import GenerationConfig

    GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=False,
    ).save_pretrained(str(snap))


def _write_model(snap: Path, ids: dict) -> None:
    import torch
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text_config = dict(
        vocab_size=MODEL_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        # rotary dims = head_dim * partial_rotary_factor = 8, i.e. 4 frequencies: mrope_section must sum to 4.
        rope_parameters=dict(
            rope_type="default",
            rope_theta=10000000.0,
            partial_rotary_factor=0.25,
            mrope_section=[2, 1, 1],
            mrope_interleaved=True,
        ),
        attention_bias=False,
        tie_word_embeddings=False,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=None,
        bos_token_id=None,
    )
    vision_config = dict(
        depth=1,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        in_channels=3,
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        spatial_merge_size=MERGE_SIZE,
        out_hidden_size=64,  # must equal the text hidden_size
        num_position_embeddings=64,  # must be a perfect square
        hidden_act="gelu_pytorch_tanh",
    )
    config = Qwen3_5Config(
        text_config=text_config,
        vision_config=vision_config,
        tie_word_embeddings=False,
        **special_token_ids(ids),
    )
    config.architectures = ["Qwen3_5ForConditionalGeneration"]

    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config).eval().to(torch.bfloat16)
    model.save_pretrained(str(snap), safe_serialization=True)
    write_generation_config(snap, ids)


def write_processor_configs(snap: Path) -> None:
    common = dict(
        patch_size=PATCH_SIZE,
        temporal_patch_size=TEMPORAL_PATCH_SIZE,
        merge_size=MERGE_SIZE,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        do_resize=True,
        do_rescale=True,
        rescale_factor=1 / 255,
        do_normalize=True,
        do_convert_rgb=True,
        size={"shortest_edge": 64 * 64, "longest_edge": 256 * 256},
    )
    _write_json(
        snap / "preprocessor_config.json",
        dict(image_processor_type="Qwen2VLImageProcessor", processor_class="Qwen3VLProcessor", **common),
    )
    _write_json(
        snap / "video_preprocessor_config.json",
        dict(
            video_processor_type="Qwen3VLVideoProcessor",
            processor_class="Qwen3VLProcessor",
            fps=2,
            min_frames=4,
            max_frames=16,
            do_sample_frames=True,
            **common,
        ),
    )
    # Text-only variant: AutoProcessor resolves this class name to the tokenizer (no pillow/torchvision needed).
    _write_json(snap / "processor_config.json", {"processor_class": "Qwen3_5Tokenizer"})


def content_revision(snap: Path) -> str:
    """sha1 over the snapshot's files, sorted by name: each file contributes its name and its bytes."""
    digest = hashlib.sha1()
    for path in sorted(p for p in snap.iterdir() if p.is_file()):
        data = path.read_bytes()
        digest.update(path.name.encode("utf-8") + b"\0")
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()


def _entries(snap: Path) -> list:
    # A __pycache__ folder appears when something imports the snapshot's inference.py; it is not content.
    return sorted(p.name for p in snap.iterdir() if p.name != "__pycache__")


def _same_content(fresh: Path, existing: Path) -> bool:
    names = _entries(fresh)
    if _entries(existing) != names:
        return False
    for name in names:
        path = existing / name
        if not path.is_file() or path.is_symlink() or (path.stat().st_mode & 0o777) != 0o644:
            return False
        if path.read_bytes() != (fresh / name).read_bytes():
            return False
    return True


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix="." + path.name + ".", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def repo_dir_of(root: Path) -> Path:
    return Path(root).resolve() / ("models--" + REPO_ID.replace("/", "--"))


def copy_inference(snap: Path) -> None:
    shutil.copyfile(INFERENCE_SOURCE, snap / "inference.py")


def _write_fixture_content(snap: Path) -> None:
    ids = write_tokenizer(snap)
    _write_model(snap, ids)
    write_processor_configs(snap)
    copy_inference(snap)


def build_snapshot(root: Path, write_content) -> dict:
    """Stage a snapshot with ``write_content(folder)``, then publish it under its content revision (reusing an
    identical copy already there); return {"checkpoint", "revision", "inference_sha256"}."""
    repo_dir = repo_dir_of(root)
    snapshots = repo_dir / "snapshots"
    snapshots.mkdir(parents=True, exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)

    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=str(repo_dir)))
    try:
        write_content(tmp)
        for path in tmp.iterdir():
            if not path.is_file():
                raise RuntimeError("unexpected entry in the snapshot: %s" % path.name)
            path.chmod(0o644)  # safetensors writes 0600
        os.chmod(tmp, 0o755)

        revision = content_revision(tmp)
        snap = snapshots / revision
        if snap.is_dir() and _same_content(tmp, snap):
            shutil.rmtree(tmp)  # already built with identical content: leave it untouched
        else:
            if snap.exists():  # a damaged copy: move it aside, then swap the fresh one in
                trash = Path(tempfile.mkdtemp(prefix=".old-", dir=str(repo_dir)))
                os.rename(snap, trash / revision)
                os.rename(tmp, snap)
                shutil.rmtree(trash, ignore_errors=True)
            else:
                try:
                    os.rename(tmp, snap)
                except OSError:
                    # A concurrent build of the same content got there first: keep its copy if it matches.
                    if not (snap.is_dir() and _same_content(tmp, snap)):
                        raise
                    shutil.rmtree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    _write_atomic(repo_dir / "refs" / "main", revision)
    return {
        "checkpoint": str(snap),
        "revision": revision,
        "inference_sha256": hashlib.sha256((snap / "inference.py").read_bytes()).hexdigest(),
    }


def build(root: Path) -> dict:
    """Build (or reuse) the fixture snapshot under ``root``; return {"checkpoint", "revision", "inference_sha256"}."""
    return build_snapshot(root, _write_fixture_content)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--root", required=True, type=Path, help="HF hub cache root to build into")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
