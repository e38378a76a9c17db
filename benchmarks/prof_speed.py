"""prof against parse on the same trace, side by side: the goal is prof no slower than parse.

One synthetic training-step export (tests/nsys_synth.py's `workload()`, the one parse's own
benchmark uses, cached by benchmarks/parse_speed.py's `export_for`) is parsed by
`python -m pyprof.parse` into a record file, timed; then `python -m pyprof.prof` runs over that
file as users run it (a subprocess writing to /dev/null), with the default columns and with every
column. Each figure is CPU time of the child (steadier than wall time on a shared machine) and its
peak RSS; the ratio prof / parse is printed.

    python benchmarks/prof_speed.py                      # 1,000,000 kernels (the export takes minutes to make once)
    python benchmarks/prof_speed.py --kernels 100000
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from parse_speed import export_for  # noqa: E402  (the cached synthetic exports)

from pyprof.prof.columns import COLUMNS, DEFAULT  # noqa: E402


def timed(cmd: list, out: str) -> tuple:
    """(wall seconds, CPU seconds, peak RSS in MiB) of one child process writing stdout to `out`."""
    t0 = time.perf_counter()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory
    elapsed = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"prof_speed: {' '.join(cmd)} failed")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the synthetic export")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "pyprof-parse-bench",
                    help="where generated exports are kept between runs")
    args = ap.parse_args()
    export = export_for(args.kernels, args.cache)
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "net.dict")
        _, parse_cpu, parse_rss = timed([sys.executable, "-m", "pyprof.parse", "-q", str(export)], records)
        n = sum(1 for _ in open(records, "rb"))
        print(f"prof_speed: {n} records from {export.name}")
        print(f"  {'run':<22} {'CPU s':>7} {'records/CPU s':>14} {'peak MiB':>9} {'vs parse':>9}")
        print(f"  {'parse':<22} {parse_cpu:7.1f} {n / parse_cpu:14.0f} {parse_rss:9.0f} {1.0:9.2f}")
        for label, cols in (("prof, default columns", DEFAULT), ("prof, all columns", ",".join(c.name for c in COLUMNS))):
            _, cpu, rss = timed([sys.executable, "-m", "pyprof.prof", "-c", cols, records], os.devnull)
            print(f"  {label:<22} {cpu:7.1f} {n / cpu:14.0f} {rss:9.0f} {cpu / parse_cpu:9.2f}")
    print("goal: prof no slower than parse on the same trace (vs parse <= 1.00)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
