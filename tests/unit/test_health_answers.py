"""GET /health's answers when the replica cannot serve come from the registry's probe answers (shim/errors/codes.py):
their status, their body's status word and their error's code, as the OpenAPI document describes them."""
from __future__ import annotations

import pytest

from shim import health
from shim.app import openapi_document
from shim.errors import MODEL_NOT_READY, Problem
from shim.errors.codes import DRAINING, HEALTH_ANSWERS, HEALTH_DRAINING, HEALTH_UNAVAILABLE, UNAVAILABLE

from .fake_model import FakeModel
from .shim_helpers import client_for

pytestmark = pytest.mark.anyio


def test_a_probe_answers_503_whatever_its_errors_own_status():
    assert (HEALTH_UNAVAILABLE.status, HEALTH_UNAVAILABLE.body_status, HEALTH_UNAVAILABLE.error) == \
        (503, "unavailable", UNAVAILABLE)
    assert UNAVAILABLE.status == 502  # what a POST meets while the model is down
    assert (HEALTH_DRAINING.status, HEALTH_DRAINING.body_status, HEALTH_DRAINING.error) == (503, "draining", DRAINING)


async def test_health_with_the_model_down_answers_the_registrys_entry(monkeypatch):
    model = FakeModel()
    model.is_ready = Problem(MODEL_NOT_READY, "the model 'intern_decision' is not ready")
    moved = HEALTH_UNAVAILABLE._replace(status=500, body_status="moved")
    monkeypatch.setattr(health, "HEALTH_UNAVAILABLE", moved)
    async with client_for(model) as client:
        response = await client.get("/health")
    assert response.status_code == 500
    assert response.json() == {"status": "moved", "error": {"code": "model_unavailable", "message": "model not ready"}}


def test_the_openapi_document_describes_each_probe_answer():
    document = openapi_document()
    schema = document["components"]["schemas"]["HealthUnavailable"]["properties"]
    assert schema["status"]["enum"] == [answer.body_status for answer in HEALTH_ANSWERS]
    assert schema["error"]["properties"]["code"]["enum"] == [answer.error.code for answer in HEALTH_ANSWERS]
    responses = document["paths"]["/health"]["get"]["responses"]
    assert all("HealthUnavailable" in str(responses[str(answer.status)]) for answer in HEALTH_ANSWERS)
