"""`--stragglers`: each collective instance across the ranks that ran it: arrivals, waits, the
slowest rank, the skew, the transfer and its bus bandwidth; then per rank its waits (docs/prof.md,
"Stragglers"). The records of every rank go through one comms.Comms."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import TextIO

from ..comms.passes import Comms
from ..io.output import TextColumn, write_json, columnated_writer, csv_cell, csv_writer, text_width
from ..comms.shares import rank_text
from ..units import duration, rate, si
from ...text import count

FLAG = "--stragglers"
ORDER = 5
JSON = True
CSV_KEYS = ["group", "kind", "index", "dtype", "size", "ranks", "first_ns", "last_ns", "skew_ns", "slowest",
            "transfer_ns", "busbw"]


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--stragglers (its --top is --summary's)."""
    group.add_argument("--stragglers", action="store_true",
                       help="per collective instance: each rank's arrival and wait, the slowest rank, the skew, "
                            "the transfer's bus bandwidth (largest skew first; --top N of them)")


def wanted(args: argparse.Namespace) -> bool:
    """--stragglers given."""
    return args.stragglers


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """Nothing of its own: --top is checked by --summary."""


def sink(args: argparse.Namespace) -> Comms:
    """The one-pass accumulator."""
    return Comms()


def report(comms: Comms) -> dict:
    """What --stragglers shows, as one JSON-able object: every instance, in time order, and per rank."""
    rep = comms.report()
    return {"instances": rep["instances"], "by_rank": rep["by_rank"]}


# A narrow line leaves out Ranks, then Group, then Transfer (80 characters keep the rest).
INSTANCE_COLUMNS = [TextColumn("Group", 8, priority=2), TextColumn("Collective", 14), TextColumn("#", 6),
                    TextColumn("Size", 10), TextColumn("Ranks", 6, priority=1), TextColumn("Skew", 10),
                    TextColumn("Slowest", 8), TextColumn("Transfer", 10, priority=3), TextColumn("BusBW", 9)]
RANK_COLUMNS = [TextColumn(h, w) for h, w in [("Rank", 6), ("Instances", 10), ("Slowest", 8), ("Wait", 10),
                                                ("MaxWait", 10)]]


def write_text(rep: dict, out: TextIO, width: int | None = None, top: int | None = None) -> None:
    """The instances by skew, largest first (`top` of them), then the ranks."""
    rows = sorted(rep["instances"], key=lambda r: (-r["skew_ns"], r["first_ns"]))
    shown = rows[:top] if top else rows
    w = columnated_writer(out, INSTANCE_COLUMNS, text_width(width, INSTANCE_COLUMNS))
    for r in shown:
        w([r["group"], r["kind"], str(r["index"]), si(r["size"], "B"), str(r["ranks"]), duration(r["skew_ns"]),
           rank_text(r["slowest"]), duration(r["transfer_ns"]), rate(r["busbw"], 2)])
    if len(rows) > len(shown):
        out.write(f"... {len(rows) - len(shown)} more instances\n")
    out.write("\n")
    w = columnated_writer(out, RANK_COLUMNS, text_width(width, RANK_COLUMNS))
    for r in rep["by_rank"]:
        w([r["rank"], str(r["instances"]), str(r["slowest"]), duration(r["wait_ns"]), duration(r["max_wait_ns"])])


def empty_because(comms: Comms, rep: dict) -> str | None:
    """Why the instances compare no ranks (one rank's records, or no collective); None when they do."""
    n = len(comms.ranks)
    if n < 2:
        return (f"the records hold one rank ({comms.nccl} NCCL kernels): nothing to compare; parse the exports of "
                "every rank together (python -m pyprof.parse trace_*.sqlite -o job.dict)")
    if not rep["instances"]:
        return f"no NCCL collective kernels in the records of {n} ranks"
    return None


def write(comms: Comms, args: argparse.Namespace) -> None:
    """Text, --csv (one row per instance in time order, CSV_KEYS) or --json."""
    rep = report(comms)
    why = empty_because(comms, rep)
    if why:  # a table of nothing, or of one rank against itself, would not say why
        print(f"pyprof.prof: warning: --stragglers: {why}", file=sys.stderr)
    for unsized, n in sorted(comms.unsized.items()):
        print(f"pyprof.prof: warning: --stragglers: {count(n, 'NCCL kernel')}: {unsized}", file=sys.stderr)
    if args.json:
        write_json(rep, sys.stdout)
    elif args.csv:
        w = csv_writer(sys.stdout, CSV_KEYS)
        for r in rep["instances"]:
            w([csv_cell(r[k]) for k in CSV_KEYS])
    else:
        write_text(rep, sys.stdout, args.width, args.top)
