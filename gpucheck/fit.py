"""python -m gpucheck.fit --checkpoint SNAPSHOT --out shapes.json

Sizes each shape's state so that its prompt reaches the shape's token target with this checkpoint's own tokenizer,
chat template and prompt layout, and writes the bodies, their calls' token counts and whether each target was met.
Runs in the interpreter that has transformers; loads the tokenizer only, not the model.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpucheck import shapes
from gpucheck.checkpoint_code import load_inference, prompt_tokens
from intern_decision_model.offline import set_offline


def fit_all(module, tokenizer) -> dict:
    def count(request: dict) -> int:
        return prompt_tokens(module, tokenizer, request)

    fitted, anchor_words = {}, 0
    for name, (title, decisions, target, timed) in shapes.SHAPES.items():
        if target is None:
            words = anchor_words
        else:
            words, _ = shapes.fit_filler(count, decisions, target)
        if name == "anchor":
            anchor_words = words
        body = shapes.body(decisions, words)
        tokens = [count(call) for call in shapes.predict_calls(body)]
        fitted[name] = {"title": title, "target_tokens": target, "filler_words": words, "tokens": tokens,
                        "reached": shapes.reached(target, tokens[0]), "timed": timed, "body": body}
    return fitted


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpucheck.fit")
    parser.add_argument("--checkpoint", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    set_offline()
    from transformers import AutoTokenizer

    module = load_inference(args.checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(args.checkpoint), local_files_only=True)
    result = {"tokenizer_size": len(tokenizer), "shapes": fit_all(module, tokenizer)}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
