"""python -m pyprof.parse: Nsight Systems SQLite export -> one JSON record per GPU kernel."""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Sequence

from pyprof.cli import Parser
from pyprof.errors import (EXIT_BAD_FORMAT, EXIT_CORRUPT, EXIT_INTERRUPTED, EXIT_NO_INPUT, EXIT_NO_KERNELS,
                           EXIT_TOOL, EXIT_USAGE, run_cli)
from pyprof.parse import parse
from pyprof.text import count

PROG = "pyprof.parse"

DESCRIPTION = """\
Turn an Nsight Systems SQLite export into one JSON record per GPU kernel (JSON Lines, in launch
order; the format is docs/records.md). Each kernel is joined to its launch call and to every NVTX
range open around that call on the launching thread: pyprof markers (pyprof.init()), PyTorch
emit_nvtx op ranges, user 'layer:NAME' ranges. Reads only; never needs torch.

  nsys profile -t cuda,nvtx -c cudaProfilerApi --export sqlite -o net python net.py
  python -m pyprof.parse net.sqlite > net.dict
  python -m pyprof.parse net.sqlite -o net.dict      # net.dict appears only when complete
"""

EPILOG = f"""\
A summary goes to stderr at the end (unless --quiet): records written, the share with an op
attributed, kernels without a launch call, ranges not understood, malformed pyprof markers.
A progress line is shown while stderr is a terminal.

exit status:
  0                    success
  {EXIT_USAGE}                    bad command line
  {EXIT_NO_INPUT}                    input missing or unreadable
  {EXIT_BAD_FORMAT}                    not SQLite, or not an Nsight Systems export
  {EXIT_NO_KERNELS}                    no CUDA trace in the export (no kernel table) or an empty capture
  {EXIT_CORRUPT}                    truncated or corrupted export (records already written are incomplete)
  {EXIT_TOOL}                    .nsys-rep input but nsys missing, or nsys export failed
  {EXIT_INTERRUPTED}                  interrupted
On a fatal error after records went to stdout, a last line that is not JSON says so, and no
-o file is created.
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line; its --help is the manual."""
    p = Parser(PROG, description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("input", help="SQLite export (nsys profile --export sqlite, or nsys export --type sqlite), "
                                 "or an .nsys-rep report (needs nsys: on PATH, or $NSYS)")
    p.add_argument("-o", "--output", metavar="FILE", help="write records to FILE (created only on success) "
                                                          "instead of stdout")
    p.add_argument("--memcpy", action="store_true", help="also write memcpy and memset records")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary or notes on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; fatal problems raise PyprofError (run_cli turns them into exit codes)."""
    args = build_parser().parse_args(argv)
    stats = parse(args.input, args.output, memcpy=args.memcpy, quiet=args.quiet,
                  progress=sys.stderr.isatty() and not args.quiet)
    if not args.quiet:
        share = 100.0 * stats.with_op / stats.records if stats.records else 0.0
        what = count(stats.kernels, "kernel") + (f" + {stats.records - stats.kernels} memcpy/memset" if args.memcpy else "")
        print(f"{PROG}: {what} written; {share:.1f}% with an op attributed; "
              f"{stats.no_launch} without a launch call; {count(stats.not_understood, 'range')} not understood; "
              f"{count(stats.malformed, 'malformed pyprof marker')}", file=sys.stderr)
    return 0


def cli() -> NoReturn:
    """The `pyprof-parse` console script."""
    run_cli(PROG, main)


if __name__ == "__main__":
    cli()
