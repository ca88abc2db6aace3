"""Schemathesis against the shim in process (ASGI) over a fake model: the bulk of the fuzzing, 1,652 cases, with and
without the token (tests/fuzzing.py says what every response is checked for)."""
from __future__ import annotations

import pytest
import schemathesis
from schemathesis.generation import GenerationMode

from shim.app import create_app
from shim.settings import ShimSettings
from tests.fuzzing import Tally, fuzz

from .fake_model import FakeModel

TOKEN = "s3cret-token-for-tests-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE


@pytest.fixture(scope="module")
def schema():
    app = create_app(ShimSettings.from_env({"INTERN_DECISION_API_TOKEN": TOKEN,
                                            "INTERN_DECISION_TRITON_API_KEY": "k" * 32}), FakeModel())
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize("path, mode, examples", [
    (path, mode, examples) for path in ("/decide", "/decide/shared")
    for mode, examples in ((POSITIVE, 300), (NEGATIVE, 150))
] + [(path, mode, examples) for path in ("/v1/systemone", "/v1/systemone/batch")
     for mode, examples in ((POSITIVE, 150), (NEGATIVE, 100))])
def test_posts_with_the_token(schema, path, mode, examples):
    tally = Tally()
    fuzz(schema, path, "POST", mode, examples, tally, headers=AUTH)
    assert tally.total == examples
    if mode == POSITIVE:
        assert tally.statuses[200] > 0  # the generator reaches the model, not only the validation


@pytest.mark.parametrize("path", ["/decide", "/decide/shared", "/v1/systemone", "/v1/systemone/batch"])
def test_posts_without_the_token_are_401(schema, path):
    tally = Tally()
    fuzz(schema, path, "POST", POSITIVE, 60, tally)
    assert tally.total == 60 and set(tally.statuses) == {401}


@pytest.mark.parametrize("path", ["/health", "/openapi.json"])
def test_the_open_gets(schema, path):
    tally = Tally()
    fuzz(schema, path, "GET", POSITIVE, 5, tally)
    assert tally.total >= 1 and set(tally.statuses) == {200}


def test_models_with_and_without_the_token(schema):
    tally = Tally()
    fuzz(schema, "/v1/models", "GET", POSITIVE, 5, tally, headers=AUTH)
    assert tally.total >= 1 and set(tally.statuses) == {200}
    refused = Tally()
    fuzz(schema, "/v1/models", "GET", POSITIVE, 5, refused)
    assert refused.total >= 1 and set(refused.statuses) == {401}
