"""What the shim's tests share: the settings and the token they use, a client over the app, and request bodies."""
from __future__ import annotations

import httpx

from shim.app import create_app
from shim.settings import ShimSettings

from .fake_model import FakeModel

TOKEN = "s3cret-token-for-tests-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def make_settings(**env: str) -> ShimSettings:
    values = {"INTERN_DECISION_API_TOKEN": TOKEN,
              "INTERN_DECISION_TRITON_API_KEY": "triton-key-for-tests-0123456789abcd"}
    values.update({f"INTERN_DECISION_{key.upper()}": value for key, value in env.items()})
    return ShimSettings.from_env(values)


def client_for(model: FakeModel, **env: str) -> httpx.AsyncClient:
    app = create_app(make_settings(**env), model)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://shim")


def options(*ids: str) -> list[dict]:
    return [{"id": option_id, "description": f"{option_id} described"} for option_id in ids]


def decide_body(**overrides) -> dict:
    body = {"id": "refund-1", "state": {"order": "shipped"}, "question": "Approve the refund?",
            "options": options("approve", "reject")}
    body.update(overrides)
    return body


def shared_body(count: int, **decision_fields) -> dict:
    return {"state": "shared state", "decisions": [
        {"id": f"d{n}", "question": f"question {n}?", "options": options("approve", "reject"), **decision_fields}
        for n in range(count)]}
