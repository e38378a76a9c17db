"""Memory of pyprof.init()'s marker caches under calls whose arguments are large and new each time.

Issue 31, item 6: `torch.tensor(t)` with a fresh 100,000-int tuple per call reached 8.5 GB of RSS
after 2,000 calls under init() (235 MB without pyprof): the tuple-text cache held up to 8,192 of
the tuples, and the C call key of each cached marker stored every int. This runs that loop in a
child process, once without pyprof and once under init() with markers forced (PYPROF_FORCE: built
as under a profiler, on a machine with no GPU and no NVTX tool), and prints each child's peak RSS
and CPU time; the goal is at most 300 MB under init().

    python benchmarks/annotation_memory.py                 # 2,000 calls, 100,000 ints each
    python benchmarks/annotation_memory.py --calls 500 --length 10000
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

CHILD = """
import os, sys, torch
if sys.argv[1] == "pyprof":
    import pyprof
    pyprof.init()
    from pyprof.nvtx import marker
    budget = getattr(marker, "budget", None)  # None: a pyprof from before the byte bound
calls, length = int(sys.argv[2]), int(sys.argv[3])
torch.tensor((1, 2))  # torch's own first-call allocations, before the RSS before the loop
before = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
for i in range(calls):
    torch.tensor(tuple(range(i, i + length)))
held = budget.held if sys.argv[1] == "pyprof" and budget is not None else 0
print(before, held)
"""


def run(mode: str, calls: int, length: int) -> tuple[float, float, float, float]:
    """(peak RSS, RSS before the loop, bytes the marker caches hold at its end, all in MB; CPU
    seconds) of one child running the loop, `mode` "torch" or "pyprof"."""
    env = dict(os.environ, PYPROF_FORCE="1")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, mode, str(calls), str(length)], env=env,
                            stdout=subprocess.PIPE)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"annotation_memory: the {mode} child failed")
    before, held = map(int, out.split())
    return usage.ru_maxrss / 1024, before / 2**20, held / 2**20, usage.ru_utime + usage.ru_stime


def main() -> None:
    """Both children, one line each, and the verdict against the goal."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--length", type=int, default=100_000, help="ints in each call's tuple")
    ap.add_argument("--goal", type=float, default=300.0, help="peak RSS under init(), MB")
    args = ap.parse_args()
    print(f"{args.calls} calls of torch.tensor(a fresh tuple of {args.length:,} ints) in a child process: its peak "
          "RSS, its RSS before the loop, what pyprof's marker caches hold at the end")
    peaks = {}
    for mode in ("torch", "pyprof"):
        peaks[mode], before, held, cpu = run(mode, args.calls, args.length)
        label = "without pyprof" if mode == "torch" else "under pyprof.init(), markers forced"
        print(f"  {label:<38} peak {peaks[mode]:7.1f} MB   before the loop {before:7.1f} MB   "
              f"caches {held:6.2f} MB   {cpu:6.1f} s CPU")
    verdict = "met" if peaks["pyprof"] <= args.goal else "NOT met"
    print(f"goal: at most {args.goal:.0f} MB under init(): {verdict} "
          f"(+{peaks['pyprof'] - peaks['torch']:.1f} MB over torch alone)")


if __name__ == "__main__":
    main()
