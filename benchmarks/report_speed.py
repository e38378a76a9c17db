"""The HTML report and the Perfetto trace against `prof --summary` on the same records: the goal is
the report in at most 2x the summary's time and at most 20 MB.

The synthetic training-step export of prof_speed.py (tests/nsys_synth.py's `workload()`, cached
by parse_speed.py's `export_for`) is parsed once into a record file; then `python -m
pyprof.prof` runs over it as users run it, `--summary`, `--html` and `--trace`, each a
subprocess, alternating for `--rounds` rounds (the machine's load drifts). Figures are CPU time of
the child (steadier than wall time on a shared machine) and its peak RSS; the page's and the
trace's sizes.

    python benchmarks/report_speed.py                       # 1,000,000 kernels
    python benchmarks/report_speed.py --kernels 100000 --records net.dict
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from parse_speed import export_for  # noqa: E402  (the cached synthetic exports)
from prof_speed import timed  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the synthetic export")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "pyprof-parse-bench",
                    help="where generated exports are kept between runs")
    ap.add_argument("--records", type=Path, help="the export's record file, when already parsed")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the runs")
    ap.add_argument("--no-trace", action="store_true", help="time --summary and --html only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        records = str(args.records) if args.records else os.path.join(tmp, "net.dict")
        if not args.records:
            export = export_for(args.kernels, args.cache)
            subprocess.run([sys.executable, "-m", "pyprof.parse", "-q", str(export), "-o", records], check=True)
        n = sum(1 for _ in open(records, "rb"))
        page, trace = os.path.join(tmp, "net.html"), os.path.join(tmp, "net.json.gz")
        views = (("--summary", None), ("--html", page)) + (() if args.no_trace else (("--trace", trace),))
        runs: dict[str, list] = {view: [] for view, _ in views}
        for _ in range(args.rounds):
            for view, out in views:
                cmd = [sys.executable, "-m", "pyprof.prof", view] + ([out] if out else []) + [records]
                runs[view].append(timed(cmd, os.devnull))
        print(f"report_speed: {n} records, {args.rounds} rounds (median CPU s)")
        base = statistics.median(r[1] for r in runs["--summary"])
        print(f"  {'run':<12} {'CPU s':>7} {'wall s':>7} {'peak MiB':>9} {'vs summary':>11} {'output MB':>10}")
        for view, out in views:
            cpu = statistics.median(r[1] for r in runs[view])
            wall = statistics.median(r[0] for r in runs[view])
            rss = max(r[2] for r in runs[view])
            size = f"{os.path.getsize(out) / 1e6:10.1f}" if out else f"{'-':>10}"
            print(f"  {view:<12} {cpu:7.1f} {wall:7.1f} {rss:9.0f} {cpu / base:11.2f} {size}")
    print("goal: --html <= 2.00x --summary's time, page <= 20 MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
