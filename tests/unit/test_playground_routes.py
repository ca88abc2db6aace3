"""The playground's pages as the app serves them: the page and its files from the package with a strict
Content-Security-Policy, nosniff and no caching, / pointing to the page, nothing but this origin's own files, and
PLAYGROUND=0 serving none of it."""
from __future__ import annotations

import asyncio
import re
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from shim.playground.routes import ASSETS, PAGE_FILE

from .fake_model import FakeModel
from .shim_helpers import AUTH, client_for, make_settings

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "shim" / "playground" / "static"


def fetch(method: str, path: str, **env: str) -> httpx.Response:
    async def ask():
        async with client_for(FakeModel(), **env) as client:
            return await client.request(method, path, headers=AUTH)

    return asyncio.run(ask())


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.script_text += data.strip()


def page_tags() -> Tags:
    parser = Tags()
    parser.feed(fetch("GET", "/playground").text)
    return parser


@pytest.mark.parametrize("path", ["/playground", *[f"/playground/{name}" for name in ASSETS]])
def test_every_file_is_served_with_the_security_headers_and_its_type(path):
    answer = fetch("GET", path)
    assert answer.status_code == 200
    policy = answer.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["cache-control"] == "no-store"
    name = PAGE_FILE if path == "/playground" else path.rsplit("/", 1)[1]
    assert answer.content == (STATIC / name).read_bytes()
    expected = "text/html" if name == PAGE_FILE else ASSETS[name].split(";")[0]
    assert answer.headers["content-type"].split(";")[0] == expected


def test_the_root_points_to_the_page():
    answer = fetch("GET", "/")
    assert answer.status_code == 307 and answer.headers["location"] == "/playground"


def test_other_methods_are_405_and_other_files_404():
    refused = fetch("POST", "/playground")
    assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
    assert refused.json()["error"]["code"] == "method_not_allowed"
    assert fetch("GET", "/playground/../shim/settings.py").status_code == 404
    assert fetch("GET", "/playground/index.html").status_code == 404
    assert fetch("GET", "/playground/").status_code == 404


def test_the_page_loads_only_its_own_files_and_has_no_inline_script_or_style():
    parser = page_tags()
    assert parser.script_text == ""
    assert not [tag for tag, attrs in parser.tags if tag == "style" or "style" in attrs
                or any(name.startswith("on") for name in attrs)]
    loaded = [attrs.get("src") or attrs.get("href") for tag, attrs in parser.tags if tag in ("script", "link")]
    assert sorted(loaded) == sorted(f"/playground/{name}"
                                    for name in ("playground.mjs", "playground.css", "favicon.svg"))


def test_the_scripts_import_only_the_packages_own_modules():
    for name in (name for name in ASSETS if name.endswith(".mjs")):
        imports = re.findall(r"""^import .* from ["'](.+)["'];$""", (STATIC / name).read_text(), re.MULTILINE)
        assert all(target.startswith("./") and target[2:] in ASSETS for target in imports), (name, imports)
    assert not [path for path in STATIC.iterdir() if "://" in path.read_text()
                and path.name != "favicon.svg"]  # the icon names the SVG namespace, nothing else names a URL


def test_every_control_of_the_page_has_a_label():
    parser = page_tags()
    labelled = {attrs["for"] for tag, attrs in parser.tags if tag == "label" and "for" in attrs}
    controls = [attrs for tag, attrs in parser.tags if tag in ("input", "select", "textarea")]
    # a radio or checkbox sits inside its label (implicit label); every other control names its label by id
    assert all(attrs.get("type") in ("radio", "checkbox") or attrs["id"] in labelled for attrs in controls)


def test_off_serves_no_page():
    assert make_settings().playground is True
    assert fetch("GET", "/playground", playground="0").status_code == 404
    assert fetch("GET", "/", playground="0").status_code == 404


def test_the_switch_takes_only_0_or_1():
    with pytest.raises(ValueError, match="INTERN_DECISION_PLAYGROUND must be 1"):
        make_settings(playground="off")


def test_a_wheel_carries_every_static_file():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "shim.playground.static" in pyproject["tool"]["setuptools"]["packages"]
    assert pyproject["tool"]["setuptools"]["package-data"]["shim.playground.static"] == ["*"]
    assert {PAGE_FILE, *ASSETS} == {path.name for path in STATIC.iterdir()}
