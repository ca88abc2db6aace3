"""A scripted service for the acceptance kit's checks: each POST answered by a function the test gives, /health
with a fixed body; and the Replies such a function returns."""
from __future__ import annotations

from acceptance.checks.common import Context
from acceptance.client import Reply
from acceptance.options import parse_options

HEALTH = {"status": "ok", "model": {"device": "cuda:0", "revision": "r"}, "vram_cap_gib": None, "max_tokens": 8192,
          "max_decisions": 64, "max_questions_per_call": 16, "chunking": "greedy", "workloads": []}


class ScriptedService:
    def __init__(self, answer, health=None):
        self.answer = answer  # (path, body, token) -> Reply
        self.health_body = health or HEALTH
        self.posts: list[tuple[str, dict]] = []

    def health(self) -> Reply:
        return Reply(200, self.health_body, "", 0.001)

    def post(self, path, body, token=None, fresh_connection=False) -> Reply:
        self.posts.append((path, body))
        return self.answer(path, body, token)

    def close(self) -> None:
        pass


def reply(status: int, body: dict) -> Reply:
    return Reply(status, body, "", 0.01)


def error(status: int, code: str) -> Reply:
    return reply(status, {"error": {"code": code, "message": code.replace("_", " ")}})


def context(tmp_path, answer, health=None, extra=(), memory=None) -> Context:
    options = parse_options(["--url", "http://svc", "--token", "t" * 40, "--metrics-url", "http://svc/m",
                             "--out", str(tmp_path), *extra])
    ctx = Context(options, ScriptedService(answer, health))
    if memory is not None:
        ctx.memory = memory
    return ctx


def shared_answer(body: dict, tokens: int = 500, probabilities=(0.4, 0.6)) -> Reply:
    count = len(body["decisions"])
    calls = [16] * (count // 16) + ([count % 16] if count % 16 else [])
    results = [{"id": d["id"], "probabilities": list(probabilities), "top": "no", "confidence": max(probabilities),
                "input_tokens": tokens} for d in body["decisions"]]
    return reply(200, {"results": results, "timing": {"calls": len(calls), "questions_per_call": calls,
                                                      "input_tokens": [tokens] * len(calls)}})
