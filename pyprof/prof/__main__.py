"""`python -m pyprof.prof [-c COLUMNS] [-w WIDTH | --csv] [--strict] [net.dict]`: one row per kernel
(views/table.py); `--summary`, `--plot`, `--diff` and any other view in views/: where the time goes."""
from __future__ import annotations

import argparse
from typing import NoReturn, Sequence

from ..cli import Parser
from ..errors import (EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_CORRUPT, EXIT_INCOMPLETE, EXIT_INTERRUPTED,
                      EXIT_NO_INPUT, EXIT_NO_KERNELS, EXIT_TOOL, EXIT_USAGE, PyprofError, run_cli)
from . import views
from .columns import help_table
from .views import table

_EPILOG = f"""\
exit status (one line on stderr for each failure; docs/prof.md):
  0    done (warnings, if any, summarised on stderr)
  {EXIT_USAGE}    bad command line: unknown option or column, -w narrower than the columns need, an
       option given to a view it does not apply to (--top without --summary), a bad --kernel REGEX
  {EXIT_NO_INPUT}    input missing or unreadable
  {EXIT_BAD_FORMAT}    neither a record file nor an nsys export (an export on stdin: give its path)
  {EXIT_NO_KERNELS}, {EXIT_CORRUPT}, {EXIT_TOOL} an nsys export given as input: as pyprof.parse (no kernels; corrupted; .nsys-rep without nsys)
  {EXIT_TOOL}    --plot without matplotlib, --parquet without pyarrow, or their file cannot be written
  {EXIT_BAD_LINE}    malformed line under --strict
  {EXIT_INCOMPLETE}    the input ends where pyprof.parse failed (rows before it were printed)
  {EXIT_INTERRUPTED}  interrupted"""


def parser() -> argparse.ArgumentParser:
    """The command line; -h lists every column with its meaning and unit."""
    p = Parser(
        "pyprof.prof",
        description="One row per GPU kernel from `python -m pyprof.parse` output (or an nsys export, "
                    "parsed on the fly): attribution, FLOPs, bytes, Tensor Core use and distance from the GPU's "
                    "peaks; or a view of where the time goes (--summary, --plot, --diff, --modules). On a "
                    "terminal tables fit its width; into a pipe the per-kernel rows are space separated for "
                    "awk and sort, and a view's names are not cut.",
        epilog=help_table() + "\n\n" + _EPILOG)
    p.add_argument("file", nargs="?", default="-", help="record file (JSON Lines), or an nsys export (.sqlite, "
                                                        ".nsys-rep: parsed on the fly); stdin when absent or -")
    table.add_arguments(p)
    form = p.add_mutually_exclusive_group()
    form.add_argument("-w", "--width", type=int, metavar="WIDTH",
                      help="columnated output, WIDTH characters wide (default: the terminal's width on a "
                           "terminal; into a pipe or a file: space separated, a view's table as wide as its longest "
                           "name)")
    form.add_argument("--csv", action="store_true", help="CSV output (quoted by the csv module; keys as headers, "
                                                         "na and - empty)")
    form.add_argument("--json", action="store_true",
                      help="JSON: one object per kernel per line (typed, keyed by column name; null for na "
                           f"and -); one object for {', '.join(v.FLAG for v in views.VIEWS if v.JSON)}")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed line (exit status 7)")
    views.add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = parser().parse_args(argv)
    if args.width is not None and args.width < 1:
        raise PyprofError("-w needs a positive width", EXIT_USAGE)
    chosen = views.chosen(args)
    if args.json and not any(v.JSON for v in chosen):
        raise PyprofError(f"--json does not apply to {views.either(chosen)} (it does to the per-kernel table, "
                          f"{views.either(v for v in views.VIEWS if v.JSON)})", EXIT_USAGE)
    writers = [v for v in chosen if v.JSON]
    if (args.json or args.csv) and len(writers) > 1:
        raise PyprofError(f"{'--json' if args.json else '--csv'} writes one view at a time, not "
                          f"{' and '.join(v.FLAG for v in writers)}", EXIT_USAGE)
    return views.run(args, chosen)


def cli() -> NoReturn:
    """The `pyprof-prof` console script."""
    run_cli("pyprof.prof", main)


if __name__ == "__main__":
    cli()
