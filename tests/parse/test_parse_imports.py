"""parse's modules import one another one way: no circle, counting the imports made for type
checking only (a circle there still ties the modules' meanings together)."""
from __future__ import annotations

import ast
from pathlib import Path

import pyprof.parse

PACKAGE = Path(pyprof.parse.__file__).parent


def imports(package: Path, name: str) -> dict[str, set[str]]:
    """module -> the modules of the same package (`name`) it imports, anywhere in its source."""
    modules = {p.stem for p in package.glob("*.py")}
    graph = {}
    for module in sorted(modules):
        found = set()
        for node in ast.walk(ast.parse((package / f"{module}.py").read_text())):
            if isinstance(node, ast.ImportFrom):
                source = f"{name}.{node.module}" if node.level == 1 and node.module else \
                    name if node.level == 1 else node.module or ""
                if source == name:
                    found |= {a.name for a in node.names} & modules
                elif source.startswith(name + "."):
                    found.add(source[len(name) + 1:].split(".")[0])
            elif isinstance(node, ast.Import):
                found |= {a.name[len(name) + 1:].split(".")[0] for a in node.names if a.name.startswith(name + ".")}
        graph[module] = found - {module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_graph_reader_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_parse_has_no_import_circle() -> None:
    graph = imports(PACKAGE, "pyprof.parse")
    assert graph["window"] >= {"compiled_kernels", "spans"}  # the reader sees the imports
    assert circles(graph) == []
