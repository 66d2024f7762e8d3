"""No module of karpy imports, directly or through others, a module that imports it back.

import-linter's contracts hold the floors between packages; inside a package two
modules can still import each other (the API model's readers and its CRD schemas
once did, ten files round), which makes the order modules load in matter and
hides which one is the foundation. The graph is read from the source: every
``import`` and ``from ... import`` at any depth, relative ones resolved,
``if TYPE_CHECKING:`` blocks included, since a circle there is one in the design.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from package import module` names a module; `from module import name` does not.
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in targets:
            # The nearest module of karpy the name lies in (a name inside a module counts as it).
            target = name
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                yield target


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(path): path for path in SRC.joinpath("karpy").rglob("*.py")}
    known = set(paths)
    return {
        module: set(_imported(ast.parse(path.read_text()), module, path.name == "__init__.py", known))
        for module, path in paths.items()
    }


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_finder_sees_a_circle() -> None:
    # Without this, an empty answer could mean a finder that sees nothing.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    # Two arrows known to exist, one absolute and one through a package's __init__.
    assert "karpy.api.nodepool" in graph["karpy.disruption.budgets"]
    assert "karpy.operator.cluster" in graph["karpy.controllers.disruption"]


def test_no_module_of_karpy_imports_itself_back() -> None:
    assert circles(import_graph()) == []
