"""The one error registry (shim/errors/codes.py): every code the shim can answer is defined there and nowhere else,
the wire's kinds answer with the registry's status and code, and the docs' errors tables and the balancer's own
answers agree with it, both ways."""
from __future__ import annotations

import ast
import re
from http import HTTPStatus
from pathlib import Path

import pytest

from shim import errors
from shim.errors import codes as error_codes
from shim.errors.codes import BY_CODE, HTTP_CODES, REGISTRY, RETRY_AFTER_SECONDS, PublicError
from wire.protocol import Kind

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "shim"
REGISTRY_MODULE = SHIM / "errors" / "codes.py"
# The calls that turn a public error into an answer: each takes the registry's entry, never a status or a code.
ANSWERING = {"envelope", "ApiError", "refuse", "response", "closing_answer", "server_answer", "ModelFailure"}


def calls_in(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            yield node, getattr(node.func, "id", None) or getattr(node.func, "attr", None)


def test_the_registry_is_read():
    assert len(REGISTRY) >= 18 and {"busy", "draining", "client_gone", "too_many_pipelined_requests"} <= set(BY_CODE)


def test_each_code_is_defined_once():
    assert len(BY_CODE) == len(REGISTRY)
    named = [value for value in vars(error_codes).values() if isinstance(value, PublicError)]
    assert sorted(named) == sorted(REGISTRY), "a public error defined in errors/codes.py but left out of REGISTRY"


def test_no_public_error_is_defined_outside_the_registry():
    found = [f"{path.relative_to(ROOT)}:{node.lineno}" for path in SHIM.rglob("*.py") if path != REGISTRY_MODULE
             for node, name in calls_in(path) if name == "PublicError"]
    assert found == []


def test_every_answer_takes_its_code_from_the_registry():
    """No envelope, ApiError or refusal is built from a status or a code written in place, and no module writes the
    envelope's "code" key by hand: what the shim can answer is what the registry holds."""
    found = []
    for path in SHIM.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        for node, name in calls_in(path):
            first = node.args[0] if node.args else None
            if name in ANSWERING and isinstance(first, ast.Constant):
                found.append(f"{where}:{node.lineno}: {name}({first.value!r}, ...)")
        if path == SHIM / "errors" / "envelope.py":  # the one writer of the envelope
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Dict) and any(isinstance(key, ast.Constant) and key.value == "code"
                                                  for key in node.keys):
                found.append(f"{where}:{node.lineno}: a hand-written envelope")
    assert found == []


def test_every_error_the_shim_answers_is_raised_somewhere():
    """Each error of the registry the shim answers is named by a module outside it (the routing's 404 and 405 through
    HTTP_CODES): a code registered but never raised fails here."""
    named = {getattr(node, "id", None) or getattr(node, "attr", None) for path in SHIM.rglob("*.py")
             if path != REGISTRY_MODULE for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, (ast.Name, ast.Attribute))}
    unraised = [name for name, value in vars(error_codes).items() if isinstance(value, PublicError)
                and value.by_shim and value not in HTTP_CODES.values() and name not in named]
    assert unraised == [], (f"{unraised}: registered, raised nowhere: raise ApiError(<ERROR>, message) where it "
                            f"arises, or, for the model's failure, its Failure row in shim/errors/failures.py")
    assert "HTTP_CODES" in named


def test_the_errors_the_app_raises_are_the_registrys():
    assert {failure.error for failure in errors.Failure} <= set(REGISTRY)
    assert set(HTTP_CODES.values()) <= set(REGISTRY)
    assert all(HTTP_CODES[status].status == status for status in HTTP_CODES)


@pytest.mark.parametrize("kind", Kind, ids=lambda kind: kind.name)
def test_the_wires_kinds_answer_with_the_registrys_error_of_their_word(kind):
    """The wire keeps only the model side's table; what the shim answers for each kind is the registry's error
    whose code is the kind's word."""
    assert errors.Failure.of(kind).error is BY_CODE[kind.word]


def test_what_each_kind_is_answered():
    assert [(kind.word, errors.Failure.of(kind).error.status, errors.Failure.of(kind).error.code) for kind in Kind] \
        == [("invalid_request", 422, "invalid_request"), ("out_of_memory", 503, "out_of_memory"),
            ("scoring_failed", 500, "scoring_failed")]


# TypeSafe's error_type words by status, as its API answers them.
TYPESAFE_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                        405: "invalid_request_error", 408: "timeout_error", 413: "request_too_large",
                        415: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
                        431: "invalid_request_error", 499: "invalid_request_error", 500: "api_error",
                        501: "invalid_request_error", 502: "api_error", 503: "overloaded_error"}


def test_each_error_carries_typesafes_error_type_for_its_status():
    assert sorted({error.status for error in REGISTRY} - set(TYPESAFE_ERROR_TYPES)) == [], \
        "add the status's error_type to TYPESAFE_ERROR_TYPES in tests/unit/test_error_codes.py"
    assert {error.code: error.error_type for error in REGISTRY} == \
        {error.code: TYPESAFE_ERROR_TYPES[error.status] for error in REGISTRY}


def test_every_status_sent_has_its_reason_phrase():
    assert all(error.phrase == HTTPStatus(error.status).phrase for error in REGISTRY if error.sent)
    assert [error.code for error in REGISTRY if not error.sent] == ["client_gone"]


def test_the_headers_follow_the_policy():
    assert error_codes.BUSY.headers() == {"Retry-After": str(RETRY_AFTER_SECONDS)}
    assert error_codes.DRAINING.headers() == {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"}
    assert error_codes.OUT_OF_MEMORY.headers() == {}
    assert error_codes.OUT_OF_MEMORY.headers(system_one=True) == {"Retry-After": str(RETRY_AFTER_SECONDS)}
    assert error_codes.INVALID.headers(system_one=True) == {}


def errors_rows(page: Path) -> dict[str, tuple[int, str]]:
    """A page's errors table: code -> (status, the row's text)."""
    text = page.read_text(encoding="utf-8")
    if "## Errors" not in text:
        return {}
    section = text[text.index("## Errors"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    return {code: (int(status), row) for status, code, row in
            re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|(.*)$", section, re.M)}


def test_the_semif_errors_table_is_the_registry_both_ways():
    rows = {code: status for code, (status, _) in errors_rows(ROOT / "docs" / "semif.md").items()}
    answered = {error.code: error.status for error in REGISTRY if error.by_shim and error.sent}
    assert sorted(answered.items() - rows.items()) == [], "add a row | STATUS | `code` | when | to docs/semif.md, " \
        "'Errors'"
    assert sorted(rows.items() - answered.items()) == [], "docs/semif.md, 'Errors': a row the registry does not send"


RUNBOOK = "## Runbook: what each error code means and what to do"


def runbook_rows() -> set[tuple[int, str]]:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split(f"\n{RUNBOOK}\n", 1)[1].split("\n## ", 1)[0]
    return {(int(status), code) for status, code in re.findall(r"^\| (\d{3}) `([a-z_]+)` \|", section, re.M)}


def test_the_runbook_has_a_row_for_every_code_of_the_registry_and_no_other():
    rows, registered = runbook_rows(), {(error.status, error.code) for error in REGISTRY}
    assert (401, "unauthorized") in rows  # the rows are read
    assert sorted(registered - rows) == [], \
        f"add a row | STATUS `code` | what happened | what to do | to docs/operations.md, '{RUNBOOK[3:]}'"
    assert sorted(rows - registered) == [], f"docs/operations.md, '{RUNBOOK[3:]}': a row the registry does not hold"


def test_the_operations_page_names_every_failure_kind_the_series_counts():
    """intern_decision_shim_triton_errors_total's `kind` values are the Failure members' labels (shim/errors/)."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    (row,) = [line for line in text.splitlines() if line.startswith("| `intern_decision_shim_triton_errors_total`")]
    named = set(re.findall(r"`([a-z_]+)`", row)) - {"intern_decision_shim_triton_errors_total", "kind"}
    labels = {failure.label for failure in errors.Failure if failure.label is not None}
    assert sorted(labels - named) == [], "add the kind to docs/operations.md, 'The shim's series', " \
        "intern_decision_shim_triton_errors_total's row"
    assert sorted(named - labels) == [], "docs/operations.md, 'The shim's series', triton_errors_total: a kind no " \
        "Failure counts"


def test_the_semif_errors_table_says_which_ask_to_wait():
    rows = errors_rows(ROOT / "docs" / "semif.md")
    assert sorted(code for code, (_, row) in rows.items() if f"Retry-After: {RETRY_AFTER_SECONDS}" in row) == \
        sorted(error.code for error in REGISTRY if error.retry_after and error.by_shim)


def test_the_system_one_errors_table_names_only_registered_codes():
    """docs/systemone.md's errors table, when it has one, names no code the registry does not hold."""
    rows = errors_rows(ROOT / "docs" / "systemone.md")
    assert {code: status for code, (status, _) in rows.items() if BY_CODE.get(code, PublicError(0, "")).status
            != status} == {}


BALANCER_ANSWER = re.compile(
    r'(?:http-error|http-request return) status (\d{3}) (.*?)string "\{\\"error\\":\{\\"code\\":\\"([a-z_]+)\\",'
    r'\\"message\\":\\"([^\\]*)\\"\}\}"')


def balancer_answers() -> list[tuple[int, str, str, str]]:
    text = (ROOT / "docker" / "haproxy" / "haproxy.cfg.template").read_text(encoding="utf-8")
    return [(int(status), code, options, message) for status, options, code, message in BALANCER_ANSWER.findall(text)]


def test_the_balancers_codes_are_the_registrys_both_ways():
    answers = balancer_answers()
    assert len(answers) >= 5
    assert {(status, code) for status, code, _, _ in answers} == \
        {(error.status, error.code) for error in REGISTRY if error.by_balancer}


def test_the_balancers_answers_follow_the_registrys_policy_and_words():
    for status, code, options, message in balancer_answers():
        error = BY_CODE[code]
        assert (f"hdr Retry-After {RETRY_AFTER_SECONDS}" in options) == error.retry_after, code
        assert error.words is None or message == error.words, code


@pytest.mark.anyio
async def test_an_http_exception_of_a_status_the_registry_lacks_is_a_failure_of_the_shims_own():
    """The routing raises only 404 and 405; anything else is answered as an unexpected failure, in a registered
    code, not in a code made up on the spot."""
    import json

    from starlette.exceptions import HTTPException
    from starlette.requests import Request

    from shim.errors.handlers import http_error

    request = Request({"type": "http", "method": "GET", "path": "/x", "headers": [], "query_string": b""})
    try:
        raise HTTPException(418)
    except HTTPException as exc:
        response = await http_error(request, exc)
    assert (response.status_code, json.loads(response.body)["error"]["code"]) == (500, "scoring_failed")
    try:
        raise HTTPException(405, headers={"Allow": "GET"})
    except HTTPException as exc:
        response = await http_error(request, exc)
    assert (response.status_code, json.loads(response.body)["error"]["code"]) == (405, "method_not_allowed")
    assert response.headers["allow"] == "GET"


def test_the_errors_documented_on_a_route_are_those_the_shim_sends_but_the_routings():
    assert {error.code for error in REGISTRY if error.routes is not None} == \
        {error.code for error in REGISTRY if error.by_shim and error.sent and error not in HTTP_CODES.values()}


def test_the_openapi_document_lists_every_code_the_shim_answers():
    """The served OpenAPI document's envelope names every code the shim sends and no other (tests/unit/test_openapi.py
    holds each route's statuses)."""
    from shim.app import openapi_document

    document = openapi_document()
    answered = {error.code for error in REGISTRY if error.by_shim and error.sent}
    for name in ("Error", "SystemOneError"):
        assert set(document["components"]["schemas"][name]["properties"]["error"]["properties"]["code"]["enum"]) \
            == answered, name
