"""python -m pyprof.parse: Nsight Systems SQLite export(s) -> one JSON record per GPU kernel."""
from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import Executor
from typing import NoReturn, Sequence

from pyprof.errors import EXIT_INTERRUPTED, interrupted_while_loading

with interrupted_while_loading("pyprof.parse"):
    from pyprof.cli import Parser, exit_statuses
    from pyprof.errors import (EXIT_BAD_FORMAT, EXIT_CORRUPT, EXIT_INCOMPLETE, EXIT_NO_INPUT, EXIT_NO_KERNELS,
                               EXIT_OUTPUT, EXIT_TOOL, EXIT_USAGE, PyprofError, refuse_output_onto_input, run_cli)
    from pyprof.parse import Stats, dask, parallel, parse
    from pyprof.parse.merge import merge
    from pyprof.store import write as store
    from pyprof.text import count

PROG = "pyprof.parse"

DESCRIPTION = """\
Turn an Nsight Systems SQLite export into one JSON record per GPU kernel (JSON Lines, in launch
order; the format is docs/records.md). Each kernel is joined to its launch call and to every NVTX
range open around that call on the launching thread: pyprof markers (pyprof.init()), PyTorch
emit_nvtx op ranges, user 'layer:NAME' ranges. A kernel replayed from a CUDA graph captured inside
the trace (torch.cuda.graph, make_graphed_callables; nsys --cuda-graph-trace=node) is joined to the
ranges open when its node was captured. Reads only; never needs torch.

  nsys profile -t cuda,nvtx -s none -c cudaProfilerApi --capture-range-end=stop --cuda-graph-trace=node -f true \\
      --export sqlite -o net python net.py
  python -m pyprof.parse net.sqlite > net.dict
  python -m pyprof.parse net.sqlite -o net.dict      # net.dict appears only when complete

Several exports (or a folder of them) are the ranks of one job: they are parsed in parallel, one
worker per export up to -j, into one output in rank order whose records carry "rank" (from
pyprof's torch.distributed markers, else the file name's last number, else the file order):

  torchrun --nproc-per-node 8 --no-python nsys profile ... -o trace_%q{RANK} python train.py
  python -m pyprof.parse trace_*.sqlite -o job.dict
  python -m pyprof.parse --merge node0.dict node1.dict -o job.dict   # per-node outputs, by rank

One large export is cut into time windows parsed by up to -j workers; the output is byte for
byte what one process writes. --dask runs those parts on a Dask cluster instead (same bytes):

  python -m pyprof.parse --dask tcp://node0:8786 traces/ -o job.parquet   # or a scheduler file;
                                                                          # none: a LocalCluster
"""

STATUSES = {
    0: "success",
    EXIT_USAGE: "bad command line; the output (-o, or stdout redirected) is an input; two exports of the same rank",
    EXIT_NO_INPUT: "input missing, a directory or FIFO, unreadable, locked by another program, or a WAL-mode "
                   "export that cannot be opened read-only (its -shm file missing in a read-only folder)",
    EXIT_BAD_FORMAT: "not SQLite (compressed, random bytes), or not an Nsight Systems export (--merge: a line "
                     "that is no whole ranked record)",
    EXIT_NO_KERNELS: "no CUDA trace in the export (no kernel table) or an empty capture",
    EXIT_CORRUPT: "truncated or corrupted export, or a value of a type nsys never writes (records already "
                  "written are incomplete)",
    EXIT_TOOL: ".nsys-rep input but nsys missing, or nsys export failed; -o X.parquet without pyarrow; --dask "
               "without dask and distributed, or a cluster that cannot be reached",
    EXIT_INCOMPLETE: "--merge: an input ends where pyprof.parse failed",
    EXIT_OUTPUT: "the output cannot be written (no such directory, a directory in the way - for -o X.parquet, "
                 "a folder that is no record store - disk full)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C) or terminated (SIGTERM); a worker process killed (out of memory?)",
}

EPILOG = f"""\
A summary goes to stderr at the end (unless --quiet): records written, the share with an op
attributed, kernels without a launch call, ranges not understood, malformed pyprof markers; for a
trace with pyprof's compile-time table (torch.compile under pyprof.init()), the kernels joined to it.
A progress line is shown while stderr is a terminal.

{exit_statuses(PROG, STATUSES)}
On a fatal error after records went to stdout, a last line that is not JSON says so, and no -o
file is created.
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line; its --help is the manual."""
    p = Parser(PROG, description=DESCRIPTION, epilog=EPILOG)
    p.add_argument("input", nargs="+", help="SQLite export (nsys profile --export sqlite, or nsys export --type "
                                            "sqlite), an .nsys-rep report (needs nsys: on PATH, or $NSYS), or a "
                                            "folder of them; several: the ranks of one job")
    p.add_argument("-o", "--output", metavar="FILE", help="write records to FILE (created only on success) "
                                                          "instead of stdout; a name ending in .parquet: the "
                                                          "Parquet record store, a folder partitioned by rank "
                                                          "(needs pyarrow)")
    p.add_argument("--memcpy", action="store_true", help="also write memcpy and memset records")
    p.add_argument("-j", "--jobs", type=int, metavar="N", default=None,
                   help="worker processes (default: the CPUs available, %(prog)s sees "
                        f"{parallel.default_jobs()}); 1: one process")
    p.add_argument("--dask", nargs="?", const="", metavar="ADDRESS|SCHEDULER_FILE",
                   help="run the exports and windows as tasks of a Dask cluster: a scheduler's address "
                        "(tcp://host:8786), its scheduler file, or none for a LocalCluster of -j processes; the "
                        "output is the same bytes (needs dask and distributed; the output's folder, and the "
                        "exports, on a filesystem every worker sees)")
    p.add_argument("--rank", action="store_true", help="records carry the export's rank even when it is "
                                                       "the only one (implied by several exports or a folder)")
    p.add_argument("--merge", action="store_true", help="the inputs are record files whose records carry "
                                                        "rank (per-node parses): write them as one, in rank order")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary or notes on stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="with several workers, also where the time went "
                                                               "(each part's start, first record, end and CPU "
                                                               "seconds) on stderr, even with -q")
    return p


def _summary(stats: Stats, memcpy: bool, extra: str = "") -> str:
    share = 100.0 * stats.with_op / stats.records if stats.records else 0.0
    what = count(stats.kernels, "kernel") + (f" + {stats.records - stats.kernels} memcpy/memset" if memcpy else "")
    line = (f"{PROG}: {what} written{extra}; {share:.1f}% with an op attributed; "
            f"{stats.no_launch} without a launch call; {count(stats.not_understood, 'range')} not understood; "
            f"{count(stats.malformed, 'malformed pyprof marker')}")
    compiled = getattr(stats, "compiled", None)
    if compiled is not None and compiled.graphs:
        line += f"\n{PROG}: {compiled.note()}"
    return line


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; fatal problems raise PyprofError (run_cli turns them into exit codes)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--dask" and dask.is_input(argv[i + 1]):  # `--dask traces/*.sqlite`: no address given
            argv[i] = "--dask="
    args = build_parser().parse_args(argv)
    if store.wants_store(args.output):
        refuse_output_onto_input(args.output, args.input)
        # The records are written as JSON Lines beside the output, then converted (docs/records.md, "Parquet").
        with store.storing(args.output) as lines:
            said = _run(args, lines)
    else:
        said = _run(args, args.output)
    if not args.quiet:
        print(said, file=sys.stderr)
    return 0


def _run(args: argparse.Namespace, output: str | None) -> str:
    """Parse (or --merge) into `output` (None: stdout); returns the summary for stderr."""
    jobs = parallel.default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise PyprofError("-j needs a positive number of workers", EXIT_USAGE)
    progress = sys.stderr.isatty() and not args.quiet
    if args.merge:
        if args.memcpy or args.rank or args.dask is not None:
            raise PyprofError("--merge copies records as they are: no --memcpy, --rank or --dask", EXIT_USAGE)
        refuse_output_onto_input(output, args.input)
        records, ranks = merge(args.input, output)
        span = f"ranks {ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else f"rank {ranks[0]}" if ranks else "no ranks"
        return f"{PROG}: {count(records, 'record')} merged from {count(len(args.input), 'file')} ({span})"
    if args.dask is not None:
        with dask.cluster(args.dask, jobs) as (executor, threads):
            return _parse(args, output, threads, progress, executor)
    return _parse(args, output, jobs, progress)


def _parse(args: argparse.Namespace, output: str | None, jobs: int, progress: bool,
           executor: Executor | None = None) -> str:
    """Parse the inputs into `output` with `jobs` workers (on `executor`: --dask); the summary."""
    paths = parallel.inputs(args.input)
    refuse_output_onto_input(output, paths)
    ranked = args.rank or len(paths) > 1 or any(os.path.isdir(a) for a in args.input)
    groups = parallel.plan(paths, jobs, args.memcpy, ranked) if ranked or jobs > 1 or executor else []
    if executor is None and not ranked and (not groups or len(groups[0]) == 1):
        stats = parse(paths[0], output, memcpy=args.memcpy, quiet=args.quiet, progress=progress)
        extra = ""
    else:
        stats = parallel.run(groups, output, jobs, progress, executor)
        extra = f" from {count(stats.exports, 'export')}"
        if stats.ranks:
            extra += ", " + parallel.note_ranks(stats)
        if stats.windows > stats.exports:
            extra += f", {stats.windows} windows ({stats.reparsed} parsed again)"
        if args.verbose:
            print(parallel.note_times(stats), file=sys.stderr)
    return _summary(stats, args.memcpy, extra)


def cli() -> NoReturn:
    """The `pyprof-parse` console script."""
    run_cli(PROG, main)


if __name__ == "__main__":
    cli()
