"""No import cycle reaches the server package, counting every import a module names.

Imports inside functions and ``TYPE_CHECKING`` blocks count too: a cycle hidden
in one is still two modules that can't be understood (or tested) apart.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rlinks_rllib"
ROOT = PACKAGE.parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import mod` imports pkg.mod; `from pkg import name` imports pkg.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in files and t != name)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_and_type_checking_imports():
    graph = _import_graph()
    assert "rlinks_rllib.server.env_runner" in graph["rlinks_rllib"]  # inside __getattr__
    assert "rlinks_rllib.server.session" in graph["rlinks_rllib.server.listener"]


def test_no_import_cycle_touches_the_server():
    cycles = [c for c in _cycles(_import_graph()) if any(m.startswith("rlinks_rllib.server") for m in c)]
    assert cycles == []


def test_the_session_does_not_know_the_listener():
    assert "rlinks_rllib.server.listener" not in _import_graph()["rlinks_rllib.server.session"]
