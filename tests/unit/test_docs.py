"""The docs a newcomer reads hold what the code does: every link resolves, every setting the code reads is in
docs/configuration.md (and every one listed there is read), every route is in a surface's route table, and the
differences from semif-serve run 1..N. The errors tables are held to the error registry by test_error_codes.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# How the two sides' settings modules read a variable: get(env, "NAME"), integer(env, "NAME", ...), and the like.
READ = re.compile(r"\(env, \"([A-Z0-9_]+)\"")
# wire/tracing.py: OTLP_ENDPOINT, read by the shim's settings and Triton's start script alike.
SETTINGS_SOURCES = ("shim/settings.py", "intern_decision_model/settings.py", "wire/tracing.py")
# Read elsewhere than the settings modules: the ping's timeout of the Triton container's healthcheck
# (docker/healthcheck.py, through wire/env.py as the settings are).
READ_ELSEWHERE = {"PING_TIMEOUT_SECONDS"}


def page_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    targets = [target for target in LINK.findall(page_text(page)) if "://" not in target]
    assert [target for target in targets if not (page.parent / target).exists()] == []


def test_the_readme_links_every_document():
    readme = page_text(ROOT / "README.md")
    assert [page.name for page in sorted(DOCS.glob("*.md")) if f"](docs/{page.name})" not in readme] == []


def documented_settings() -> dict[str, str]:
    """The configuration table's rows: variable -> its `read by` column (one row may name two variables)."""
    rows: dict[str, str] = {}
    for line in page_text(DOCS / "configuration.md").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4:
            for name in re.findall(r"`([A-Z0-9_]+)`", cells[0]):
                rows[name] = cells[1]
    return rows


def test_the_table_is_read():
    rows = documented_settings()
    assert rows["API_TOKEN"] == "shim" and rows["VRAM_CAP_GIB"] == "model" and rows["PORT"] == "shim"


def test_every_setting_the_code_reads_is_documented_and_every_documented_one_is_read():
    read = {name for source in SETTINGS_SOURCES for name in READ.findall(page_text(ROOT / source))}
    assert {"API_TOKEN", "MAX_QUEUE", "MAX_TOKENS", "REVISION"} <= read  # the pattern still finds them
    documented = set(documented_settings())
    assert read - documented == set(), "settings read but not in docs/configuration.md"
    assert documented - read - READ_ELSEWHERE == set(), "settings in docs/configuration.md that nothing reads"
    elsewhere = page_text(ROOT / "docker" / "healthcheck.py")
    assert [name for name in READ_ELSEWHERE if f'(env, "{name}"' not in elsewhere] == []


ROUTE_ROW = re.compile(r"^\| (GET|POST) \| `(/[^`]*)` \|", re.M)


def test_every_route_the_app_serves_is_in_a_surfaces_route_table_and_no_other():
    from starlette.routing import Route

    from shim.app import create_app
    from shim.settings import ShimSettings

    from .fake_model import FakeModel

    app = create_app(ShimSettings.from_env({"INTERN_DECISION_API_TOKEN": "t" * 32,
                                           "INTERN_DECISION_TRITON_API_KEY": "k" * 32}), FakeModel())
    served = {(method, route.path) for route in app.routes if isinstance(route, Route)
              for method in route.methods if method != "HEAD"}
    tables = {row for page in ("semif.md", "systemone.md") for row in ROUTE_ROW.findall(page_text(DOCS / page))}
    assert ("POST", "/decide") in tables and ("GET", "/v1/models") in tables  # the rows are read
    assert (sorted(served - tables), sorted(tables - served)) == ([], []), (
        "(served, not in a table; in one, not served)")


def test_the_differences_are_numbered_without_a_gap():
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", page_text(DOCS / "differences-from-semif.md"), re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 42
