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
    assert read - documented == set(), "add a row | `NAME` | shim or model | default | rule | to docs/configuration.md"
    assert documented - read - READ_ELSEWHERE == set(), "settings in docs/configuration.md that nothing reads"
    elsewhere = page_text(ROOT / "docker" / "healthcheck.py")
    assert [name for name in READ_ELSEWHERE if f'(env, "{name}"' not in elsewhere] == []


ROUTE_ROW = re.compile(r"^\| (GET|POST) \| `(/[^`]*)` \| ([^|]*)\|", re.M)
SURFACE_PAGES = ("semif.md", "systemone.md")
NAMED_ROUTE = re.compile(r"`(GET|POST) (/[^`\s]*)`")
ANY_ROUTE = re.compile(r"\b(GET|POST) (/[\w./{}-]*)")


def served_routes() -> set[tuple[str, str]]:
    """(method, path) of each route the app serves, HEAD aside."""
    from starlette.routing import Route

    from shim.app import create_app

    from .fake_model import FakeModel
    from .shim_helpers import make_settings

    app = create_app(make_settings(), FakeModel())
    return {(method, route.path) for route in app.routes if isinstance(route, Route)
            for method in route.methods if method != "HEAD"}


def route_rows() -> dict[tuple[str, str], str]:
    """The surfaces' route tables: (method, path) -> the row's body column."""
    return {(method, path): body for page in SURFACE_PAGES
            for method, path, body in ROUTE_ROW.findall(page_text(DOCS / page))}


def section(page: Path, heading: str) -> str:
    text = page_text(page)
    return text.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


def test_every_route_the_app_serves_is_in_a_surfaces_route_table_and_no_other():
    served, tables = served_routes(), set(route_rows())
    assert ("POST", "/decide") in tables and ("GET", "/v1/models") in tables  # the rows are read
    assert sorted(served - tables) == [], "add a row | METHOD | `path` | body | success | to the route table of " \
        "docs/semif.md or docs/systemone.md"
    assert sorted(tables - served) == [], "in a route table of docs/semif.md or docs/systemone.md but not served"


def test_a_route_tables_get_says_bearer_where_its_openapi_operation_asks_for_the_token():
    from shim.app import openapi_document
    from shim.errors.openapi import secured_gets

    marked = {path for (method, path), body in route_rows().items() if method == "GET" and "(bearer)" in body}
    assert marked == secured_gets(openapi_document()), \
        "a GET row's body column says '(bearer)' exactly when its shim/openapi.json operation has security"


def test_the_readmes_semif_routes_are_the_semif_route_table():
    named = set(NAMED_ROUTE.findall(section(ROOT / "README.md", "## The semif surface")))
    table = set(ROUTE_ROW.findall(page_text(DOCS / "semif.md")))
    assert sorted({(method, path) for method, path, _ in table} - named) == [], \
        "add `METHOD path` to README.md, 'The semif surface', first paragraph"
    assert sorted(named - {(method, path) for method, path, _ in table}) == [], \
        "README.md, 'The semif surface', names a route docs/semif.md's route table lacks"


def test_every_route_the_readme_and_the_architecture_name_is_served():
    """The other pages name routes as examples, never as a whole list (that is the route tables'): a stale one fails."""
    from shim.playground.routes import PAGE_PATH, ROOT_PATH

    served = served_routes() | {("GET", PAGE_PATH), ("GET", ROOT_PATH)}
    for page in (ROOT / "README.md", DOCS / "architecture.md"):
        named = {(method, path.rstrip(".")) for method, path in ANY_ROUTE.findall(page_text(page))}
        assert ("POST", "/decide") in named, page.name  # the names are read
        assert sorted(named - served) == [], f"{page.name} names a route the app does not serve"


def test_the_route_labels_are_the_tables_routes_but_those_the_series_row_names_as_other():
    from shim.app import create_app
    from shim.metrics import OTHER_ROUTE, ShimMetrics

    from .fake_model import FakeModel
    from .shim_helpers import make_settings

    metrics = ShimMetrics()
    create_app(make_settings(), FakeModel(), metrics)
    labelled = {path for _, path in served_routes() if metrics.route_of(path) != OTHER_ROUTE}
    (row,) = [line for line in section(DOCS / "operations.md", "### The shim's series").splitlines()
              if line.startswith("| `intern_decision_shim_requests_total`")]
    as_other = set(re.findall(r"`(/[^`]*)`", row))
    assert as_other and as_other.isdisjoint(labelled), \
        f"docs/operations.md, 'The shim's series', requests_total: {sorted(as_other & labelled)} are labelled"
    assert labelled == {path for _, path in route_rows()} - as_other, \
        "docs/operations.md, 'The shim's series', requests_total: name each route of a table that is not labelled"


def test_the_differences_are_numbered_without_a_gap():
    numbers = [int(n) for n in re.findall(r"^(\d+)\. \*\*", page_text(DOCS / "differences-from-semif.md"), re.M)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 42
