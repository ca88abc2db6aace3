"""The service's prose stays short: each module says what it is and why in a few lines, and docstrings and comments
stay a small share of the service's lines (the rest is in docs/, the packages' maps in docs/architecture.md)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ("shim", "wire", "intern_decision_model", "model_repository")
MODULES = sorted(path for top in SERVICE for path in (ROOT / top).rglob("*.py"))
MAX_MODULE_DOCSTRING_LINES = 5
# Over all lines, blank ones included, as uvicorn's 6.7 % and Starlette's 6.5 % are counted.
MAX_PROSE_PERCENT = 8


def docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def prose_lines(path: Path) -> tuple[int, int]:
    """(docstring and comment lines, all lines) of one module."""
    source = path.read_text()
    lines = source.splitlines()
    in_docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if (doc := docstring_node(node)) is not None:
                in_docstrings.update(range(doc.lineno, doc.end_lineno + 1))
    prose = sum(1 for number, line in enumerate(lines, 1) if number in in_docstrings or line.strip().startswith("#"))
    return prose, len(lines)


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_module_docstring_says_what_and_why_in_at_most_five_lines(path):
    doc = docstring_node(ast.parse(path.read_text()))
    assert doc is not None, "every service module says what it is"
    lines = [line for line in doc.value.value.strip().splitlines() if line.strip()]
    assert len(lines) <= MAX_MODULE_DOCSTRING_LINES, f"{len(lines)} lines: move the detail to docs/ or to its line"


def test_docstrings_and_comments_stay_a_small_share_of_the_service():
    prose, total = map(sum, zip(*(prose_lines(path) for path in MODULES)))
    share = 100 * prose / total
    assert share <= MAX_PROSE_PERCENT, f"{share:.1f} % of the service's lines are docstrings and comments"

