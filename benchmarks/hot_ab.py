"""Does the C hit path (pyprof/nvtx/_hot.c) buy step time? (issue 29: keep it only for >= 3%.)

In one process per model, pyprof.init(force=True) markers on with profiled()'s tools, blocks of
training steps alternate between the marker cache's C look-up and its Python twin (memo._lookup),
and `off` (markers unforced), in turns (overhead.turns). Per round the ratio python/C of adjacent
blocks; the verdict is the median over rounds with a 95% bootstrap interval
(overhead.judged, whose `met` here says the C path buys under 3%: remove it).

    python benchmarks/hot_ab.py --models lenet,resnet18,gpt        # GPU machine
    python benchmarks/hot_ab.py --smoke                            # CPU, seconds
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from typing import Iterator

import overhead


@contextlib.contextmanager
def lookup_state(which: str, device) -> Iterator[None]:
    """`c` or `python`: that look-up behind every wrapped call, markers on; `off`: unforced."""
    from pyprof.nvtx import memo, wrappers

    if which == "off":
        with overhead.in_process_state("off", False, device):
            yield
        return
    wrappers._lookup = memo._hot.lookup if which == "c" else memo._lookup
    try:
        with overhead.in_process_state("on", False, device):
            yield
    finally:
        wrappers._lookup = memo.lookup


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="lenet,resnet18,gpt")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args()
    import torch

    import pyprof
    from pyprof.nvtx import memo

    if memo._hot is None:
        print("hot_ab: pyprof.nvtx._hot is not built here", file=sys.stderr)
        return 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rounds, steps = (3, 2) if args.smoke else (args.rounds, args.steps)
    pyprof.init(force=True)
    print(f"device {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"C path with torch's getters; {rounds} rounds x {steps} steps per state")
    for name in args.models.split(","):
        step = overhead.build(name, device, args.smoke)
        for _ in range(3):
            step()
        times = overhead.turns(["c", "python", "off"], lambda w: lookup_state(w, device), step, sync, rounds, steps)
        ratios = [py / c for py, c in zip(times["python"], times["c"])]
        med = {s: statistics.median(v) for s, v in times.items()}
        print(f"{name}: off {med['off']:.3f} ms, C {med['c']:.3f} ms, Python {med['python']:.3f} ms per step; "
              f"python/C per round median {statistics.median(ratios):.3f}x; "
              + "python/C <= 1.03x (C buys under 3%): " + overhead.judged(statistics.median, 1.03, ratios, what="rounds"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
