"""No import circle among planner.calibration's modules, counting the imports made inside functions (a lazy
import hides a circle from Python's loader, not from a reader): each module's dependencies point one way."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "planner" / "calibration"
PREFIX = "planner.calibration"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX:
                names |= {f"{PREFIX}.{a.name}" for a in node.names}
            elif node.module.startswith(PREFIX + "."):
                names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith(PREFIX + ".")}
    return names


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_planner_calibration_has_no_import_circle():
    graph = {f"{PREFIX}.{p.stem}": _imports(p) - {f"{PREFIX}.{p.stem}"} for p in PACKAGE.glob("*.py")}
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_check_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
