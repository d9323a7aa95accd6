"""The package's layers, checked from the modules' own imports.

``docs/DESIGN`` in one rule each: no import cycle anywhere in
``rlinks_rllib`` (imports inside functions and ``TYPE_CHECKING`` blocks count:
a cycle that is only lazy is still one a reader has to untangle), and the
simulator side (``client/``, ``protocol/``) never imports Ray or torch, so it
installs and runs on a machine that has neither. The folders are rooms by
role (``docs/LAYOUT.md``), stacked: each imports only itself and the rooms
below it, and no module but a package's ``__init__`` only re-exports another,
except the few kept so that an old import path runs on (:data:`KEPT_PATHS`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "rlinks_rllib"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
RAY_FREE = ("rlinks_rllib.client", "rlinks_rllib.protocol")
FORBIDDEN_THERE = ("ray", "torch", "gymnasium", "yaml", "matplotlib")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports, absolute, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from pkg import submodule`` imports the submodule.
            found.update(f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES)
    return found


GRAPH = {name: {m for m in _imports(name, path) if m in MODULES and m != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_checker_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_package_has_modules_and_imports():
    assert len(MODULES) > 30
    assert "rlinks_rllib.protocol.framing" in GRAPH["rlinks_rllib.protocol.connection"]


def test_no_import_cycle_in_the_package():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith(RAY_FREE)])
def test_the_simulator_side_imports_no_ray_or_torch(name):
    bad = sorted(
        m for m in _imports(name, MODULES[name]) if m.split(".")[0] in FORBIDDEN_THERE
    )
    assert not bad, f"{name} imports {bad}: the simulator side must install with numpy and msgpack alone"
    higher = sorted(m for m in GRAPH[name] if not m.startswith(RAY_FREE) and m not in ("rlinks_rllib", "rlinks_rllib._version"))
    assert not higher, f"{name} imports {higher}, a layer above the simulator side"


def test_protocol_imports_nothing_above_it():
    for name in (n for n in MODULES if n.startswith("rlinks_rllib.protocol")):
        above = sorted(m for m in GRAPH[name] if not m.startswith("rlinks_rllib.protocol") and m != "rlinks_rllib._version")
        assert not above, f"{name} imports {above}: the protocol layer imports only itself"


#: The rooms, lowest first: a module belongs to the room of its longest prefix and imports only its own
#: room and lower ones. Rooms on one line stand side by side and import none of each other.
ROOMS = [
    ("rlinks_rllib._version",),
    ("rlinks_rllib.protocol",),  # RLlink sans I/O: one room, every rule of the conversation
    ("rlinks_rllib.client.errors",),
    ("rlinks_rllib.client.policies",),
    ("rlinks_rllib.client.network",),
    ("rlinks_rllib.client.inference",),
    ("rlinks_rllib.client",),  # its root: what a simulator calls (EnvClient, PolicyClient, RLinkActor)
    ("rlinks_rllib.server",),  # its root: settings, errors, metrics, recording, graph export, the stop signal
    ("rlinks_rllib.server.takeover", "rlinks_rllib.server.served", "rlinks_rllib.server.delivery"),
    ("rlinks_rllib.server.ingest",),
    ("rlinks_rllib.server.network",),
    ("rlinks_rllib.server.env_runner",),
    ("rlinks_rllib.dataset",),
    ("rlinks_rllib.training",),
    ("rlinks_rllib",),  # the command line, the web game's server, the bundled files
]
#: Modules that only re-export, so that an import path the docs once showed runs on.
KEPT_PATHS = {
    "rlinks_rllib.training.dataset": "rlinks_rllib.dataset.torch_dataset",
    "rlinks_rllib.server.samples": "rlinks_rllib.dataset.server",
}


def _room(name: str) -> tuple[int, str]:
    found = [(len(prefix), rank, prefix) for rank, prefixes in enumerate(ROOMS) for prefix in prefixes
             if name == prefix or name.startswith(prefix + ".")]
    _, rank, prefix = max(found)
    return rank, prefix


def test_each_room_imports_only_itself_and_the_rooms_below_it():
    upward = []
    for name, imported in sorted(GRAPH.items()):
        if name in KEPT_PATHS:
            continue
        rank, room = _room(name)
        for other in sorted(imported):
            other_rank, other_room = _room(other)
            if other_room != room and other_rank >= rank:
                upward.append(f"{name} ({room}) imports {other} ({other_room})")
    assert not upward, "imports that run up or sideways:\n" + "\n".join(upward)


def _only_reexports(path: Path) -> bool:
    body = ast.parse(path.read_text()).body
    kinds = (ast.Import, ast.ImportFrom)
    rest = [node for node in body if not isinstance(node, kinds)
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
            and not (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"])]
    return not rest


def test_no_module_only_reexports_another_but_a_kept_path():
    reexports = sorted(name for name, path in MODULES.items()
                       if path.name != "__init__.py" and _only_reexports(path))
    assert reexports == sorted(KEPT_PATHS), "modules that only re-export another: " + ", ".join(reexports)


@pytest.mark.parametrize("old, new", sorted(KEPT_PATHS.items()))
def test_a_kept_path_gives_what_it_gave(old, new):
    import importlib

    kept, moved = importlib.import_module(old), importlib.import_module(new)
    assert kept.__all__ and all(getattr(kept, name) is getattr(moved, name) for name in kept.__all__)


def test_every_folder_is_a_room():
    folders = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    named = {prefix for prefixes in ROOMS for prefix in prefixes}
    assert folders <= named, f"folders without a room in ROOMS: {sorted(folders - named)}"


def test_the_package_root_gives_every_name_it_lists():
    import rlinks_rllib

    missing = [name for name in rlinks_rllib.__all__ if getattr(rlinks_rllib, name, None) is None]
    assert not missing, f"rlinks_rllib.__all__ names what its __getattr__ can't import: {missing}"
