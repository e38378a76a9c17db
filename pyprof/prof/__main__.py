"""`python -m pyprof.prof [-c COLUMNS] [-w WIDTH | --csv] [--strict] [net.dict]`: one row per kernel
(views/table.py); `--summary`, `--plot`, `--diff` and any other view in views/: where the time goes."""
from __future__ import annotations

import argparse
import contextlib
import sys
from typing import NoReturn, Sequence

from ..cli import Parser, exit_statuses
from ..errors import (EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_CORRUPT, EXIT_INCOMPLETE, EXIT_INTERRUPTED,
                      EXIT_NO_INPUT, EXIT_NO_KERNELS, EXIT_OUTPUT, EXIT_TOOL, EXIT_USAGE, PyprofError,
                      refuse_output_onto_input, run_cli)
from ..parse.output import open_output
from . import views
from .columns import help_table
from .pricing.extend import load_costs
from .views import table

MAX_WIDTH = 100000  # a row wider than any screen; beyond it padding alone would fill memory

STATUSES = {
    0: "done (warnings, if any, summarised on stderr in one block)",
    EXIT_USAGE: f"bad command line: a --costs file missing or failing to import, no input with stdin a terminal, unknown option or column, -w outside 1..{MAX_WIDTH} or narrower than the "
                "columns need, an option given to a view it does not apply to (--top without --summary), a bad "
                "--kernel REGEX, an output (-o, --plot, --parquet, --html, --trace) that names an input",
    EXIT_NO_INPUT: "input missing or unreadable (stdin too, when it is closed)",
    EXIT_BAD_FORMAT: "neither pyprof records nor an nsys export: no line of the input is a record (a text file, "
                     "a compressed file), a .sqlite that is not an export, an export or Parquet on stdin (give its "
                     "path), Parquet that is no record store (prof --parquet's table)",
    EXIT_NO_KERNELS: "no kernels: an input of --diff holds no kernel records, or an nsys export has no CUDA trace",
    EXIT_CORRUPT: "an nsys export or a Parquet record store given as input is truncated or corrupted",
    EXIT_BAD_LINE: "malformed line under --strict",
    EXIT_TOOL: "a program or library the run needs is missing: nsys for a .nsys-rep, matplotlib for --plot, "
               "pyarrow for --parquet and a Parquet record store, plotly for --html",
    EXIT_INCOMPLETE: "the input ends where pyprof.parse failed (rows before it were printed)",
    EXIT_OUTPUT: "the output cannot be written: stdout (full, or closed), -o FILE, the --plot image, the --parquet "
                 "file, the --html page, the --trace file (a missing folder, a directory, a full disk)",
    EXIT_INTERRUPTED: "interrupted",
}


def parser() -> argparse.ArgumentParser:
    """The command line; -h lists every column with its meaning and unit."""
    p = Parser(
        "pyprof.prof",
        description="One row per GPU kernel from `python -m pyprof.parse` output (or an nsys export, "
                    "parsed on the fly): attribution, FLOPs, bytes, Tensor Core use and distance from the GPU's "
                    "peaks; or a view of where the time goes (--summary, --plot, --diff, --modules, --html, "
                    "--trace). On a terminal (or -w) tables fit its width: default columns that do not fit are "
                    "left out (said on stderr), long names cut in the middle; into a pipe the per-kernel rows are "
                    "space separated for awk and sort, and a view's names are not cut.",
        epilog=help_table() + "\n\n" + exit_statuses("pyprof.prof", STATUSES))
    p.add_argument("file", nargs="?", help="record file (JSON Lines), a Parquet record store (pyprof.parse -o "
                                            "X.parquet; needs pyarrow), or an nsys export (.sqlite, .nsys-rep: "
                                            "parsed on the fly); stdin when absent or - (absent with stdin a "
                                            "terminal: the usage, status 2)")
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
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the table or view to FILE instead of stdout (created only when complete)")
    p.add_argument("--strict", action="store_true", help="stop at the first malformed line (exit status 7)")
    p.add_argument("--costs", action="append", default=[], metavar="FILE",
                   help="a Python file of your own that prices your or a library's ops with "
                        "pyprof.register_cost (docs/prof.md, \"Pricing your own ops\"); repeatable")
    p.add_argument("--memcpy", action="store_true", help="an nsys export given as input: add its memcpy/memset "
                                                         "records, as pyprof.parse --memcpy (a record file holds "
                                                         "what parse wrote)")
    views.add_arguments(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    p = parser()
    args = p.parse_args(argv)
    if args.file is None:
        if not args.diff and _on_terminal(sys.stdin):  # reading a keyboard would look like a hang
            p.print_usage(sys.stderr)
            raise PyprofError("no input: give a record file or an nsys export, or pipe records in "
                              "(python -m pyprof.parse net.sqlite | python -m pyprof.prof); -h for the manual",
                              EXIT_USAGE)
        args.file = "-"
    if args.width is not None and not 1 <= args.width <= MAX_WIDTH:
        raise PyprofError(f"-w needs a width from 1 to {MAX_WIDTH}", EXIT_USAGE)
    chosen = views.chosen(args)
    if args.json and not any(v.JSON for v in chosen):
        raise PyprofError(f"--json does not apply to {views.either(chosen)} (it does to the per-kernel table, "
                          f"{views.either(v for v in views.VIEWS if v.JSON)})", EXIT_USAGE)
    writers = [v for v in chosen if v.JSON]
    if (args.json or args.csv) and len(writers) > 1:
        raise PyprofError(f"{'--json' if args.json else '--csv'} writes one view at a time, not "
                          f"{' and '.join(v.FLAG for v in writers)}", EXIT_USAGE)
    refuse_inputs_as_outputs(args)
    for path in args.costs:
        load_costs(path)
    with open_output(args.output) as out, contextlib.redirect_stdout(out):
        return views.run(args, chosen)


def refuse_inputs_as_outputs(args: argparse.Namespace) -> None:
    """PyprofError (EXIT_USAGE) when -o, --plot, --parquet, --html or --trace names an input, a
    --costs file or the --compare base included (through a link too): the run would replace a file
    it reads."""
    inputs = (args.diff or [args.file]) + args.costs + ([args.compare] if args.compare else [])
    for flag, output in (("-o", args.output), ("--plot", args.plot), ("--parquet", args.parquet),
                         ("--html", args.html), ("--trace", args.trace)):
        if output:
            refuse_output_onto_input(output, inputs, flag)


def _on_terminal(stream: object) -> bool:
    """Whether `stream` (stdin) is a terminal; False when it is closed or absent."""
    try:
        return bool(stream and stream.isatty())
    except (AttributeError, ValueError):
        return False


def cli() -> NoReturn:
    """The `pyprof-prof` console script."""
    run_cli("pyprof.prof", main)


if __name__ == "__main__":
    cli()
