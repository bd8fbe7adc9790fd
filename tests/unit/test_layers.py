"""The package layout holds: imports point down the loop, never up, never in a circle.

Each room of the code base has a rank; a module may import its own room and rooms of a
lower rank only, and no two modules (or rooms) import each other, however indirectly. The
import graph is read from the sources with `ast` (every import, also those inside
functions), so a lazy import cannot hide an upward arrow.
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from pathlib import Path

from mallory import paths

#: room -> rank (README "Layout"): commands on top, then the campaign, then what it drives,
#: then per-node capture and cluster backends, then the pure core.
RANKS = {
    "mallory": 0,  # the package itself: __version__
    "mallory.errors": 0,
    "mallory.paths": 0,
    "mallory.files": 0,
    "mallory.polling": 0,
    "mallory.log_lines": 0,
    "mallory.timeline": 1,
    "mallory.learner": 1,
    "mallory.history": 1,
    "mallory.oracles": 1,
    "mallory.pictures": 1,
    "mallory.scenario": 1,
    "mallory.instrument": 2,
    "mallory.observer": 2,
    "mallory.cluster": 2,
    "mallory.mediator": 3,
    "mallory.harness": 3,
    "mallory.pyinstrument": 3,
    "nemesis": 3,
    "mallory.suts": 4,
    "mallory.campaign": 5,
    "mallory.shrink": 6,
    "mallory.report": 6,
    "mallory.commands": 7,
    "mallory.cli": 7,
}
#: the pure core: no sockets, processes or native calls
PURE = ("mallory.timeline", "mallory.learner", "mallory.history", "mallory.oracles", "mallory.pictures",
        "mallory.scenario")
IO_MODULES = {"socket", "subprocess", "multiprocessing", "http", "urllib", "ctypes", "select", "asyncio"}


def _modules() -> dict[str, Path]:
    out = {}
    for package in ("mallory", "nemesis"):
        for path in (paths.HOME / package).rglob("*.py"):
            parts = path.relative_to(paths.HOME).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def room(module: str) -> str:
    matches = [r for r in RANKS if module == r or module.startswith(r + ".")]
    assert matches, f"{module} is in no room of RANKS: add its package there (and to the README's Layout)"
    return max(matches, key=len)


def imports(module: str) -> set[str]:
    """Every module this one imports (first-party: modules, or the package they name)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] in ("mallory", "nemesis")}
    return found


def all_stdlib_imports(module: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_imports_a_room_above_its_own():
    upward = []
    for module in MODULES:
        for target in imports(module):
            if RANKS[room(target)] > RANKS[room(module)]:
                upward.append(f"{module} ({room(module)}) imports {target} ({room(target)})")
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_modules_or_rooms():
    module_edges = {m: {t for t in imports(m) if t in MODULES} for m in MODULES}
    assert _cycle(module_edges) is None, f"module cycle: {' -> '.join(_cycle(module_edges))}"
    room_edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in module_edges.items():
        room_edges[room(module)] |= {room(t) for t in targets if room(t) != room(module)}
    assert _cycle(room_edges) is None, f"room cycle: {' -> '.join(_cycle(room_edges))}"


def test_the_pure_core_does_no_io():
    for module in MODULES:
        if room(module) in PURE:
            assert not all_stdlib_imports(module) & IO_MODULES, f"{module} imports {all_stdlib_imports(module) & IO_MODULES}"


def test_the_checker_sees_a_violation():
    """The rules above can fail: an upward arrow and a circle are found."""
    assert RANKS[room("mallory.campaign.loop")] > RANKS[room("mallory.mediator.api")]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_only_paths_knows_where_shipped_files_live():
    found = subprocess.run(["git", "grep", "-n", "parents\\[", "--", "mallory", "nemesis"], cwd=paths.HOME,
                           capture_output=True, text=True).stdout.splitlines()
    assert all(line.startswith("mallory/paths.py:") for line in found), found
