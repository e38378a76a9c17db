"""`python -m pyprof.prof [-c COLUMNS] [-w WIDTH | --csv] [--strict] [net.dict]`: one row per kernel."""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..errors import (EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INTERRUPTED, EXIT_NO_INPUT, EXIT_USAGE, PyprofError,
                      run_cli)
from .analysis import Analyzer, Facts
from .columns import DEFAULT, help_table, select
from .output import columnated_writer, csv_writer, space_writer
from .reader import bad_record, records
from .summary import Summary

_EPILOG = (f"exit status: 0 done (warnings, if any, summarised on stderr); {EXIT_USAGE} bad command line;\n"
           f"{EXIT_NO_INPUT} input missing or unreadable; {EXIT_BAD_FORMAT} not a record file (e.g. an nsys "
           f"SQLite export);\n{EXIT_BAD_LINE} malformed line under --strict; {EXIT_INTERRUPTED} interrupted.")


_FIELD_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError)


def parser() -> argparse.ArgumentParser:
    """The command line; -h lists every column with its meaning and unit."""
    p = argparse.ArgumentParser(
        prog="python -m pyprof.prof", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One row per GPU kernel from `python -m pyprof.parse` output: attribution, "
                    "FLOPs, bytes, Tensor Core use and distance from the GPU's peaks.",
        epilog=help_table() + "\n\n" + _EPILOG)
    p.add_argument("file", nargs="?", default="-", help="record file (JSON Lines); stdin when absent or -")
    p.add_argument("-c", "--columns", default=DEFAULT, metavar="COLUMNS",
                   help=f"comma-separated column names (default {DEFAULT})")
    form = p.add_mutually_exclusive_group()
    form.add_argument("-w", "--width", type=int, metavar="WIDTH", help="columnated output, WIDTH characters wide")
    form.add_argument("--csv", action="store_true", help="CSV output (quoted by the csv module)")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed line (exit status 7)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    try:
        cols = select(args.columns)
    except KeyError as err:
        raise PyprofError(f"unknown column {err.args[0]!r} (-h lists them)", EXIT_USAGE) from None
    if args.width is not None and args.width < 1:
        raise PyprofError("-w needs a positive width", EXIT_USAGE)
    if args.file == "-":
        stream = sys.stdin.buffer
    else:
        try:
            stream = open(args.file, "rb")
        except OSError as err:
            raise PyprofError(f"cannot read {args.file}: {err.strerror}", EXIT_NO_INPUT) from None
    summary = Summary()
    with stream:
        run(stream, sys.stdout, cols, summary, width=args.width, as_csv=args.csv, strict=args.strict)
    summary.report()
    return 0


def run(stream, out, cols: list, summary: Summary, width: Optional[int] = None, as_csv: bool = False,
        strict: bool = False) -> None:
    """Stream records from `stream` to rows on `out`, one at a time."""
    headers = [c.header for c in cols]
    if as_csv:
        write = csv_writer(out, headers)
    elif width is not None:
        write = columnated_writer(out, headers, [c.width for c in cols], width)
    else:
        write = space_writer(out, headers)
    values = [c.value for c in cols]
    analyzer = Analyzer(summary) if any(c.needs_facts for c in cols) else None
    blank = Facts()
    idx = 0
    for lineno, rec in records(stream, summary, strict):
        try:
            facts = analyzer.facts(rec) if analyzer else blank
            row = [v(rec, facts, idx) for v in values]
        except _FIELD_ERRORS as err:  # valid JSON whose fields have the wrong types
            bad_record(summary, strict, lineno, f"record fields not understood ({type(err).__name__}: {err})")
            continue
        write(row)
        idx += 1


if __name__ == "__main__":
    run_cli("pyprof.prof", main)
