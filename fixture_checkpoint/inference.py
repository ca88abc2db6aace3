"""Test fixture: an imitation of Intern-Decision-4B's checkpoint ``inference.py``, for a tiny random Qwen3.5.

This file is copied into the fixture snapshot built by ``fixture_checkpoint/build.py``. It has the public API of the
real checkpoint file (``DecisionEngine(checkpoint=None, *, temperature=..., backend="hf", media_root=".",
max_length=8192, device="cuda", dtype="bfloat16", attn_implementation="sdpa").predict(request)``, ``HFBackend``,
``validate_request``, ``compile_row`` and the helpers) and reproduces its behaviour: request validation with the
same messages, the same prompt layout rendered through the checkpoint's chat template, the token-limit check, one
real transformers forward with ``logits_to_keep`` at the token before each ``<decision>`` marker, a float softmax
over each field's answer symbols, the lexical tie-break and temperature scaling. Every number comes from that
forward; the weights are random, so the numbers mean nothing.

It stays Python 3.11 compatible (the real file needs 3.12).

Differences from the real file:
* ``MODEL_NAME`` is "Intern-Decision-4B-tiny-fixture".
* Images: missing paths raise ``FileNotFoundError`` (relative paths resolve against ``media_root``) as the real file
  does, but an image that exists raises ``NotImplementedError``: the fixture's processor is the tokenizer (no
  pillow/torchvision on CPU machines), so no pixel path exists.

FIXTURE-ONLY fault triggers (the real checkpoint has nothing like this). When the request's ``state`` is a JSON
object with the key ``"__fixture_fault__"``, ``HFBackend.score`` acts on its value after the batch tensors are built
and moved to the device (so real tensors are alive in the frame, as in a real forward failure):

* ``"oom"``: raise ``torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (fixture fault)")``
* ``{"oom_when_asked": text}``: raise the same error, but only in a call that asks a question whose ``instructions``
  equal ``text``. Every call of a chunked request carries the same state, and so the same trigger; their questions
  differ, so this fails one later call of a request while the earlier ones score
* ``"runtime"``: raise ``RuntimeError("fixture fault: simulated kernel failure")``
* ``{"sleep_seconds": x}`` with x a finite number in 0..60: ``time.sleep(x)`` inside the timed region, then score
  normally (so ``timing.inference_ms`` includes the sleep)
* ``"tie"``: score normally, then set each field's answer-symbol logits to one exactly equal value (the largest of
  them), which exercises the lexical tie-break

Any other value under that key is ignored and the request is scored normally. The key is part of the state, so it is
also rendered into the prompt like any other state content.
"""

import copy
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoProcessor, AutoTokenizer, Qwen3_5ForConditionalGeneration

MODEL_NAME = "Intern-Decision-4B-tiny-fixture"
DEFAULT_TEMPERATURE = 1.99241824
DECISION_TOKEN = "<decision>"
ANSWER_SYMBOLS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
SYSTEM_PROMPT = (
    "You are a careful decision assistant. Use the state and decision schema in the user message to make the "
    "requested decisions. For every field, choose exactly one answer symbol (e.g. A, B, C, ...) from its listed "
    "options and return one valid JSON object mapping each field name to its chosen symbol. Use the field names and "
    "symbols exactly as given. Do not include explanations, Markdown, or extra text."
)

QUESTION_TYPES = ("choice", "score", "noul")
MAX_QUESTIONS = 16
MAX_IMAGES = 8
DTYPES = ("bfloat16", "float16", "float32")
YES_KEYS = ("yes", "true", "1")
NO_KEYS = ("no", "false", "0")
DEFAULT_YES = "The answer is yes (affirmative, or align with the claim)."
DEFAULT_NO = "The answer is no (negative, or disagree with the claim)."
USER_PREAMBLE = "Return one answer for every field using the supplied answer symbols."

FIXTURE_FAULT_KEY = "__fixture_fault__"
FIXTURE_OOM_MESSAGE = "CUDA out of memory. Tried to allocate 20.00 GiB (fixture fault)"
FIXTURE_RUNTIME_MESSAGE = "fixture fault: simulated kernel failure"


@dataclass(frozen=True)
class CompiledExample:
    messages: list[dict[str, Any]]  # [system, user, assistant]
    fields: tuple[str, ...]  # question names, in request order
    symbols: dict[str, tuple[str, ...]]  # field -> ("A", "B", ...), one per option


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=False)


def _options(question: Mapping) -> list:
    """(value, description) pairs in option order; for noul always ("no", ...), ("yes", ...)."""
    kind = question.get("type")
    criteria = question.get("criteria")
    if kind == "choice":
        if not isinstance(criteria, Mapping):
            raise ValueError("choice criteria must be an object")
        return [(str(value), str(description)) for value, description in criteria.items()]
    if kind == "score":
        if isinstance(criteria, list):
            return [(str(index), str(description)) for index, description in enumerate(criteria)]
        if isinstance(criteria, Mapping):
            return [(str(value), str(description)) for value, description in criteria.items()]
        raise ValueError("score criteria must be a list or object")
    if kind == "noul":
        yes_text, no_text = None, None
        if isinstance(criteria, Mapping):
            for key, description in criteria.items():
                label = str(key).lower()
                if yes_text is None and label in YES_KEYS:
                    yes_text = str(description)
                elif no_text is None and label in NO_KEYS:
                    no_text = str(description)
        return [
            ("no", DEFAULT_NO if no_text is None else no_text),
            ("yes", DEFAULT_YES if yes_text is None else yes_text),
        ]
    raise ValueError("unsupported question type: %r" % (kind,))


def _message_content(row: Mapping, user_text: str):
    """The user turn: the text alone, or one image_url part per image followed by the text part."""
    images = row.get("images") or []
    if not images:
        return user_text
    parts = []
    for image in images:
        if isinstance(image, Mapping):
            url = image.get("url") or image.get("path")
            part = {"type": "image_url", "image_url": {"url": url}}
            if "image_wh" in image:
                part["image_wh"] = image["image_wh"]
        else:
            part = {"type": "image_url", "image_url": {"url": image}}
        parts.append(part)
    parts.append({"type": "text", "text": user_text})
    return parts


def compile_row(row) -> CompiledExample:
    """Build the [system, user, assistant-skeleton] messages for a validated row."""
    row_id = row.get("id", "<missing id>")
    questions = row.get("questions")
    if not isinstance(questions, Mapping) or not questions:
        raise ValueError("%s: questions must be a non-empty object" % (row_id,))
    fields = tuple(questions)
    symbols = {}
    schema_lines = []
    for field in fields:
        question = questions[field]
        if not isinstance(question, Mapping):
            raise ValueError("%s: question %r is not an object" % (row_id, field))
        options = _options(question)
        if not options:
            raise ValueError("%s: question %r has no options" % (row_id, field))
        if len(options) > len(ANSWER_SYMBOLS):
            raise ValueError("At most %d single-token answer symbols are supported" % len(ANSWER_SYMBOLS))
        field_symbols = tuple(ANSWER_SYMBOLS[: len(options)])
        symbols[field] = field_symbols
        instructions = question.get("instructions", "")
        schema_lines.append(f"{field}: {instructions}")
        for symbol, (value, description) in zip(field_symbols, options):
            schema_lines.append(f"    {symbol} = {value}: {description}")
    state = _json(row.get("state"))
    user_text = USER_PREAMBLE + "\n\n## State\n" + state + "\n## Decision schema\n" + "\n".join(schema_lines)
    if DECISION_TOKEN in user_text:
        raise ValueError("Reserved decision marker appears in input evidence")
    skeleton = json.dumps(dict.fromkeys(fields, DECISION_TOKEN), ensure_ascii=False, indent=4)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": _message_content(row, user_text)},
        {"role": "assistant", "content": skeleton},
    ]
    return CompiledExample(messages=messages, fields=fields, symbols=symbols)


def _is_finite_number(key) -> bool:
    try:
        return math.isfinite(float(key))
    except (TypeError, ValueError, OverflowError):
        return False


def validate_request(request) -> dict:
    """Check a request; return a clean deep copy holding only state, questions (type/instructions/criteria), images."""
    if not isinstance(request, dict) or "state" not in request:
        raise ValueError("Supply a JSON object containing state and questions.")
    request = copy.deepcopy(request)
    images = request.get("images")
    if images:
        if not isinstance(images, list) or not 1 <= len(images) <= MAX_IMAGES:
            raise ValueError(f"Upload 1\u2013{MAX_IMAGES} images.")
        if any(not isinstance(image, str) or not image for image in images):
            raise ValueError("Images must be nonempty local file paths.")
    questions = request.get("questions")
    if not isinstance(questions, dict) or not 1 <= len(questions) <= MAX_QUESTIONS:
        raise ValueError(f"Supply 1\u2013{MAX_QUESTIONS} questions.")
    clean_questions = {}
    for name, question in questions.items():
        if not isinstance(name, str) or not name:
            raise ValueError("Question names must be nonempty strings.")
        if not isinstance(question, dict) or question.get("type") not in QUESTION_TYPES:
            raise ValueError("Question type must be choice, score, or noul.")
        kind = question["type"]
        criteria = question.get("criteria")
        if kind == "choice" and not isinstance(criteria, dict):
            raise ValueError("Choice criteria must be an object.")
        if kind == "score":
            if not isinstance(criteria, (list, dict)):
                raise ValueError("Score criteria must be a list or object.")
            if isinstance(criteria, dict) and not all(_is_finite_number(key) for key in criteria):
                raise ValueError("Score option keys must be finite numbers.")
        if kind in ("choice", "score") and not 1 <= len(criteria) <= len(ANSWER_SYMBOLS):
            raise ValueError(f"Supply 1\u2013{len(ANSWER_SYMBOLS)} options.")
        clean_questions[name] = {
            key: question[key] for key in ("type", "instructions", "criteria") if key in question
        }
    row = {"state": request["state"], "questions": clean_questions}
    if images:
        row["images"] = list(images)
    compile_row(row)  # the reserved-marker check
    return row


def argmax(probs: Mapping) -> str:
    """Most probable value; ties go to the lexically smallest value string."""
    return min(probs, key=lambda value: (-probs[value], value))


def validate_temperature(temperature) -> float:
    try:
        value = float(temperature)
    except (TypeError, ValueError):
        raise ValueError("Temperature must be finite and positive") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError("Temperature must be finite and positive")
    return value


def scale_probabilities(probs: Mapping, temperature) -> dict:
    """softmax(log p / T) over one distribution, keyed and ordered like ``probs``."""
    temperature = validate_temperature(temperature)
    values = list(probs)
    p = [float(probs[value]) for value in values]
    if not p or any(math.isnan(x) or x < 0.0 or x > 1.0 for x in p):
        raise ValueError("Invalid probability distribution")
    if abs(math.fsum(p) - 1.0) > 1e-3:
        raise ValueError("Probabilities must sum to one")
    if temperature == 1.0:
        return dict(zip(values, p))
    logs = [math.log(x) if x > 0.0 else -math.inf for x in p]
    top = max(logs)
    weights = [0.0 if lp == -math.inf else math.exp((lp - top) / temperature) for lp in logs]
    total = math.fsum(weights)
    scaled = {value: weight / total for value, weight in zip(values, weights)}
    if argmax(scaled) != argmax(dict(zip(values, p))):
        raise ArithmeticError("Floating-point temperature scaling changed argmax")
    return scaled


def scale_result(result: Mapping, temperature) -> dict:
    """Temperature-scale every answer of a result and record the calibration; returns a new dict."""
    temperature = validate_temperature(temperature)
    scaled = copy.deepcopy(dict(result))
    for answer in scaled["answers"].values():
        probs = scale_probabilities(answer["probabilities"], temperature)
        best = argmax(probs)
        answer["probabilities"] = probs
        answer["confidence"] = probs[best]
        kind = answer.get("type")
        if kind == "choice":
            answer["choice"] = best
        elif kind == "noul":
            answer["noul"] = probs["yes"]
        elif kind == "score":
            answer["score"] = math.fsum(float(value) * p for value, p in probs.items())
    scaled["calibration"] = {"method": "temperature-scaling", "temperature": temperature}
    return scaled


def _fixture_fault(row: Mapping):
    """FIXTURE-ONLY: the fault trigger carried in the request state (see the module docstring), or None."""
    state = row.get("state")
    if isinstance(state, Mapping) and FIXTURE_FAULT_KEY in state:
        return state[FIXTURE_FAULT_KEY]
    return None


def _fixture_oom_here(row: Mapping, fault) -> bool:
    """FIXTURE-ONLY: whether this call must raise the simulated out-of-memory error."""
    if fault == "oom":
        return True
    if not isinstance(fault, Mapping) or not isinstance(fault.get("oom_when_asked"), str):
        return False
    return any(question.get("instructions") == fault["oom_when_asked"] for question in row["questions"].values())


def _fixture_sleep_seconds(fault):
    if not isinstance(fault, Mapping) or "sleep_seconds" not in fault:
        return None
    seconds = fault["sleep_seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        return None
    if not math.isfinite(seconds) or not 0 <= seconds <= 60:
        return None
    return float(seconds)


class HFBackend:
    def __init__(
        self,
        checkpoint,
        processor_path=None,
        media_root="",
        max_length=8192,
        device="cuda",
        dtype="bfloat16",
        attn_implementation="sdpa",
        **kwargs,
    ):
        self.checkpoint = Path(checkpoint)
        self.media_root = Path(media_root).resolve()
        self.max_length = max_length
        self.device = torch.device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
        if DECISION_TOKEN not in self.tokenizer.get_added_vocab():
            raise ValueError("Checkpoint must include its trained decision tokenizer")
        self.marker_id = self.tokenizer.convert_tokens_to_ids(DECISION_TOKEN)
        self.processor = AutoProcessor.from_pretrained(str(processor_path or checkpoint), local_files_only=True)
        # Keep the checkpoint's own tokenizer (decision token, chat template) inside the processor.
        self.processor.tokenizer = self.tokenizer
        self.model = (
            Qwen3_5ForConditionalGeneration.from_pretrained(
                str(checkpoint),
                dtype=getattr(torch, dtype),
                local_files_only=True,
                attn_implementation=attn_implementation,
            )
            .to(self.device)
            .eval()
        )
        if self.marker_id >= self.model.get_input_embeddings().weight.shape[0]:
            raise ValueError("Decision marker exceeds checkpoint vocabulary")

    def _image_path(self, url) -> Path:
        path = Path(url)
        if not path.is_absolute():
            path = self.media_root / path
        return path

    def encode(self, row):
        """Render and tokenize a validated row: (compiled, batch, positions of the token before each marker)."""
        compiled = compile_row(row)
        messages = copy.deepcopy(compiled.messages)
        content = messages[1]["content"]
        if isinstance(content, list):
            for index, part in enumerate(content):
                if part.get("type") != "image_url":
                    continue
                path = self._image_path(part["image_url"]["url"])
                with open(path, "rb"):  # FileNotFoundError (an OSError) for a missing path, like PIL's open
                    pass
                content[index] = {"type": "image"}
            # Fixture limitation: the fixture's "processor" is the tokenizer (no pillow/torchvision on CPU
            # machines), so an image that does exist cannot be turned into pixels. The real file would call
            # processor(text=[text], images=images, return_tensors="pt", padding=False) here.
            raise NotImplementedError("The tiny fixture checkpoint does not support image inputs")
        # Keep the empty think block and the complete assistant skeleton, as in training.
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=False, enable_thinking=False, add_vision_id=True
        )
        batch = self.tokenizer(text, add_special_tokens=False, return_tensors="pt")
        length = int(batch["input_ids"].shape[1])
        if length > self.max_length:
            raise ValueError(f"Example has {length} tokens, above {self.max_length}; truncation is forbidden")
        positions = (batch["input_ids"][0] == self.marker_id).nonzero().flatten() - 1
        if len(positions) != len(compiled.fields) or bool((positions < 0).any()):
            raise ValueError("Decision marker count or position mismatch")
        return compiled, batch, positions

    def _symbol_ids(self, compiled, field):
        return [self.tokenizer.encode(symbol, add_special_tokens=False)[0] for symbol in compiled.symbols[field]]

    def score(self, row):
        """One forward: (compiled, logits [n_fields, vocab] at the token before each marker, length, ms)."""
        compiled, batch, positions = self.encode(row)
        length = int(batch["input_ids"].shape[1])
        fault = _fixture_fault(row)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        start = time.perf_counter()
        batch = batch.to(self.device)
        # FIXTURE-ONLY fault triggers (see the module docstring): raised with the batch alive on the device.
        if _fixture_oom_here(row, fault):
            raise torch.cuda.OutOfMemoryError(FIXTURE_OOM_MESSAGE)
        if fault == "runtime":
            raise RuntimeError(FIXTURE_RUNTIME_MESSAGE)
        sleep_seconds = _fixture_sleep_seconds(fault)
        if sleep_seconds is not None:
            time.sleep(sleep_seconds)
        with torch.inference_mode():
            # logits_to_keep as a tensor of positions slices the hidden states before the LM head (no L x V logits).
            logits = self.model(**batch, use_cache=False, logits_to_keep=positions.to(self.device)).logits[0]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        inference_ms = (time.perf_counter() - start) * 1000.0
        if fault == "tie":
            with torch.inference_mode():
                logits = logits.clone()
                for index, field in enumerate(compiled.fields):
                    ids = torch.tensor(self._symbol_ids(compiled, field), device=logits.device)
                    logits[index, ids] = logits[index, ids].max()
        return compiled, logits, length, inference_ms


class DecisionEngine:
    def __init__(
        self,
        checkpoint=None,
        *,
        temperature=DEFAULT_TEMPERATURE,
        backend="hf",
        media_root=".",
        max_length=8192,
        device="cuda",
        dtype="bfloat16",
        attn_implementation="sdpa",
    ):
        if backend != "hf":
            raise ValueError("Only backend='hf' is implemented in this release")
        self.temperature = validate_temperature(temperature)
        if dtype not in DTYPES:
            raise ValueError("Unsupported dtype")
        if max_length < 1:
            raise ValueError("max_length must be positive")
        self.backend_name = backend
        self.backend = HFBackend(
            checkpoint or Path(__file__).resolve().parent,
            media_root=media_root,
            max_length=max_length,
            device=device,
            dtype=dtype,
            attn_implementation=attn_implementation,
        )
        self.tokenizer = self.backend.tokenizer

    def predict(self, request: dict) -> dict:
        row = validate_request(request)
        compiled, logits, length, inference_ms = self.backend.score(row)
        answers = {}
        for index, field in enumerate(compiled.fields):
            question = row["questions"][field]
            options = _options(question)
            values = [value for value, _ in options]
            encoded = [self.tokenizer.encode(symbol, add_special_tokens=False) for symbol in compiled.symbols[field]]
            if any(len(ids) != 1 for ids in encoded):
                raise ValueError("Candidate symbols must each encode to a single token")
            symbol_logits = logits[index, [ids[0] for ids in encoded]].float()
            probabilities = torch.softmax(symbol_logits, dim=-1).cpu().tolist()
            probs = dict(zip(values, probabilities))
            best = min(values, key=lambda value: (-probs[value], value))
            answer = {"type": question["type"], "probabilities": probs, "confidence": probs[best]}
            if question["type"] == "choice":
                answer["choice"] = best
            elif question["type"] == "noul":
                answer["noul"] = probs["yes"]
            else:
                answer["score"] = math.fsum(float(value) * p for value, p in probs.items())
                answer["legend"] = dict(options)
            answers[field] = answer
        result = {
            "answers": answers,
            "usage": {"input_tokens": int(length), "output_tokens": len(compiled.fields)},
            "timing": {"inference_ms": round(float(inference_ms), 2)},
        }
        result = scale_result(result, self.temperature)
        for answer in result["answers"].values():
            answer["source"] = "local"
            answer["decision"] = argmax(answer["probabilities"])
        result["usage"]["decision_count"] = len(compiled.fields)
        result["model"] = MODEL_NAME
        result["backend"] = self.backend_name
        return result
