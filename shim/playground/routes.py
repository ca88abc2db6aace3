"""GET /playground, its files and GET / pointing to it, under a strict CSP and no caching (the page holds the API
token). One BaseRoute, not Routes: the pages are not part of the JSON API."""
from __future__ import annotations

from importlib import resources

from starlette.exceptions import HTTPException
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Match, NoMatchFound
from starlette.types import Receive, Scope, Send

PAGE_PATH = "/playground"
ROOT_PATH = "/"
READ_METHODS = ("GET", "HEAD")
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
ASSETS = {
    "playground.mjs": "text/javascript; charset=utf-8",
    "request.mjs": "text/javascript; charset=utf-8",
    "playground.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
PAGE_FILE = "index.html"


def static_file(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


class PlaygroundPages(BaseRoute):
    def __init__(self) -> None:
        self._files = {PAGE_PATH: (static_file(PAGE_FILE), "text/html; charset=utf-8")}
        self._files.update({f"{PAGE_PATH}/{name}": (static_file(name), media_type)
                            for name, media_type in ASSETS.items()})

    @property
    def paths(self) -> frozenset[str]:
        return frozenset({ROOT_PATH, *self._files})

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            return Match.NONE, {}
        return (Match.FULL if scope["method"] in READ_METHODS else Match.PARTIAL), {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in READ_METHODS:
            raise HTTPException(405, headers={"Allow": ", ".join(READ_METHODS)})
        if scope["path"] == ROOT_PATH:
            response: Response = RedirectResponse(PAGE_PATH, status_code=307, headers=SECURITY_HEADERS)
        else:
            body, media_type = self._files[scope["path"]]
            response = Response(body, media_type=media_type, headers=SECURITY_HEADERS)
        await response(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: str):
        raise NoMatchFound(name, path_params)


def playground_routes() -> list[BaseRoute]:
    return [PlaygroundPages()]
