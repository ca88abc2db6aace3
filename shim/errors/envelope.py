"""The error envelope `{error: {code, message}}`; on the System One routes with TypeSafe's detail beside it."""
from __future__ import annotations

from .codes import INVALID, PublicError

SYSTEM_ONE_PREFIXES = ("/v1/",)


def is_system_one(path: str) -> bool:
    return path.startswith(SYSTEM_ONE_PREFIXES)


def envelope(error: PublicError, message: str | None = None, *, system_one: bool = False,
             detail: list[dict] | None = None) -> dict:
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
    return {"code": {"enum": codes} if enum or len(codes) > 1 else {"const": codes[0]}}


def policy_headers(error: PublicError, system_one: bool = False, own: dict[str, str] | None = None) -> dict[str, str]:
    return {**error.headers(system_one), **(own or {})}


def validation_detail(loc: list, message: str, kind: str = "value_error") -> list[dict]:
    """FastAPI's 422 detail, so that its clients' typed errors read it."""
    return [{"loc": loc, "msg": message, "type": kind}]
