"""`--longest N`: the N longest kernels, longest first, each with its op, direction, module and
input shapes: the single launches to look at first. O(N) memory (a heap); the records need no
analysis. Ties keep the earlier kernel."""
from __future__ import annotations

import argparse
import csv
import heapq
import sys
from types import ModuleType
from typing import TextIO

from ...errors import EXIT_USAGE, PyprofError
from ..columns import kernel_name
from ..groups import input_shapes
from ..io.output import TextColumn, check_width, columnated_writer, csv_cell, text_width, write_json
from ..pricing.analysis import Facts
from ..scan import time_field
from ..units import duration

FLAG = "--longest"
ORDER = 4
JSON = True
KEYS = ["rank", "duration_ns", "dir", "op", "module", "shape", "kernel"]
TEXT_COLUMNS = [TextColumn("Kernel", 40, True, middle=True, floor=16), TextColumn("Time", 9),
                TextColumn("Dir", 5, priority=2), TextColumn("Op", 16, priority=1),
                TextColumn("Module", 20, priority=3, middle=True)]


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--longest N."""
    group.add_argument("--longest", type=int, metavar="N",
                       help="the N longest kernels, longest first, with op, direction and module (input shapes too in "
                            "--csv and --json)")


def wanted(args: argparse.Namespace) -> bool:
    """--longest given."""
    return args.longest is not None


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """N is a positive count; -w holds the table."""
    if wanted(args) and args.longest < 1:
        raise PyprofError("--longest needs a positive number", EXIT_USAGE)
    if wanted(args) and args.width is not None:
        check_width(TEXT_COLUMNS, args.width)


class Longest:
    """The N longest kernel records seen so far: a scan.Sink."""

    needs_facts = False

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.heap: list[tuple[int, int, dict]] = []  # (duration, -order, row): the shortest, then the latest, on top

    def add(self, rec: dict, f: Facts) -> None:
        """Keep one kernel record if it is among the N longest (memcpy/memset records do not count)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        dur = time_field(rec, "kDuration")  # a malformed one is skipped and counted, as in every view
        self.seen += 1
        item = (dur, -self.seen, rec)
        if len(self.heap) < self.n:
            heapq.heappush(self.heap, item)
        elif item[:2] > self.heap[0][:2]:
            heapq.heapreplace(self.heap, item)

    def rows(self) -> list[dict]:
        """The kept kernels, longest first (ties: the earlier first), as KEYS."""
        kept = sorted(self.heap, key=lambda item: item[:2], reverse=True)
        return [{"rank": i, "duration_ns": dur, "dir": rec.get("dir") or "-", "op": rec.get("op") or "-",
                 "module": rec.get("module") or "-", "shape": input_shapes(rec), "kernel": kernel_name(rec)}
                for i, (dur, _, rec) in enumerate(kept, 1)]


def sink(args: argparse.Namespace) -> Longest:
    """An empty heap for --longest N."""
    return Longest(args.longest)


def report(longest: Longest) -> dict:
    """What --longest shows, as one JSON-able object: {"rows": Longest.rows()}."""
    return {"rows": longest.rows()}


def write_text(rows: list[dict], out: TextIO, width: int | None = None) -> None:
    """One line per kernel; kernel names cut to fit `width` (-w; None: the terminal's, or uncut
    into a pipe), modules to their column."""
    names = [r["kernel"] for r in rows]
    write = columnated_writer(out, TEXT_COLUMNS, text_width(width, TEXT_COLUMNS, names), names)
    for name, r in zip(names, rows):
        write([name, duration(r["duration_ns"]), r["dir"], r["op"], r["module"]])


def write(longest: Longest, args: argparse.Namespace) -> None:
    """The kernels as text, --csv (KEYS) or --json (report())."""
    rep = report(longest)
    if args.json:
        write_json(rep, sys.stdout)
    elif args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(KEYS)
        for r in rep["rows"]:
            w.writerow([csv_cell(r[k]) for k in KEYS])
    else:
        write_text(rep["rows"], sys.stdout, args.width)
