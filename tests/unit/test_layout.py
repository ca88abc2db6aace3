"""The shape of the code, read from its imports: the shim's two surfaces are siblings that only the app assembles,
the edge and the model port know no surface, nothing imports in a cycle, and the shim and the model side meet only
in wire/."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SURFACES = ("shim.semif", "shim.systemone")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The modules `path` imports, anywhere in it (a lazy import counts), resolved to absolute names."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from . import context` is a module
    return found


def graph(top: str) -> dict[str, set[str]]:
    modules = {module_name(path): path for path in (ROOT / top).rglob("*.py")}
    return {name: {imported for imported in imports_of(path) if imported in modules and imported != name}
            for name, path in modules.items()}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


SHIM = graph("shim")


def reached(modules: dict[str, set[str]], name: str) -> set[str]:
    """Every module `name` imports, directly or through others (a rule on imports holds for all of them)."""
    found: set[str] = set()
    todo = [name]
    while todo:
        for imported in modules.get(todo.pop(), ()):
            if imported not in found:
                found.add(imported)
                todo.append(imported)
    found.discard(name)
    return found


SHIM_REACHED = {name: reached(SHIM, name) for name in SHIM}


def test_the_graph_is_read():
    assert {"shim.app", "shim.semif.service", "shim.systemone.service", "shim.port.calls"} <= set(SHIM)
    assert "shim.port.calls" in SHIM["shim.semif.service"] and "shim.port.calls" in SHIM["shim.systemone.service"]
    assert "shim.port.http1" not in SHIM["shim.app"] and "shim.port.http1" in SHIM_REACHED["shim.app"]


@pytest.mark.parametrize("surface", SURFACES)
def test_a_surface_is_imported_only_by_itself_and_the_app(surface):
    users = {name for name, imported in SHIM.items() if any(within(target, surface) for target in imported)}
    assert {name for name in users if not within(name, surface)} == {"shim.app"}


@pytest.mark.parametrize("surface, sibling", [SURFACES, SURFACES[::-1]])
def test_no_surface_imports_its_sibling(surface, sibling):
    assert not [(name, target) for name, imported in SHIM_REACHED.items() if within(name, surface)
                for target in imported if within(target, sibling)]


@pytest.mark.parametrize("layer", ["shim.port", "shim.edge"])
def test_the_port_and_the_edge_know_no_surface_and_not_each_other(layer):
    other = {"shim.port": "shim.edge", "shim.edge": "shim.port"}[layer]
    above = (*SURFACES, "shim.app", "shim.server", "shim.errors.handlers", "shim.health", other)
    assert not [(name, target) for name, imported in SHIM_REACHED.items() if within(name, layer)
                for target in imported if any(within(target, upper) for upper in above)]



def test_the_server_knows_no_surface_no_port_and_no_edge():
    """shim/server/ bounds connections before any route: it knows neither surface, nor the model port, nor the
    middleware after it, not even through another module (the health check's path reaches it from the app)."""
    assert not [(name, target) for name, imported in SHIM_REACHED.items() if within(name, "shim.server")
                for target in imported if any(within(target, lower) for lower in (*SURFACES, "shim.port",
                                                                                  "shim.edge"))]


@pytest.mark.parametrize("module", ["shim.server.limits", "shim.server.roster"])
def test_the_servers_bounds_and_roster_are_pure(module):
    """What the bounds are and who gives way are decided without a socket, an event loop or uvicorn."""
    path = ROOT / (module.replace(".", "/") + ".py")
    assert not [target for target in imports_of(path)
                if any(within(target, io) for io in ("asyncio", "socket", "uvicorn", "httptools"))]


def test_the_server_keeps_no_state_at_module_level():
    """The roster of a server's connections is the server's (BoundedServer.roster): no module of shim/server/ holds
    a mutable table that every server in the process would share."""
    tables = {"dict", "list", "set", "deque", "OrderedDict", "defaultdict", "WeakKeyDictionary", "WeakValueDictionary"}
    found = []
    for path in (ROOT / "shim" / "server").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or getattr(node, "value", None) is None:
                continue
            if any(isinstance(target, ast.Name) and target.id == "__all__"
                   for target in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                continue
            value = node.value
            called = value.func if isinstance(value, ast.Call) else None
            name = getattr(called, "id", None) or getattr(called, "attr", None)
            if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) \
                    or name in tables:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def room(name: str) -> str:
    """A module's room in the shim's drawing: its top-level module, or its subpackage."""
    return ".".join(name.split(".")[:2])


def test_no_arrow_runs_back_up_between_the_shims_rooms():
    """The rooms import one another in one direction, so that they stand on floors, each above all that it imports:
    a cycle among rooms is an arrow running back up."""
    rooms: dict[str, set[str]] = {}
    for name, imported in SHIM.items():
        rooms.setdefault(room(name), set()).update(room(target) for target in imported if room(target) != room(name))
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == "open":
            pytest.fail(f"rooms in a cycle: {' -> '.join(path[path.index(name):] + [name])}; move what the lower "
                        f"one needs down, or raise the registry's errors where the request's life ends (shim/cycle.py)")
        if state.get(name) == "done":
            return
        state[name] = "open"
        for target in sorted(rooms.get(name, ())):
            visit(target, [*path, name])
        state[name] = "done"

    for name in sorted(rooms):
        visit(name, [])


def test_the_errors_import_nothing_of_the_shim_outside_them():
    """shim/errors/ is the ground floor: every other room may answer an error, so it knows none of them."""
    assert [(name, target) for name, imported in SHIM.items() if within(name, "shim.errors")
            for target in imported if not within(target, "shim.errors")] == []


# What the port may take from shim.errors: the model's failures and why the model is unusable, never an answer.
PORT_ERRORS = {"ModelFailure", "Failure", "IncompleteAnswer", "Problem", "from_triton", "model_unavailable",
               "unreachable", "MODEL_FACTS_UNAVAILABLE", "MODEL_NOT_ANSWERING", "MODEL_NOT_READY", "MODEL_UNAVAILABLE",
               "TRITON_NOT_READY", "TRITON_UNREACHABLE", "TRITON_ERROR", "OUT_OF_MEMORY_WORDS"}


def test_the_port_raises_only_model_failures():
    """Every failure leaving the port is a ModelFailure, so that it is counted, marks the model down or not and names
    its call from one table, Failure in shim/errors/failures.py: a new kind is a row there, never an ApiError."""
    found = []
    for path in (ROOT / "shim" / "port").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "errors":
                found += [f"{path.relative_to(ROOT)}: imports {alias.name} from {node.module}" for alias in node.names
                          if alias.name not in PORT_ERRORS]
    assert found == [], (f"{found}: the port raises only ModelFailure; add the new kind as a member of Failure in "
                         f"shim/errors/failures.py (its metric label, its public error, whether it marks the model "
                         f"down) and raise ModelFailure(Failure.<KIND>, message, call)")


def test_every_kind_the_model_answers_has_its_row_in_the_failure_table():
    from shim.errors import Failure
    from wire.protocol import Kind

    missing = [kind.name for kind in Kind if kind.name not in Failure.__members__]
    assert missing == [], (f"{missing}: the model answers kinds (wire/protocol.py, Kind) with no row in Failure "
                           f"(shim/errors/failures.py): add one, with its metric label, public error and marks_down")


def test_the_port_tells_what_happened_and_builds_no_http():
    """The model port raises what happened (the drain stopped the queue, the model failed); the exception handlers
    and the edge turn it into an answer: no Starlette in shim/port/, no error type of the envelope defined there, no
    response headers written there."""
    found = []
    for path in (ROOT / "shim" / "port").rglob("*.py"):
        where = str(path.relative_to(ROOT))
        found += [f"{where}: imports {target}" for target in imports_of(path) if within(target, "starlette")]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found += [f"{where}: {node.name}({base.id})" for base in node.bases
                          if isinstance(base, ast.Name) and base.id in ("ApiError", "HTTPException")]
            elif isinstance(node, ast.Dict):
                found += [f"{where}: header {key.value}" for key in node.keys
                          if isinstance(key, ast.Constant) and key.value in ("Retry-After", "Connection")]
    assert found == []


def test_the_app_hands_over_what_the_server_needs_explicitly():
    """No `app.state` and no getattr chain: the settings and the drain travel in shim.app.Service."""
    found = []
    for path in (ROOT / "shim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "state" and isinstance(node.value, ast.Name) \
                    and node.value.id == "app":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: app.state")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                    and any(getattr(getattr(arg, "func", None), "id", None) == "getattr" for arg in node.args):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: getattr(getattr(...))")
    assert found == []


@pytest.mark.parametrize("module", ["shim/errors/failures.py", "shim/health.py", "shim/port/watch.py",
                                    "shim/port/model.py"])
def test_why_the_model_is_unusable_is_never_read_back_from_text(module):
    """A Problem carries its public words and its detail from where it arises (errors.Problem): nothing that passes
    it on chooses the words by how a detail's text starts, nor cuts it."""
    calls = [node.func.attr for node in ast.walk(ast.parse((ROOT / module).read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)]
    assert [name for name in calls if name in ("startswith", "removeprefix", "partition", "split", "index", "find")] \
        == []


def test_the_edge_asks_whether_a_request_is_a_post_in_one_place():
    """Every POST guard, the disconnect watch among them, lives in shim/edge/ and asks edge.posts.is_post."""
    found = []
    for path in (ROOT / "shim").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(isinstance(part, ast.Constant) and part.value == "POST"
                                                     for part in (node.left, *node.comparators)):
                found.append(str(path.relative_to(ROOT)))
    assert found == ["shim/edge/posts.py"]

@pytest.mark.parametrize("top", ["shim", "intern_decision_model", "wire", "gpucheck", "acceptance", "devstack"])
def test_no_imports_in_a_cycle(top):
    modules = graph(top)
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            pytest.fail(f"import cycle: {' -> '.join(path[path.index(name):] + [name])}")
        if name in done:
            return
        for imported in sorted(modules[name]):
            # a package's __init__ importing its own modules is how a package is read, not a cycle
            if not within(imported, name):
                visit(imported, [*path, name])
        done.add(name)

    for name in sorted(modules):
        visit(name, [])


def test_the_shim_and_the_model_side_meet_only_in_wire():
    shim = {target for path in (ROOT / "shim").rglob("*.py") for target in imports_of(path)}
    model = {target for path in (ROOT / "intern_decision_model").rglob("*.py") for target in imports_of(path)}
    assert not [target for target in shim if within(target, "intern_decision_model")]
    assert not [target for target in model if within(target, "shim")]


def test_tests_share_helpers_and_fixtures_not_each_other():
    """What tests share lives in helper modules and conftest fixtures: no test module imports another, nor a
    conftest (pytest hands fixtures over by name)."""
    reaching = []
    for path in (ROOT / "tests").rglob("*.py"):
        for target in imports_of(path):
            last = target.rsplit(".", 1)[-1]
            if within(target, "tests") and (last.startswith("test_") or last == "conftest"):
                reaching.append((str(path.relative_to(ROOT)), target))
    assert reaching == []


def test_the_distribution_lists_every_package_under_its_top_level_packages():
    """pyproject.toml names its packages one by one: a new subpackage must be added there, or a wheel leaves it out
    (the editable install would still find it, so nothing else would notice). A directory of data files is listed
    too, as a package of its own without an __init__.py, its files named in package-data (setuptools' way: it warns
    of any importable directory it is not told about; tests/unit/test_distribution.py builds the wheel)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    tops = {name.split(".")[0] for name in listed}
    found = {module_name(init.parent / "__init__.py") for top in tops for init in (ROOT / top).rglob("__init__.py")}
    data = {name for name in setuptools["package-data"] if not (ROOT / name.replace(".", "/") / "__init__.py").exists()}
    assert [name for name in data if not (ROOT / name.replace(".", "/")).is_dir()] == []
    assert found | data == listed


def test_the_playground_imports_nothing_of_the_shim_and_only_the_app_imports_it():
    """The page talks to the public API like any caller: its route module needs no part of the shim."""
    assert not [(name, target) for name, imported in SHIM_REACHED.items() if within(name, "shim.playground")
                for target in imported if not within(target, "shim.playground")]
    users = {name for name, imported in SHIM.items() if any(within(target, "shim.playground") for target in imported)}
    assert {name for name in users if not within(name, "shim.playground")} == {"shim.app"}


# Knowledge written once, where every package that needs it may import it (the acceptance kit is standard library
# only, and the benchmarks and the GPU check already import it).
ONE_PERCENTILE = "acceptance/stats.py"
ONE_ANCHOR = "acceptance/shapes.py"
ANCHOR_STATE_TEXT = "The customer was charged twice and asks for the extra payment back."


@pytest.mark.parametrize("top", ["acceptance", "bench", "gpucheck"])
def test_one_percentile(top):
    """No second percentile: no function of that name, no numpy percentile, no statistics.quantiles."""
    found = []
    for path in (ROOT / top).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "percentile":
                found.append(f"{path.relative_to(ROOT)}: def percentile")
            elif isinstance(node, ast.Attribute) and node.attr in ("percentile", "quantile", "quantiles"):
                found.append(f"{path.relative_to(ROOT)}: .{node.attr}")
    assert found == ([f"{ONE_PERCENTILE}: def percentile"] if top == "acceptance" else [])


@pytest.mark.parametrize("top", ["acceptance", "bench", "gpucheck"])
def test_one_anchor_request(top):
    """The anchor's state is written in one place; the others import it."""
    writing = [str(path.relative_to(ROOT)) for path in (ROOT / top).rglob("*.py")
               if ANCHOR_STATE_TEXT in path.read_text()]
    assert writing == ([ONE_ANCHOR] if top == "acceptance" else [])


def test_the_readme_says_of_every_top_level_folder_whether_it_is_the_service_or_a_tool():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line and not line.startswith(".")}
    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([\w.]+)/` \| (service|deployment|tool|docs) \|", readme, re.M))
    assert set(rows) == folders, f"README's folder table: missing {folders - set(rows)}, stale {set(rows) - folders}"
    assert {name for name, part in rows.items() if part == "service"} == {"shim", "model_repository",
                                                                          "intern_decision_model", "wire"}


# A package's map: docs/architecture.md, "Package maps", holds one fenced block per package under its heading
# ("### shim/edge/"), one module a line, the name at the line's start and two spaces or the line's end after it (a
# subpackage or a folder of data with a slash: "edge/", "static/").
MAP_ENTRY = re.compile(r"^([a-z_][a-z0-9_]*(?:/|\.json)?)(?: {2,}|$)", re.M)
MAP_BLOCK = re.compile(r"^### (\S+)/\n(?:(?!### |```).*\n)*?```\n((?:(?!```).*\n)*)```", re.M)
MAP_PACKAGES = sorted([*(init.parent for init in (ROOT / "shim").rglob("__init__.py")), ROOT / "wire"])


def package_maps() -> dict[str, str]:
    """Each package's block, keyed by the package's path from the repository's root ("shim/edge")."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    return dict(MAP_BLOCK.findall(page[page.index("\n## Package maps\n"):]))


MAPS = package_maps()


def map_of(package: Path) -> set[str]:
    return set(MAP_ENTRY.findall(MAPS.get(str(package.relative_to(ROOT)), "")))


def contents_of(package: Path) -> set[str]:
    """What a map must name: the modules (not __init__ nor __main__), the subpackages and data folders, the data files
    beside the modules."""
    found = set()
    for child in package.iterdir():
        if child.is_dir() and child.name != "__pycache__":
            found.add(child.name + "/")
        elif child.suffix == ".py" and not child.name.startswith("__"):
            found.add(child.stem)
        elif child.suffix == ".json":
            found.add(child.name)
    return found


def test_a_package_map_is_read():
    assert {"app", "server/", "edge/", "openapi.json"} <= map_of(ROOT / "shim")
    assert {"framing", "tokens", "encoding"} <= map_of(ROOT / "shim" / "edge")
    assert sorted(MAPS) == sorted(str(package.relative_to(ROOT)) for package in MAP_PACKAGES), "a map per package"


@pytest.mark.parametrize("package", MAP_PACKAGES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_module_appears_in_its_packages_map(package):
    """A newcomer finds a module from its package's map: each one is there, and the map names nothing that is gone."""
    listed, present = map_of(package), contents_of(package)
    assert (sorted(present - listed), sorted(listed - present)) == ([], []), "(not in the map, in the map but gone)"
