"""No function of pyprof is longer than 120 lines (issue 29): a function that long mixes jobs
(parse's sweep once did range intake, attribution, window bookkeeping and record text in 414)."""
from __future__ import annotations

import ast
from pathlib import Path

import pyprof

PACKAGE = Path(pyprof.__file__).parent
MOST_LINES = 120


def function_lines(source: str) -> dict[str, int]:
    """Qualified name -> lines from `def` (decorators not counted) to the last line of the body,
    for every function and method, nested ones too (they count again inside their outer one)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found[name] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_the_reader_counts_methods_and_nested_functions() -> None:
    source = "class A:\n    def f(self):\n        def g():\n            pass\n        return g\n"
    assert function_lines(source) == {"A.f": 4, "A.f.g": 2}


def test_no_function_is_longer_than_120_lines() -> None:
    sizes = {f"{path.relative_to(PACKAGE.parent)}:{name}": n for path in sorted(PACKAGE.rglob("*.py"))
             for name, n in function_lines(path.read_text(encoding="utf-8")).items()}
    assert len(sizes) > 500  # every module was read
    assert {name: n for name, n in sizes.items() if n > MOST_LINES} == {}
