"""python -m pyprof.capture: run a program under Nsight Systems with pyprof's flags, then parse it.

    python -m pyprof.capture -o net -- python train.py
    python -m pyprof.prof net.dict

is the same as `nsys profile` with CUDA and NVTX tracing, no CPU sampling, the capture limited to
the torch.cuda.profiler.start()/stop() range with the program left running afterwards, the kernels
of CUDA graphs traced one by one, and a SQLite export with the NVTX payloads' bytes (NCCL's
message sizes: `nsys export --include-blobs=true`), followed by
`python -m pyprof.parse net.sqlite -o net.dict`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from typing import NoReturn, Sequence

from pyprof.cli import Parser, exit_statuses, invoked_as
from pyprof.errors import (EXIT_BAD_FORMAT, EXIT_CORRUPT, EXIT_INTERRUPTED, EXIT_NO_INPUT, EXIT_NO_KERNELS,
                           EXIT_OUTPUT, EXIT_TOOL, EXIT_USAGE, PyprofError, cannot_write, run_cli)
from pyprof.nsys import MIN_VERSION, find_nsys, nsys_version
from pyprof.parse.nsysrep import export
from pyprof.parse import parse

PROG = "pyprof.capture"

STATUSES = {
    0: "NAME.dict written",
    EXIT_USAGE: "bad command line (no program after '--')",
    EXIT_NO_INPUT: "the export nsys wrote cannot be read",
    EXIT_BAD_FORMAT: "the file nsys wrote is not an Nsight Systems export",
    EXIT_NO_KERNELS: "no kernel in the capture (no torch.cuda.profiler.start()/stop() reached: --whole captures "
                     "the whole run)",
    EXIT_CORRUPT: "the export nsys wrote is truncated or corrupted",
    EXIT_TOOL: "nsys missing or too old, or it wrote no export",
    EXIT_OUTPUT: "NAME's folder cannot be written (checked before the program runs), or NAME.dict cannot",
    EXIT_INTERRUPTED: "interrupted",
}

# nsys options pyprof needs, by their long name; a user's own value for one of them wins.
DEFAULTS: dict[str, tuple[str, ...]] = {
    "--trace": ("--trace=cuda,nvtx",),
    "--sample": ("--sample=none",),
    "--cpuctxsw": ("--cpuctxsw=none",),
    "--capture-range": ("--capture-range=cudaProfilerApi",),
    "--capture-range-end": ("--capture-range-end=stop",),
    "--force-overwrite": ("--force-overwrite=true",),
    # One kernel row per kernel of a CUDA graph (nsys's default traces each graph launch as one).
    "--cuda-graph-trace": ("--cuda-graph-trace=node",),
}
SHORT = {"-t": "--trace", "-s": "--sample", "-c": "--capture-range", "-f": "--force-overwrite", "-o": "--output"}


def nsys_command(nsys: str, name: str, nsys_options: Sequence[str], program: Sequence[str]) -> list[str]:
    """The `nsys profile` command line: pyprof's defaults, minus those the user set, then theirs."""
    given = set()
    for opt in nsys_options:
        key = opt.split("=", 1)[0]
        given.add(SHORT.get(key, key))
    if "--output" in given:
        raise PyprofError("give the output name with pyprof.capture's own -o NAME, not as an nsys option", EXIT_USAGE)
    if "--capture-range" in given and "--capture-range-end" not in given:
        given.add("--capture-range-end")  # only meaningful with cudaProfilerApi; let nsys default it
    cmd = [nsys, "profile"]
    for key, values in DEFAULTS.items():
        if key not in given:
            cmd.extend(values)
    return cmd + list(nsys_options) + ["--output", name] + list(program)


def default_name(program: Sequence[str]) -> str:
    """`train` for `python train.py ...`; else the program's own name."""
    for arg in program:
        if arg.endswith(".py"):
            return os.path.splitext(os.path.basename(arg))[0]
    return os.path.basename(program[0])


def build_parser() -> argparse.ArgumentParser:
    """The command line; its --help is the manual."""
    p = Parser(
        PROG, allow_abbrev=False,
        usage=f"{invoked_as(PROG)} [-o NAME] [--whole] [-q] [nsys profile options ...] -- COMMAND [ARGS ...]",
        description=__doc__.split("\n", 1)[1],
        epilog="Options this command does not know go to `nsys profile` unchanged (e.g. --duration=20, "
               "-t cuda,nvtx,cublas); they override pyprof's defaults of the same name. NSYS=/path/to/nsys "
               f"picks an nsys not on PATH; Nsight Systems {MIN_VERSION[0]}.{MIN_VERSION[1]} or newer.\n\n"
               + exit_statuses(PROG, STATUSES))
    p.add_argument("-o", "--output", metavar="NAME", help="write NAME.nsys-rep, NAME.sqlite and NAME.dict "
                                                          "(default: the script's name)")
    p.add_argument("--whole", action="store_true", help="capture the whole run, not only the "
                                                        "torch.cuda.profiler.start()/stop() range")
    p.add_argument("-q", "--quiet", action="store_true", help="no notes on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; fatal problems raise PyprofError."""
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = build_parser()
    # Parsed before the program is required, so that -h and --version work alone.
    args, nsys_options = parser.parse_known_args(argv[:split])
    program = argv[split + 1:]
    if split == len(argv):
        parser.error(f"put the program to profile after '--': {parser.prog} -- python train.py")
    if not program:
        parser.error("no program after '--'")
    if args.whole:
        nsys_options.append("--capture-range=none")

    nsys = find_nsys("pyprof.capture")
    version = nsys_version(nsys)
    if version is not None and version[:2] < MIN_VERSION:
        have = ".".join(map(str, version))
        raise PyprofError(f"{nsys} is Nsight Systems {have}; pyprof needs {MIN_VERSION[0]}.{MIN_VERSION[1]} or newer "
                          "(older ones can lose the CUDA kernel table under recent drivers)", EXIT_TOOL)
    if version is None and not args.quiet:
        print(f"{PROG}: note: could not tell the version of {nsys}; going on", file=sys.stderr)

    name = args.output or default_name(program)
    try:  # a folder that cannot take the files is found now, not after the whole run
        tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(name))).close()
    except OSError as err:
        raise cannot_write(name + ".nsys-rep", err) from None
    cmd = nsys_command(nsys, name, nsys_options, program)
    if not args.quiet:
        print(f"{PROG}: running {' '.join(cmd)}", file=sys.stderr)
    status = subprocess.run(cmd).returncode
    sqlite = name + ".sqlite"
    if os.path.isfile(name + ".nsys-rep"):
        # `nsys profile --export` leaves out the NVTX payloads' bytes (NCCL's message sizes).
        export(nsys, name + ".nsys-rep", sqlite, args.quiet, False, PROG)
    if not os.path.isfile(sqlite):
        raise PyprofError(f"nsys exited with status {status} and wrote no {sqlite}", EXIT_TOOL)
    if status != 0 and not args.quiet:
        print(f"{PROG}: note: nsys exited with status {status}; its export was written, parsing it", file=sys.stderr)
    try:
        parse(sqlite, name + ".dict", quiet=args.quiet)
    except PyprofError as err:
        if err.status == EXIT_NO_KERNELS and not args.whole:
            raise PyprofError(f"{err}; did the program call torch.cuda.profiler.start() and stop()? "
                              "--whole captures the whole run", err.status) from None
        raise
    if not args.quiet:
        print(f"{PROG}: wrote {name}.dict; next: python -m pyprof.prof {name}.dict", file=sys.stderr)
    return 0


def cli() -> NoReturn:
    """The `pyprof-capture` console script."""
    run_cli(PROG, main)


if __name__ == "__main__":
    cli()
