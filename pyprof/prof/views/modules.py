"""`--modules`: the module tree. GPU time per nn.Module path (the record's `module`: the innermost
module being called; for a backward kernel, its forward op's), rolled up the path: a node's
self time is its own kernels', its total adds every module below it (`blocks` holds
`blocks.0.qkv`). The root model is named by its class and its children's paths are relative
to it (docs/markers.md): a single capitalised top-level path is taken for it and shown above
the others (Tree.root); kernels outside any module are `(no module)`. Memory: O(modules); the records need no analysis.
"""
from __future__ import annotations

import argparse
import csv
import sys
from types import ModuleType
from typing import TextIO

from ..pricing.analysis import Facts
from ..io.output import TextColumn, write_json, check_width, columnated_writer, csv_cell, text_width
from ..scan import time_field
from ..units import duration, pct

FLAG = "--modules"
ORDER = 4
JSON = True
NO_MODULE = "(no module)"
KEYS = ["module", "depth", "self_ns", "total_ns", "pct_total", "self_count", "count"]
TEXT_COLUMNS = [TextColumn("Module", 32, True, floor=24), TextColumn("Self", 9, priority=2),
                TextColumn("Total", 9), TextColumn("%Total", 6, priority=3), TextColumn("Kernels", 8, priority=1)]


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--modules."""
    group.add_argument("--modules", action="store_true",
                       help="module tree: self and total GPU time per nn.Module path (backward kernels count "
                            "for their forward op's module)")


def wanted(args: argparse.Namespace) -> bool:
    """--modules given."""
    return args.modules


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """-w holds the tree's table."""
    if wanted(args) and args.width is not None:
        check_width(TEXT_COLUMNS, args.width)


class Tree:
    """Kernel time and count per module path: a scan.Sink."""

    needs_facts = False

    def __init__(self) -> None:
        self.self_time: dict[str, int] = {}
        self.self_count: dict[str, int] = {}

    def add(self, rec: dict, f: Facts) -> None:
        """Count one kernel record (memcpy/memset records do not count)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        dur = time_field(rec, "kDuration")
        path = rec.get("module") or NO_MODULE
        self.self_time[path] = self.self_time.get(path, 0) + dur
        self.self_count[path] = self.self_count.get(path, 0) + 1

    def root(self) -> str | None:
        """The root model's path: the one top-level path named like a class (capitalised: the root
        is named by its class, its children by their attributes); None when there is no such
        path or several (a model and a loss module called at top level: whose children are
        which cannot be told)."""
        named = [p for p in self.self_time if "." not in p and p != NO_MODULE and p[:1].isupper()]
        return named[0] if len(named) == 1 else None

    def rows(self) -> list[dict]:
        """Every node, parents before children, siblings by total time (then name); the root
        model (root()) above the other modules."""
        total: dict[str, int] = {}
        count: dict[str, int] = {}
        children: dict[str, set] = {"": set()}
        root = self.root()
        for path, t in self.self_time.items():
            if path == NO_MODULE or path == root:
                nodes = [path]
            else:
                parts = path.split(".")
                nodes = ([root] if root else []) + [".".join(parts[:i + 1]) for i in range(len(parts))]
            parent = ""
            for node in nodes:
                total[node] = total.get(node, 0) + t
                count[node] = count.get(node, 0) + self.self_count[path]
                children.setdefault(parent, set()).add(node)
                children.setdefault(node, set())
                parent = node
        gpu_time = sum(self.self_time.values())
        out: list[dict] = []

        def visit(node: str, depth: int) -> None:
            out.append({"module": node, "depth": depth, "self_ns": self.self_time.get(node, 0),
                        "total_ns": total[node], "pct_total": total[node] / gpu_time * 100 if gpu_time else None,
                        "self_count": self.self_count.get(node, 0), "count": count[node]})
            for child in sorted(children[node], key=lambda n: (-total[n], n)):
                visit(child, depth + 1)

        for top in sorted(children[""], key=lambda n: (-total[n], n)):
            visit(top, 0)
        return out


def sink(args: argparse.Namespace) -> Tree:
    """An empty tree."""
    return Tree()


def write_text(rows: list[dict], out: TextIO, width: int | None = None) -> None:
    """The tree, indented two spaces a level, each node named by its last path component; names
    cut to fit `width` (-w; None: the terminal's, or uncut into a pipe: output.text_width)."""
    names = ["  " * r["depth"] + (r["module"] if r["module"] == NO_MODULE else r["module"].rsplit(".", 1)[-1])
             for r in rows]
    write = columnated_writer(out, TEXT_COLUMNS, text_width(width, TEXT_COLUMNS, names), names)
    for name, r in zip(names, rows):
        write([name, duration(r["self_ns"]), duration(r["total_ns"]), pct(r["pct_total"]),
               str(r["count"])])


def report(tree: Tree) -> dict:
    """What --modules shows, as one JSON-able object: {"rows": Tree.rows()}."""
    return {"rows": tree.rows()}


def write(tree: Tree, args: argparse.Namespace) -> None:
    """The tree as text, --csv (KEYS) or --json (report())."""
    rep = report(tree)
    rows = rep["rows"]
    if args.json:
        write_json(rep, sys.stdout)
    elif args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(KEYS)
        for r in rows:
            w.writerow([csv_cell(r[k]) for k in KEYS])
    else:
        write_text(rows, sys.stdout, args.width)
