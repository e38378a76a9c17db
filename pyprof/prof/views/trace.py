"""`--trace out.json.gz`: the records as a timeline for Perfetto (ui.perfetto.dev) and
chrome://tracing, written while they are read (report/trace.py says what is in it)."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType

from ...errors import EXIT_USAGE, PyprofError
from ...text import count
from ..report.trace import TraceWriter, remove_stale_parts

FLAG = "--trace"
ORDER = 7
JSON = False


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """--trace FILE."""
    group.add_argument("--trace", metavar="FILE",
                       help="write the timeline in the Trace Event format for ui.perfetto.dev and chrome://tracing "
                            "(gzip-compressed when FILE ends in .gz): kernels per device and stream, launch calls "
                            "per CPU thread, flows launch->kernel and forward->backward, achieved TFLOP/s and GB/s; "
                            "one process per rank; split into FILE, FILE.2, ... beyond 2M events")


def wanted(args: argparse.Namespace) -> bool:
    """--trace given."""
    return bool(args.trace)


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """The trace is a file of its own: not on stdout."""
    if wanted(args) and args.trace == "-":
        raise PyprofError("--trace needs a file name (the trace may be split into several files)", EXIT_USAGE)


def sink(args: argparse.Namespace) -> TraceWriter:
    """A writer of the trace file."""
    return TraceWriter(args.trace)


def write(writer: TraceWriter, args: argparse.Namespace) -> None:
    """Finish the file; say where it went on stderr."""
    paths = writer.close()
    remove_stale_parts(args.trace, len(paths))
    print(f"pyprof.prof: trace written to {', '.join(paths)} ({count(len(paths), 'file')}; open in "
          f"ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
