"""Time `python -m pyprof.prof` over a large record file and print records/s.

Records come from parse itself: tests/nsys_synth.py's `workload()` (the realistic training-step
export parse's own benchmark uses) is parsed once by `python -m pyprof.parse`, and its lines are
repeated up to --records. prof runs as users run it (a subprocess writing to /dev/null), once with
the default columns and once with every column; peak memory is reported to show it does not grow
with the input.

    python benchmarks/prof_speed.py                 # 1,000,000 records
    python benchmarks/prof_speed.py --records 200000 --keep /tmp/net.dict
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from nsys_synth import workload  # noqa: E402  (the shared synthetic-export generator)

from pyprof.prof.columns import COLUMNS, DEFAULT  # noqa: E402


def make_records(path: str, count: int, seed_kernels: int = 20000) -> None:
    """Write `count` parse records to `path`: one parsed synthetic export, its lines repeated."""
    with tempfile.TemporaryDirectory() as tmp:
        export = workload(os.path.join(tmp, "net.sqlite"), seed_kernels)
        lines = subprocess.run([sys.executable, "-m", "pyprof.parse", export], check=True,
                               capture_output=True).stdout.splitlines(keepends=True)
    with open(path, "wb") as f:
        written = 0
        while written < count:
            chunk = lines[: count - written]
            f.writelines(chunk)
            written += len(chunk)


def time_prof(path: str, columns: str) -> tuple:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one prof run over `path`."""
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "pyprof.prof", "-c", columns, path], stdout=sink)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory, not parse's
    elapsed = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"prof_speed: prof exited with {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keep", metavar="FILE", help="write the record file here and keep it")
    ap.add_argument("--make", metavar="FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make:
        make_records(args.make, args.records)
        return 0
    path = args.keep or tempfile.mktemp(suffix=".dict")
    try:
        if not (args.keep and os.path.exists(path)):
            # In a child: a forked prof would otherwise start with this process's peak memory.
            subprocess.run([sys.executable, __file__, "--make", path, "--records", str(args.records)], check=True)
        n = sum(1 for _ in open(path, "rb"))
        size = os.path.getsize(path) / 2**20
        print(f"prof_speed: {n} records, {size:.0f} MiB")
        for label, cols in (("default columns", DEFAULT), ("all columns", ",".join(c.name for c in COLUMNS))):
            secs, cpu, rss = time_prof(path, cols)
            # CPU time too: on a shared machine it is the steadier figure
            print(f"prof_speed: {label:<16} {secs:6.1f} s  {n / secs:8.0f} records/s  "
                  f"({n / cpu:.0f} per CPU second)  peak RSS {rss:.0f} MiB")
    finally:
        if not args.keep and os.path.exists(path):
            os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
