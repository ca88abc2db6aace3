"""The service's prose stays short: each module says what it is in a few lines, and docstrings and comments stay a
small share of the service's characters (the rest is in docs/, the packages' maps in docs/architecture.md)."""
from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICE = ("shim", "wire", "intern_decision_model", "model_repository")
MODULES = sorted(path for top in SERVICE for path in (ROOT / top).rglob("*.py"))
MAX_MODULE_DOCSTRING_LINES = 5
# Over all characters, as uvicorn's 9.8 % and Starlette's 8.4 % are counted.
MAX_PROSE_PERCENT = 12
LARGEST_SHOWN = 5


def docstring_node(node: ast.AST) -> ast.Expr | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0]
    return None


def prose_characters(source: str) -> int:
    """Characters of every docstring (module, class, function) and every comment, trailing ones included."""
    docstrings = sum(
        len(ast.get_source_segment(source, doc))
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and (doc := docstring_node(node)) is not None)
    comments = sum(len(token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
                   if token.type == tokenize.COMMENT)
    return docstrings + comments


def test_prose_counts_docstrings_and_every_comment_by_characters():
    source = '"""Doc."""\nx = 1  # why\n# alone\n\n\ndef f():\n    """F."""\n    return "# not a comment"\n'
    assert prose_characters(source) == len('"""Doc."""') + len("# why") + len("# alone") + len('"""F."""')


@pytest.mark.parametrize("path", MODULES, ids=lambda path: str(path.relative_to(ROOT)))
def test_a_module_docstring_says_what_and_why_in_at_most_five_lines(path):
    doc = docstring_node(ast.parse(path.read_text()))
    assert doc is not None, "every service module says what it is"
    lines = [line for line in doc.value.value.strip().splitlines() if line.strip()]
    assert len(lines) <= MAX_MODULE_DOCSTRING_LINES, f"{len(lines)} lines: move the detail to docs/ or to its line"


def test_docstrings_and_comments_stay_a_small_share_of_the_service():
    sources = {path: path.read_text() for path in MODULES}
    prose = {path: prose_characters(source) for path, source in sources.items()}
    share = 100 * sum(prose.values()) / sum(map(len, sources.values()))
    largest = sorted(prose, key=prose.get, reverse=True)[:LARGEST_SHOWN]
    assert share <= MAX_PROSE_PERCENT, (
        f"{share:.1f} % of the service's characters are docstrings and comments (at most {MAX_PROSE_PERCENT} %); "
        "most prose: " + ", ".join(f"{path.relative_to(ROOT)} {prose[path]}" for path in largest))
