"""The OpenAPI document as served against the code: the same routes and methods, every status and error code the code
can answer and no other, and examples that validate against their own schemas; the committed file holds no code."""
from __future__ import annotations

import json

import jsonschema_rs
import pytest
from starlette.routing import Route

from shim.app import OPENAPI_PATH, create_app, openapi_document
from shim.errors import Failure
from shim.errors import codes as error_codes
from shim.errors.openapi import ENVELOPES, secured_gets, served
from wire.protocol import Kind

from .fake_model import FakeModel
from .shim_helpers import AUTH, client_for, make_settings

COMMITTED = json.loads(OPENAPI_PATH.read_bytes())
DOC = openapi_document()
# What the code can answer on a POST route: every code of the registry the shim sends, but the routing's 404 and 405
# (any path's, in the envelope's codes); the model's kinds among them.
def post_errors(path: str) -> set[tuple[int, str]]:
    """An error of some routes only (its routes a tuple of paths) on those."""
    return {(error.status, error.code) for error in error_codes.REGISTRY
            if error.by_shim and error.sent and error not in error_codes.HTTP_CODES.values()
            and (not isinstance(error.routes, tuple) or path in error.routes)}


POST_ERRORS = post_errors("")
assert {(Failure.of(kind).error.status, Failure.of(kind).error.code) for kind in Kind} <= POST_ERRORS
# Which operations each error's routes name, written apart from the code's own rule (shim/errors/openapi.py).
ON = {error_codes.Routes.EVERY: lambda path, method, operation: True,
      error_codes.Routes.TOKEN: lambda path, method, operation: operation["security"] == [{"bearerAuth": []}],
      error_codes.Routes.POST: lambda path, method, operation: method == "POST"}


def on(routes, path: str, method: str, operation: dict) -> bool:
    if isinstance(routes, tuple):
        return path in routes
    assert routes in ON, f"{routes}: add its rule to ON in tests/unit/test_openapi.py, apart from the code's"
    return ON[routes](path, method, operation)


def validator(schema: dict):
    """A validator for a schema of the document, its $refs resolved against the document's components."""
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOC["components"]})


def operations():
    for path, methods in DOC["paths"].items():
        for method, operation in methods.items():
            yield path, method.upper(), operation


def registry_errors(path: str, method: str, operation: dict) -> set[tuple[int, str]]:
    """The (status, code) pairs of the registry's errors whose routes take in the operation."""
    return {(error.status, error.code) for error in error_codes.REGISTRY
            if error.routes is not None and on(error.routes, path, method, operation)}


def served_routes() -> set[tuple[str, str]]:
    app = create_app(make_settings(), FakeModel())
    return {(route.path, method) for route in app.routes if isinstance(route, Route)
            for method in route.methods if method != "HEAD"}


def test_the_documented_routes_and_methods_are_the_apps():
    documented, served = {(path, method) for path, method, _ in operations()}, served_routes()
    assert sorted(served - documented) == [], "add each to shim/openapi.json's paths, with its security"
    assert sorted(documented - served) == [], "in shim/openapi.json's paths but not served"


def test_an_operation_without_its_security_is_refused():
    committed = json.loads(OPENAPI_PATH.read_bytes())
    del committed["paths"]["/health"]["get"]["security"]
    with pytest.raises(ValueError, match=r"GET /health declares no security"):
        served(committed)


@pytest.mark.anyio
async def test_the_app_asks_for_the_token_where_the_document_says_and_nowhere_else():
    """An operation with security answers 401 without the token and not with it; one without answers without it:
    a GET's token lives in its OpenAPI operation alone."""
    async with client_for(FakeModel()) as client:
        for path, method, operation in operations():
            secured = operation["security"] == [{"bearerAuth": []}]
            assert operation["security"] in ([], [{"bearerAuth": []}]), (method, path)
            assert secured or method == "GET", f"{method} {path}: every POST needs the token"
            tokenless = await client.request(method, path, json={})
            authorized = await client.request(method, path, json={}, headers=AUTH)
            assert (tokenless.status_code == 401) == secured, (method, path, tokenless.status_code)
            assert authorized.status_code != 401, (method, path)
    assert "/v1/models" in secured_gets(DOC) and "/health" not in secured_gets(DOC)


def test_each_operation_documents_its_own_answers_and_the_registrys_statuses():
    for path, method, operation in operations():
        own = {int(status) for status in COMMITTED["paths"][path][method.lower()]["responses"] if int(status) < 400}
        assert 200 in own, (method, path)
        assert {int(status) for status in operation["responses"]} == \
            own | {status for status, _ in registry_errors(path, method, operation)}, (method, path)


def test_posts_document_every_status_and_code_the_code_can_answer():
    for path, method, operation in operations():
        responses = operation["responses"]
        if method == "POST":
            expected = post_errors(path)
            assert {status for status, _ in registry_errors(path, method, operation)} == {
                status for status, _ in expected}
            for status in {status for status, _ in expected}:
                codes = [code for answered, code in sorted(expected) if answered == status]
                content = responses[str(status)]["content"]["application/json"]
                documented = content["schema"]["properties"]["error"]["properties"]["code"]
                assert documented == ({"const": codes[0]} if len(codes) == 1 else {"enum": documented["enum"]})
                assert sorted(documented.get("enum", [codes[0]])) == codes
                assert content["example"]["error"]["code"] in codes
            assert operation["security"] == [{"bearerAuth": []}]


def test_the_envelopes_codes_are_every_code_the_app_answers():
    codes = {code for _, code in POST_ERRORS} | {error.code for error in error_codes.HTTP_CODES.values()}
    assert set(DOC["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]) == codes


def documented_codes(response: dict) -> set[str]:
    """The codes a response's envelope admits."""
    schema = response["content"]["application/json"]["schema"]
    envelope = schema if "allOf" in schema else next(member for member in schema["anyOf"] if "allOf" in member)
    code = envelope["properties"]["error"]["properties"]["code"]
    return set(code["enum"]) if "enum" in code else {code["const"]}


def test_each_operation_documents_the_codes_the_registry_gives_its_routes_and_no_other():
    for path, method, operation in operations():
        documented = {(int(status), code) for status, response in operation["responses"].items()
                      if int(status) >= 400 for code in documented_codes(response)}
        assert documented == registry_errors(path, method, operation), (path, method)


def test_the_committed_document_restates_no_code_the_registry_gives():
    for name in ENVELOPES:
        assert "code" not in COMMITTED["components"]["schemas"][name]["properties"]["error"]["properties"]
    for path, methods in COMMITTED["paths"].items():
        for operation in methods.values():
            for status, response in operation["responses"].items():
                schema = response["content"]["application/json"]["schema"]
                assert int(status) < 400 or "code" not in json.dumps(schema), (path, status)


def test_a_committed_error_response_the_registry_does_not_give_is_refused():
    committed = json.loads(OPENAPI_PATH.read_bytes())
    committed["paths"]["/health"]["get"]["responses"]["422"] = committed["paths"]["/decide"]["post"]["responses"]["422"]
    with pytest.raises(ValueError, match=r"GET /health documents \[422\]"):
        served(committed)


def test_a_status_without_committed_words_is_documented_from_the_registry():
    committed = json.loads(OPENAPI_PATH.read_bytes())
    for path in ("/decide", "/v1/systemone"):
        del committed["paths"][path]["post"]["responses"]["429"]
    document = served(committed)
    for path in ("/decide", "/v1/systemone"):
        response = document["paths"][path]["post"]["responses"]["429"]
        assert documented_codes(response) == {"busy"} and "Retry-After" in response["headers"]
        content = response["content"]["application/json"]
        validator(content["schema"]).validate(content["example"])
    assert "detail" in document["paths"]["/v1/systemone"]["post"]["responses"]["429"]["content"][
        "application/json"]["example"]


def test_every_response_documents_the_request_id_and_the_refusals_their_headers():
    for path, method, operation in operations():
        for status, response in operation["responses"].items():
            assert response["headers"]["X-Request-Id"] == {"$ref": "#/components/headers/X-Request-Id"}, (path, status)
            if path.startswith("/v1/"):
                assert response["headers"]["x-typesafe-request-id"] == {
                    "$ref": "#/components/headers/x-typesafe-request-id"}, (path, status)
        if operation["security"]:
            assert "WWW-Authenticate" in operation["responses"]["401"]["headers"], (
                f"{method} {path}: its 401 names no WWW-Authenticate header (shim/errors/openapi.py, generated)")
        if method == "POST":
            assert "Retry-After" in operation["responses"]["429"]["headers"]
            assert "Retry-After" in operation["responses"]["503"]["headers"]  # a draining replica's
        if method == "POST" and path.startswith("/v1/"):
            assert operation["responses"]["422"]["content"]["application/json"]["schema"]["allOf"] == [
                {"$ref": "#/components/schemas/ErrorWithDetail"}]
    assert DOC["components"]["headers"]["Retry-After"]["schema"]["const"] == error_codes.RETRY_AFTER_SECONDS


def examples():
    for path, method, operation in operations():
        body = operation.get("requestBody", {}).get("content", {}).get("application/json")
        if body:
            yield f"{method} {path} request", body["schema"], body["example"]
        for status, response in operation["responses"].items():
            content = response["content"]["application/json"]
            if "example" in content:
                yield f"{method} {path} {status}", content["schema"], content["example"]


@pytest.mark.parametrize("name, schema, example", list(examples()), ids=lambda value: value
                         if isinstance(value, str) else "")
def test_every_example_validates_against_its_schema(name, schema, example):
    validator(schema).validate(example)


def test_the_examples_are_real_checks():
    decide = DOC["paths"]["/decide"]["post"]
    request_schema = decide["requestBody"]["content"]["application/json"]["schema"]
    request = decide["requestBody"]["content"]["application/json"]["example"]
    assert not validator(request_schema).is_valid({**request, "options": request["options"][:1]})
    assert not validator(request_schema).is_valid({**request, "workload": "support"})
    unauthorized = decide["responses"]["401"]["content"]["application/json"]["schema"]
    assert not validator(unauthorized).is_valid({"error": {"code": "busy", "message": "x"}})
    assert not validator(unauthorized).is_valid({"detail": "unauthorized"})
    health = DOC["paths"]["/health"]["get"]["responses"]["200"]["content"]["application/json"]
    assert not validator(health["schema"]).is_valid({**health["example"], "model": {"name": "x"}})


def test_the_system_one_examples_are_real_checks():
    operation = DOC["paths"]["/v1/systemone"]["post"]
    request_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    request = operation["requestBody"]["content"]["application/json"]["example"]
    team = request["questions"]["team"]
    assert not validator(request_schema).is_valid({**request, "questions": {"spot": {"type": "box"}}})
    assert not validator(request_schema).is_valid({**request, "questions": {"team": {**team, "criteria": {}}}})
    assert not validator(request_schema).is_valid({**request, "assets": {"a": {"type": "image"}}})
    assert not validator(request_schema).is_valid({**request, "config": {"temperature": 1}})
    assert not validator(request_schema).is_valid({**request, "model": "jev"})
    answer = DOC["components"]["schemas"]["SystemOneAnswer"]
    assert not validator(answer).is_valid({"type": "noul", "noul": 0.5, "confidence": 0.5, "native": {}})
    invalid = operation["responses"]["422"]["content"]["application/json"]
    assert not validator(invalid["schema"]).is_valid({"error": invalid["example"]["error"]})


def test_an_error_some_routes_answer_is_documented_on_those_alone(monkeypatch):
    from shim.errors import openapi as openapi_module

    only = error_codes.PublicError(404, "workload_not_found", routes=("/decide", "/decide/shared"))
    monkeypatch.setattr(openapi_module, "REGISTRY", (*error_codes.REGISTRY, only))
    document = served(COMMITTED)
    documented = {path for path, methods in document["paths"].items() for operation in methods.values()
                  if "workload_not_found" in json.dumps(operation["responses"].get("404", {}))}
    assert documented == {"/decide", "/decide/shared"}
