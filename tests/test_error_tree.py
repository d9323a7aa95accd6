"""One error tree and one spelling of every error code.

Every exception class the package defines derives from ``RLinksError``, so a
user catches everything from us with one ``except``; every error code is an
``ErrorCode`` member, written as a string nowhere else in the package, and
documented in ``docs/PROTOCOL.md``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from rlinks_rllib.protocol.errors import ERROR_CODES, ErrorCode, RLinksError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "rlinks_rllib"
SOURCES = sorted(PACKAGE.rglob("*.py"))
#: ``python -m rlinks_rllib`` runs the command when imported.
IMPORTABLE = [p for p in SOURCES if p.name != "__main__.py"]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", IMPORTABLE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_exception_class_derives_from_the_root(path):
    module = importlib.import_module(_module(path))
    for name, value in vars(module).items():
        # Private ones are control flow inside a module and never escape it.
        if name.startswith("_"):
            continue
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__:
            assert issubclass(value, RLinksError), f"{module.__name__}.{name} does not derive from RLinksError"


def _not_codes(tree: ast.AST) -> set[int]:
    """Strings that may look like a code and aren't: docstrings, and names in ``__all__``."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            ids.update(id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_error_codes_are_spelled_only_in_the_enum(path):
    if path == PACKAGE / "protocol" / "errors.py":
        return
    tree = ast.parse(path.read_text(), str(path))
    docstrings = _not_codes(tree)
    codes = {code.value for code in ErrorCode}
    bare = [
        f"line {node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in codes and id(node) not in docstrings
    ]
    assert not bare, f"use ErrorCode members instead of bare code strings: {bare}"


def test_every_code_is_documented():
    spec = (ROOT / "docs" / "PROTOCOL.md").read_text()
    for code in ErrorCode:
        assert f"| `{code.value}` |" in spec, f"{code.value} is missing from PROTOCOL.md section 11"
    assert ErrorCode.UNEXPECTED_MESSAGE.value not in ERROR_CODES  # reported, never sent
