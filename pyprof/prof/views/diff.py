"""`--diff BASE NEW`: per group, GPU time before and after, sorted by absolute change, with
totals: "what got slower after my change". Only kernel records count (as in --summary); a group
present on one side only has ratio na. Memory: O(groups) per side.
"""
from __future__ import annotations

import argparse
import csv
import sys
from types import ModuleType
from typing import Iterable, TextIO

from ...errors import EXIT_NO_KERNELS, EXIT_USAGE, PyprofError
from ...progress import on_terminal
from ..pricing.analysis import Facts
from ..groups import Groups
from ..io.output import TextColumn, write_json, check_width, columnated_writer, csv_cell, text_width
from .. import filters
from ..io.reader import numbered
from ..scan import feed, time_field
from ..units import duration, group_column, group_label
from ..warnings_tally import Tally

FLAG = "--diff"
ORDER = 3
JSON = True
# Grouping by a column that needs no analysis skips it (JSON decoding speed); these need it.
_NEEDS_FACTS = frozenset(("tc", "level", "call"))


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--diff BASE NEW (grouped by --summary's --by, cut by its --top)."""
    group.add_argument("--diff", nargs=2, metavar=("BASE", "NEW"),
                       help="group time before and after, sorted by absolute change (grouped by --by, cut by "
                            "--top)")


def wanted(args: argparse.Namespace) -> bool:
    """--diff given."""
    return bool(args.diff)


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """--diff reads its own two files and runs alone."""
    if not wanted(args):
        return
    if len(chosen) > 1 or args.file != "-":
        raise PyprofError("--diff takes its two files itself; no other input or view", EXIT_USAGE)
    if args.diff == ["-", "-"]:
        raise PyprofError("--diff: at most one side can be stdin", EXIT_USAGE)
    if args.width is not None:
        check_width([group_column("op")] + TEXT_COLUMNS, args.width)


class Totals(Groups):
    """Kernel time and count per group of one record file: a scan.Sink."""

    def __init__(self, by: str) -> None:
        super().__init__(by)
        self.needs_facts = not _NEEDS_FACTS.isdisjoint(self.keys)

    def add(self, rec: dict, f: Facts) -> None:
        """Count one record (memcpy/memset records do not count)."""
        if rec.get("kind", "kernel") == "kernel":
            super().add(rec, f, time_field(rec, "kDuration"))


def totals(numbered: Iterable[tuple[int, dict]], by: str, tally: Tally, strict: bool = False,
           keep: filters.Keep | None = None) -> Groups:
    """Kernel time and count per group of one record file's (line number, record) pairs (those
    `keep` accepts, when given)."""
    groups = Totals(by)
    feed(numbered, tally, [groups if keep is None else filters.Filtered(groups, keep)], strict,
         on_terminal("pyprof.prof", True))
    return groups


def _ratio(new: int | None, base: int | None) -> float | None:
    return new / base if new is not None and base else None


def compare(base: Groups, new: Groups) -> dict:
    """The diff as one JSON-able object: rows sorted by |delta| (then name), and totals."""
    rows = []
    for key in set(base.groups) | set(new.groups):
        b, n = base.groups.get(key), new.groups.get(key)
        bt, nt = (b.time if b else None), (n.time if n else None)
        rows.append({"group": (b or n).name, **dict(zip(base.keys, (b or n).keys)), "base_ns": bt, "new_ns": nt, "delta_ns": (nt or 0) - (bt or 0),
                     "ratio": _ratio(nt, bt), "base_count": b.count if b else 0, "new_count": n.count if n else 0})
    rows.sort(key=lambda r: (-abs(r["delta_ns"]), r["group"]))
    bt = sum(g.time for g in base.groups.values())
    nt = sum(g.time for g in new.groups.values())
    total = {"base_ns": bt, "new_ns": nt, "delta_ns": nt - bt, "ratio": _ratio(nt, bt),
             "base_count": sum(g.count for g in base.groups.values()),
             "new_count": sum(g.count for g in new.groups.values())}
    return {"by": base.by, "rows": rows, "total": total}


KEYS = ["group", "base_ns", "new_ns", "delta_ns", "ratio", "base_count", "new_count"]
# After the group's name; a narrow line leaves out Count, then Ratio.
TEXT_COLUMNS = [TextColumn("Base", 10), TextColumn("New", 10), TextColumn("Delta", 11),
                TextColumn("Ratio", 7, priority=2), TextColumn("Count", 9, priority=1)]


def _ratio_text(r: float | None) -> str:
    return "na" if r is None else f"{r:.2f}x"


def _time(ns: int | None) -> str:
    return "-" if ns is None else duration(ns)  # "-": the group is absent on that side


def write_text(d: dict, out: TextIO, width: int | None = None, top: int | None = None) -> None:
    """Columnated rows, then the totals line; names cut to fit `width` (-w; None: the
    terminal's, or uncut into a pipe: output.text_width)."""
    rows = d["rows"][:top] if top else d["rows"]
    keys = d["by"].split(",")
    labelled = [(group_label(r, keys), r) for r in rows] + [("(total)", d["total"])]
    cols = [group_column(d["by"])] + TEXT_COLUMNS
    labels = [label for label, _ in labelled]
    write = columnated_writer(out, cols, text_width(width, cols, labels), labels)
    for label, r in labelled:
        delta = ("+" if r["delta_ns"] > 0 else "") + duration(r["delta_ns"])
        write([label, _time(r["base_ns"]), _time(r["new_ns"]), delta,
               _ratio_text(r["ratio"]), f"{r['base_count']}>{r['new_count']}"])


def write_csv(d: dict, out: TextIO, top: int | None = None) -> None:
    """One column per --by key, then the numbers; rows then a `(total)` row (in the first key's
    column); empty for unknown."""
    keys = d["by"].split(",")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(keys + KEYS[1:])
    rows = d["rows"][:top] if top else d["rows"]
    for r in rows + [dict(d["total"], **{keys[0]: "(total)"})]:
        w.writerow([csv_cell(r.get(k)) for k in keys + KEYS[1:]])


def main(args: argparse.Namespace) -> int:
    """`--diff BASE NEW` from parsed command-line `args`."""
    sides: list[Groups] = []
    keep = filters.build(args)
    for path in args.diff:
        tally = Tally()
        sides.append(totals(numbered(path, tally, args.strict, args.memcpy), args.by, tally, args.strict, keep))
        if tally.bad_lines or tally.warnings:
            print(f"pyprof.prof: {path}:", file=sys.stderr)
            tally.report()
        if not sides[-1].groups:  # a table in which everything vanished would hide the mistake
            raise PyprofError(f"--diff: {'stdin' if path == '-' else path} holds no kernel records"
                              + (" that the filters keep" if keep else ""), EXIT_NO_KERNELS)
    d = compare(*sides)
    if args.json:
        write_json(d if not args.top else dict(d, rows=d["rows"][:args.top]), sys.stdout)
    elif args.csv:
        write_csv(d, sys.stdout, args.top)
    else:
        write_text(d, sys.stdout, args.width, args.top)
    return 0
