"""`--overlap`: per rank and step, GPU time in compute, in communication and in both; per rank
and collective kind, the exposed communication (docs/prof.md, "Overlap"). The records of every
rank go through one comms.Comms."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import TextIO

from ..comms.passes import Comms
from ..io.output import TextColumn, write_json, columnated_writer, csv_cell, csv_writer, text_width
from ..comms.shares import rank_text
from ..units import duration, pct

FLAG = "--overlap"
ORDER = 4
JSON = True
STEP_KEYS = ["rank", "step", "span_ns", "compute_ns", "comm_ns", "both_ns", "exposed_ns", "hidden_pct"]


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--overlap."""
    group.add_argument("--overlap", action="store_true",
                       help="per rank and step: compute, communication, both, exposed communication; exposed "
                            "time per collective kind (records of several ranks: parse several exports)")


def wanted(args: argparse.Namespace) -> bool:
    """--overlap given."""
    return args.overlap


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """Nothing to check: every option it reads has a valid default."""


def sink(args: argparse.Namespace) -> Comms:
    """The one-pass accumulator."""
    return Comms()


def report(comms: Comms) -> dict:
    """What --overlap shows, as one JSON-able object."""
    rep = comms.report()
    return {k: rep[k] for k in ("ranks", "nccl_kernels", "nccl_ns", "identified_pct", "steps", "collectives")}


STEP_COLUMNS = [TextColumn(h, w) for h, w in [("Rank", 6), ("Step", 5), ("Span", 10), ("Compute", 10),
                                                ("Comm", 10), ("Both", 10), ("Exposed", 10), ("%Hidden", 8)]]
COLL_COLUMNS = [TextColumn(h, w) for h, w in [("Rank", 6), ("Collective", 14), ("Count", 6), ("Time", 10),
                                                ("Exposed", 10), ("%Exposed", 9)]]


def write_text(rep: dict, out: TextIO, width: int | None = None) -> None:
    """The steps table, then the collectives table (each under 80 characters; `width`: -w)."""
    out.write(f"NCCL kernels   {rep['nccl_kernels']}, {duration(rep['nccl_ns'])}; "
              f"{pct(rep['identified_pct'])}% of that time attributed to a collective\n\n")
    w = columnated_writer(out, STEP_COLUMNS, text_width(width, STEP_COLUMNS))
    for s in rep["steps"]:
        w([rank_text(s["rank"]), str(s["step"]), duration(s["span_ns"]), duration(s["compute_ns"]),
           duration(s["comm_ns"]), duration(s["both_ns"]), duration(s["exposed_ns"]), pct(s["hidden_pct"])])
    out.write("\n")
    w = columnated_writer(out, COLL_COLUMNS, text_width(width, COLL_COLUMNS))
    for c in rep["collectives"]:
        w([rank_text(c["rank"]), c["kind"], str(c["count"]), duration(c["time_ns"]), duration(c["exposed_ns"]),
           pct(c["exposed_pct"])])


def write(comms: Comms, args: argparse.Namespace) -> None:
    """Text, --csv (one row per rank and step, STEP_KEYS) or --json."""
    rep = report(comms)
    if args.json:
        write_json(rep, sys.stdout)
    elif args.csv:
        w = csv_writer(sys.stdout, STEP_KEYS)
        for s in rep["steps"]:
            w([csv_cell(s[k]) for k in STEP_KEYS])
    else:
        write_text(rep, sys.stdout, args.width)
