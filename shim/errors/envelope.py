"""The error envelope `{error: {code, message}}`, built once in the shape of the surface that answers it: on the
System One routes with TypeSafe's detail beside it (FastAPI's list on a 422, else `{error_type, message}`)."""
from __future__ import annotations

from .codes import INVALID, PublicError

# The paths of the System One routes, whose errors follow TypeSafe's conventions.
SYSTEM_ONE_PREFIXES = ("/v1/",)


def is_system_one(path: str) -> bool:
    return path.startswith(SYSTEM_ONE_PREFIXES)


def envelope(error: PublicError, message: str | None = None, *, system_one: bool = False,
             detail: list[dict] | None = None) -> dict:
    """Its fixed words unless a message is given; on the System One routes, TypeSafe's detail beside it."""
    text = error.words if message is None else message
    if text is None:
        raise ValueError(f"{error.code} has no fixed words: name what was refused")
    body: dict = {"error": {"code": error.code, "message": text}}
    if system_one and error is INVALID:
        detail = detail if detail is not None else validation_detail(["body"], text)
    elif system_one:
        detail = {"error_type": error.error_type, "message": text}  # type: ignore[assignment]
    if detail is not None:
        body["detail"] = detail
    return body


def code_schema(codes: list[str], *, enum: bool = False) -> dict:
    """The envelope's `code` in a JSON schema's properties, admitting these codes alone (a const for one unless
    enum)."""
    return {"code": {"enum": codes} if enum or len(codes) > 1 else {"const": codes[0]}}


def policy_headers(error: PublicError, system_one: bool = False, own: dict[str, str] | None = None) -> dict[str, str]:
    return {**error.headers(system_one), **(own or {})}


def validation_detail(loc: list, message: str, kind: str = "value_error") -> list[dict]:
    """FastAPI's (and TypeSafe's) 422 detail, beside the envelope, so that their clients' typed errors read it."""
    return [{"loc": loc, "msg": message, "type": kind}]
