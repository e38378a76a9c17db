"""`--overlap`: per rank and step, GPU time in compute, in communication and in both; per rank
and collective kind, the exposed communication (docs/prof.md, "Overlap"). The records of every
rank go through one comms.Comms."""
from __future__ import annotations

import argparse
import json
import sys
from types import ModuleType
from typing import TextIO

from ..comms import Comms
from ..output import columnated_writer, csv_cell, csv_writer
from ..overlap import rank_text
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


def write_text(rep: dict, out: TextIO, width: int = 120) -> None:
    """The steps table, then the collectives table."""
    out.write(f"NCCL kernels   {rep['nccl_kernels']}, {duration(rep['nccl_ns'])}; "
              f"{pct(rep['identified_pct'])}% of that time attributed to a collective\n\n")
    w = columnated_writer(out, ["Rank", "Step", "Span", "Compute", "Comm", "Both", "Exposed", "%Hidden"],
                          [6, 5, 10, 10, 10, 10, 10, 8], width)
    for s in rep["steps"]:
        w([rank_text(s["rank"]), str(s["step"]), duration(s["span_ns"]), duration(s["compute_ns"]),
           duration(s["comm_ns"]), duration(s["both_ns"]), duration(s["exposed_ns"]), pct(s["hidden_pct"])])
    out.write("\n")
    w = columnated_writer(out, ["Rank", "Collective", "Count", "Time", "Exposed", "%Exposed"],
                          [6, 14, 6, 10, 10, 9], width)
    for c in rep["collectives"]:
        w([rank_text(c["rank"]), c["kind"], str(c["count"]), duration(c["time_ns"]), duration(c["exposed_ns"]),
           pct(c["exposed_pct"])])


def write(comms: Comms, args: argparse.Namespace) -> None:
    """Text, --csv (one row per rank and step, STEP_KEYS) or --json."""
    rep = report(comms)
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.csv:
        w = csv_writer(sys.stdout, STEP_KEYS)
        for s in rep["steps"]:
            w([csv_cell(s[k]) for k in STEP_KEYS])
    else:
        write_text(rep, sys.stdout, args.width or 120)
