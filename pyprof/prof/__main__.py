"""`python -m pyprof.prof [-c COLUMNS] [-w WIDTH | --csv] [--strict] [net.dict]`: one row per kernel;
`--summary` (views.py), `--plot` (roofline.py) and `--diff` (diff.py): where the time goes."""
from __future__ import annotations

import argparse
import sys
from typing import BinaryIO, List, NoReturn, Optional, Sequence, TextIO

from ..cli import Parser
from ..errors import (EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INCOMPLETE, EXIT_INTERRUPTED, EXIT_NO_INPUT,
                      EXIT_USAGE, PyprofError, run_cli)
from ..progress import on_terminal
from .columns import DEFAULT, Column, help_table, select
from .groups import KEYS, SORTS
from .output import columnated_writer, csv_writer, space_writer
from .reader import open_input
from .scan import analysed
from .summary import Summary

_EPILOG = (f"exit status: 0 done (warnings, if any, summarised on stderr); {EXIT_USAGE} bad command line;\n"
           f"{EXIT_NO_INPUT} input missing or unreadable; {EXIT_BAD_FORMAT} not a record file (e.g. an nsys "
           f"SQLite export);\n{EXIT_BAD_LINE} malformed line under --strict; {EXIT_INCOMPLETE} the input ends where "
           f"pyprof.parse failed (rows before it were printed); {EXIT_INTERRUPTED} interrupted.")

DIFF_KEYS = ("op", "kernel", "layer", "module", "dir", "tc", "stream")


def parser() -> argparse.ArgumentParser:
    """The command line; -h lists every column with its meaning and unit."""
    p = Parser(
        "pyprof.prof",
        description="One row per GPU kernel from `python -m pyprof.parse` output: attribution, "
                    "FLOPs, bytes, Tensor Core use and distance from the GPU's peaks.",
        epilog=help_table() + "\n\n" + _EPILOG)
    p.add_argument("file", nargs="?", default="-", help="record file (JSON Lines); stdin when absent or -")
    p.add_argument("-c", "--columns", default=None, metavar="COLUMNS",
                   help=f"comma-separated column names (default {DEFAULT})")
    form = p.add_mutually_exclusive_group()
    form.add_argument("-w", "--width", type=int, metavar="WIDTH", help="columnated output, WIDTH characters wide")
    form.add_argument("--csv", action="store_true", help="CSV output (quoted by the csv module)")
    form.add_argument("--json", action="store_true", help="one JSON object (--summary, --diff only)")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed line (exit status 7)")
    views = p.add_argument_group("views (docs/prof.md: Where the time goes)")
    views.add_argument("--summary", action="store_true",
                       help="capture header (span, GPU busy %%, idle gaps, Tensor Core shares), one row per "
                            "group, and advice")
    views.add_argument("--by", choices=list(KEYS), default="op", help="group kernels by (default op)")
    views.add_argument("--top", type=int, metavar="N", help="only the first N groups")
    views.add_argument("--sort", choices=list(SORTS), default="time", help="row order (default time)")
    views.add_argument("--plot", metavar="PNG", help="write a roofline plot of every kernel (needs matplotlib)")
    views.add_argument("--diff", nargs=2, metavar=("BASE", "NEW"),
                       help="group time before and after, sorted by absolute change (--by op, kernel, layer, ...)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    if args.width is not None and args.width < 1:
        raise PyprofError("-w needs a positive width", EXIT_USAGE)
    if args.top is not None and args.top < 1:
        raise PyprofError("--top needs a positive number", EXIT_USAGE)
    view = args.summary or args.plot or args.diff
    if view and args.columns is not None:
        raise PyprofError("-c selects per-kernel columns; it does not apply to --summary, --plot or --diff",
                          EXIT_USAGE)
    if args.json and not (args.summary or args.diff):
        raise PyprofError("--json needs --summary or --diff", EXIT_USAGE)
    if args.diff:
        if args.summary or args.plot or args.file != "-":
            raise PyprofError("--diff takes its two files itself; no other input, --summary or --plot", EXIT_USAGE)
        from .diff import main as diff_main
        return diff_main(args)
    if view:
        from .views import main as views_main
        return views_main(args)
    try:
        cols = select(args.columns or DEFAULT)
    except KeyError as err:
        raise PyprofError(f"unknown column {err.args[0]!r} (-h lists them)", EXIT_USAGE) from None
    stream = open_input(args.file)
    summary = Summary()
    with stream:
        run(stream, sys.stdout, cols, summary, width=args.width, as_csv=args.csv, strict=args.strict)
    summary.report()
    return 0


def run(stream: BinaryIO, out: TextIO, cols: List[Column], summary: Summary, width: Optional[int] = None,
        as_csv: bool = False, strict: bool = False) -> None:
    """Stream records from `stream` to rows on `out`, one at a time."""
    headers = [c.header for c in cols]
    if as_csv:
        write = csv_writer(out, headers)
    elif width is not None:
        write = columnated_writer(out, headers, [c.width for c in cols], width)
    else:
        write = space_writer(out, headers)
    values = [c.value for c in cols]
    idx = [0]  # rows written so far: the idx column of the next row
    row = (lambda rec, facts: [v(rec, facts, idx[0]) for v in values])
    for _rec, _facts, cells in analysed(stream, summary, strict, any(c.needs_facts for c in cols), row,
                                        on_terminal("pyprof.prof", results_at_end=False)):
        write(cells)
        idx[0] += 1


def cli() -> NoReturn:
    """The `pyprof-prof` console script."""
    run_cli("pyprof.prof", main)


if __name__ == "__main__":
    cli()
