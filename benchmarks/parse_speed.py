"""Speed and memory of `python -m pyprof.parse` on synthetic exports of growing size.

    python benchmarks/parse_speed.py                       # 25k, 100k, 250k kernels: a few minutes
    python benchmarks/parse_speed.py --sizes 100000,1000000,2000000

For each size: a realistic training-step export (tests/nsys_synth.py: forward on the main thread,
backward on the autograd thread, layer ranges, emit_nvtx op ranges, pyprof markers, about 4
ranges per kernel, inline and registered strings, 2 processes), generated once and cached under
--cache. Then, in the same run: a bare `SELECT *` scan of the kernel, runtime and NVTX tables in
Python (sqlite3, every row iterated), and parse as a subprocess writing to /dev/null, whose peak
RSS comes from wait4(). Each is timed --repeat times and the fastest run is kept.

Ratios use CPU time (user + system; the scan's own process_time(), the parse child's from
wait4()): on a shared machine other processes stretch wall time by a factor that differs from one
measurement to the next, CPU time much less. Wall times are printed too; parse is one thread, so
on an idle machine its wall time is its CPU time plus a little I/O wait.

Goals: parse <= 3x the bare scan; 10x the kernels <= 11x the time; peak RSS <= 200 MB and flat.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import nsys_synth  # noqa: E402  (the one generator, shared with the tests)

# Bump when nsys_synth.workload changes shape, so cached files are regenerated.
WORKLOAD_VERSION = 1
SCANNED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")


def export_for(kernels: int, cache: Path) -> Path:
    """The cached export with about `kernels` kernels, generated when missing."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"workload-v{WORKLOAD_VERSION}-{kernels}.sqlite"
    if not path.exists():
        t0 = time.perf_counter()
        tmp = path.with_suffix(".partial")
        nsys_synth.workload(str(tmp), kernels)
        tmp.rename(path)
        print(f"# generated {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def bare_scan(path: Path) -> tuple[float, float, dict[str, int]]:
    """Wall and CPU seconds to iterate every row of the kernel, runtime and NVTX tables; row counts."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    counts = {}
    t0, c0 = time.perf_counter(), time.process_time()
    for table in SCANNED:
        n = 0
        for _ in db.execute(f"SELECT * FROM {table}"):
            n += 1
        counts[table] = n
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    db.close()
    return wall, cpu, counts


def run_parse(path: Path) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds and peak RSS (MB) of `python -m pyprof.parse -q path > /dev/null`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "pyprof.parse", "-q", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"parse failed on {path} with status {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="25000,100000,250000", help="comma-separated kernel counts")
    p.add_argument("--cache", type=Path, default=Path("/tmp/pyprof-parse-bench"), help="where exports are kept")
    p.add_argument("--repeat", type=int, default=2, help="runs per measurement; the fastest is kept")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"# {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}")
    print("# times in seconds; cpu = user + system; ratio = parse cpu / scan cpu")
    print(f"{'kernels':>9} {'ranges':>9} {'scan wall':>9} {'scan cpu':>8} {'parse wall':>10} {'parse cpu':>9} "
          f"{'ratio':>6} {'kernels/cpu s':>13} {'peak MB':>8} {'cpu vs prev':>17}")
    prev = None
    for size in sizes:
        path = export_for(size, args.cache)
        scans, parses = [], []
        for _ in range(args.repeat):
            *scan, counts = bare_scan(path)
            scans.append(scan)
            parses.append(run_parse(path))
        scan_wall, scan_cpu = min(w for w, _ in scans), min(c for _, c in scans)
        parse_wall, parse_cpu = min(w for w, _, _ in parses), min(c for _, c, _ in parses)
        peak = max(m for _, _, m in parses)
        kernels = counts["CUPTI_ACTIVITY_KIND_KERNEL"]
        growth = ""
        if prev is not None:
            growth = f"{parse_cpu / prev[1]:.2f}x for {kernels / prev[0]:.1f}x"
        print(f"{kernels:>9} {counts['NVTX_EVENTS']:>9} {scan_wall:>9.2f} {scan_cpu:>8.2f} {parse_wall:>10.2f} "
              f"{parse_cpu:>9.2f} {parse_cpu / scan_cpu:>6.2f} {kernels / parse_cpu:>13.0f} {peak:>8.0f} {growth:>17}",
              flush=True)
        prev = (kernels, parse_cpu)


if __name__ == "__main__":
    main()
