"""The OpenAPI document as served: the committed one with each operation's error statuses and codes filled in from
the registry; and the GETs it secures."""
from __future__ import annotations

import copy

from .codes import REGISTRY, PublicError, Routes
from .envelope import code_schema, envelope, is_system_one

ENVELOPES = ("Error", "SystemOneError")


def answers(routes: Routes | tuple[str, ...] | None, path: str, method: str, operation: dict) -> bool:
    if isinstance(routes, tuple):
        return path in routes
    return (routes is Routes.EVERY or (routes is Routes.TOKEN and bool(operation["security"]))
            or (routes is Routes.POST and method == "post"))


def errors_of(path: str, method: str, operation: dict) -> dict[int, list[PublicError]]:
    by_status: dict[int, list[PublicError]] = {}
    for error in REGISTRY:
        if answers(error.routes, path, method, operation):
            by_status.setdefault(error.status, []).append(error)
    return by_status


def secured_gets(document: dict) -> frozenset[str]:
    return frozenset(path for path, methods in document["paths"].items() if methods.get("get", {}).get("security"))


def served(committed: dict) -> dict:
    """Refuses an operation without its security, or a committed error response no registry error answers there."""
    document = copy.deepcopy(committed)
    codes = [error.code for error in REGISTRY if error.by_shim and error.sent]
    for name in ENVELOPES:
        error = document["components"]["schemas"][name]["properties"]["error"]
        error["properties"] = {**code_schema(codes, enum=True), **error["properties"]}
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            if "security" not in operation:
                raise ValueError(f"{method.upper()} {path} declares no security: [] when open, "
                                 '[{"bearerAuth": []}] when it needs the token')
            operation["responses"] = responses(path, method, operation)
    return document


def responses(path: str, method: str, operation: dict) -> dict:
    """Its own below 400, then each status the registry gives it."""
    by_status = errors_of(path, method, operation)
    written = operation["responses"]
    unanswered = sorted(int(status) for status in written if int(status) >= 400 and int(status) not in by_status)
    if unanswered:
        raise ValueError(f"{method.upper()} {path} documents {unanswered}, which no error of the registry answers")
    return {**{status: response for status, response in written.items() if int(status) < 400},
            **{str(status): with_codes(written.get(str(status)) or generated(path, errors), errors)
               for status, errors in sorted(by_status.items())}}


def with_codes(response: dict, errors: list[PublicError]) -> dict:
    content = response["content"]["application/json"]
    example = content.get("example", {}).get("error", {}).get("code")
    codes = sorted((error.code for error in errors), key=lambda code: code != example)
    schema = content["schema"]
    admitting = schema if "allOf" in schema else next(member for member in schema["anyOf"] if "allOf" in member)
    admitting["properties"] = {"error": {"properties": code_schema(codes)}}
    return response


def generated(path: str, errors: list[PublicError]) -> dict:
    system_one = is_system_one(path)
    headers = {"X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"}}
    if system_one:
        headers["x-typesafe-request-id"] = {"$ref": "#/components/headers/x-typesafe-request-id"}
    for name in ("Retry-After", "WWW-Authenticate"):
        if any(name in error.headers(system_one) for error in errors):
            headers[name] = {"$ref": f"#/components/headers/{name}"}
    first = errors[0]
    example = envelope(first, first.words or first.phrase, system_one=system_one)
    return {"description": "; ".join(f"{error.words or error.phrase} ({error.code})" for error in errors),
            "headers": headers,
            "content": {"application/json": {
                "schema": {"allOf": [{"$ref": f"#/components/schemas/{ENVELOPES[system_one]}"}]},
                "example": example}}}
