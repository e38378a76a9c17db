"""Where pyprof's per-step time goes in one of benchmarks/overhead.py's training steps.

For one model of overhead.py (on a CPU-only machine with small shapes: the count is of pyprof's
Python work, which does not depend on the tensors' sizes; on CUDA the benchmark's real step), in
one process:

  counts    per steady-state step, from a profile hook (sys.setprofile): calls of each pyprof
            function, wrapped calls that were outermost (built or looked up a marker) and nested
            (returned at the depth test), memo misses (markers encoded), module ranges, backward
            node hooks attached and run, optimizer step markers;
  misses    the memo's misses per step after warm-up, with the call they came from: a marker
            encoded every step (a value that changes each step in the key) shows up here;
  time      ms per step with markers off, on, and on without the backward node hooks, in
            alternate blocks (process CPU time; wall time with synchronization on CUDA), and the
            difference per step divided by the counts;
  scoped    (--scoped, CUDA only) two more states: markers on without the hooks but with PyTorch's
            own NVTX ranges for autograd nodes alone (the autograd profiler in NVTX mode limited to
            RecordScope.BACKWARD_FUNCTION: C++ ranges named `<Node>, seq = N`, no Python on the
            engine thread), and markers off with those ranges: what backward attribution by
            sequence number would cost instead of the hooks;
  profile   cProfile's own time in pyprof's functions over a few steps (inflated by the
            profiler's per-call cost; read it for proportions, not totals).

    python benchmarks/overhead_account.py --model resnet18
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import statistics
import sys
import time
from typing import Callable, Dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples"), os.path.join(ROOT, "benchmarks")]

PYPROF_DIR = os.path.join(ROOT, "pyprof", "")


def counts(step: Callable[[], None]) -> Dict[str, int]:
    """Calls of pyprof's functions in one step, by `file:function`, and the memo's misses."""
    seen: Dict[str, int] = collections.Counter()
    missed: Dict[str, int] = collections.Counter()

    def prof(frame, event, arg):  # noqa: ANN001
        if event != "call":
            return
        code = frame.f_code
        if not code.co_filename.startswith(PYPROF_DIR):
            return
        name = os.path.basename(code.co_filename)[:-3] + ":" + code.co_name
        seen[name] += 1
        if name == "marker:build" and frame.f_back is not None and frame.f_back.f_code.co_name == "marker":
            prefix = frame.f_locals.get("prefix", "")
            missed[prefix.split('"op":')[-1].split(",")[0]] += 1

    sys.setprofile(prof)
    try:
        step()
    finally:
        sys.setprofile(None)
    out = dict(seen)
    out.update({"miss " + k: v for k, v in missed.items()})
    return out


def node_ranges(on: bool) -> None:
    """Turn PyTorch's NVTX ranges for autograd nodes alone (RecordScope.BACKWARD_FUNCTION) on or off."""
    from torch._C._autograd import _disable_profiler, _enable_profiler
    from torch._C._profiler import ProfilerConfig, ProfilerState, RecordScope, _ExperimentalConfig

    if on:
        _enable_profiler(ProfilerConfig(ProfilerState.NVTX, False, False, False, False, False, _ExperimentalConfig()),
                         set(), {RecordScope.BACKWARD_FUNCTION})
    else:
        _disable_profiler()


def on_off(step: Callable[[], None], steps: int, blocks: int, cuda: bool, scoped: bool = False) -> Dict[str, float]:
    """ms per step with markers off, on, and on without backward hooks ("no hooks"), and with
    `scoped` "scoped" / "off+scoped" (node_ranges on), blocks in turn, medians: process CPU time,
    or wall time between synchronizations on CUDA."""
    import torch

    from pyprof.nvtx import backward, emit

    attach = backward.attach
    clock = time.perf_counter if cuda else time.process_time
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    times: Dict[str, list] = {"off": [], "on": [], "no hooks": []}
    if scoped:
        times.update({"scoped": [], "off+scoped": []})
    for _ in range(blocks):
        for which in times:
            emit.configure(force=not which.startswith("off"))
            if which in ("no hooks", "scoped"):
                backward.attach = lambda *a: None
            if which.endswith("scoped"):
                node_ranges(True)
            try:
                step()
                sync()
                t = clock()
                for _ in range(steps):
                    step()
                sync()
                times[which].append((clock() - t) / steps * 1e3)
            finally:
                backward.attach = attach
                if which.endswith("scoped"):
                    node_ranges(False)
    emit.configure(force=True)
    return {k: statistics.median(v) for k, v in times.items()}


def profile(step: Callable[[], None], steps: int, top: int) -> None:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(steps):
        step()
    pr.disable()
    st = pstats.Stats(pr)
    rows = []
    total = 0.0
    for (fn, _line, name), (_cc, nc, tt, _ct, _callers) in st.stats.items():
        if fn.startswith(PYPROF_DIR):
            rows.append((tt / steps * 1e3, nc // steps, os.path.relpath(fn, ROOT) + ":" + name))
            total += tt / steps * 1e3
    rows.sort(reverse=True)
    print(f"cProfile, own time in pyprof's functions per step (profiled, inflated): {total:.2f} ms")
    for ms, n, name in rows[:top]:
        print(f"  {ms:7.3f} ms {n:6d} calls  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18", help="lenet, resnet18 or gpt (overhead.py's models)")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--blocks", type=int, default=5, help="timed blocks per state (default 5)")
    parser.add_argument("--scaler", action="store_true",
                        help="resnet18: GradScaler enabled on the CPU too, as on CUDA")
    parser.add_argument("--images", default="2,8", help="resnet18: batch,size (default 2,8: the step is then "
                        "mostly Python and dispatch, as a launch-bound GPU step)")
    parser.add_argument("--scoped", action="store_true",
                        help="CUDA: also time PyTorch's NVTX ranges for autograd nodes alone instead of the hooks")
    args = parser.parse_args()

    import torch

    import overhead
    import pyprof

    pyprof.init(force=True)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.scaler:
        real = torch.amp.GradScaler

        def scaler(device: str, enabled: bool = True, **kw):  # noqa: ANN202
            return real(device, enabled=True, **kw)

        torch.amp.GradScaler = scaler  # type: ignore[misc]
    step = overhead.build(args.model, torch.device("cuda" if cuda else "cpu"), smoke=not cuda,
                          images=tuple(int(v) for v in args.images.split(",")))
    for _ in range(3):
        step()
    c = counts(step)
    c2 = counts(step)  # a second steady-state step: misses must repeat to be per-step
    print(f"model {args.model} " + (f"({torch.cuda.get_device_name()}, overhead.py's shapes)" if cuda else
                                     f"(CPU, overhead.py's smoke shapes; ResNet-18 images {args.images})") +
          f", torch {torch.__version__}, python {sys.version.split()[0]}")
    print("per step (steady state), calls of pyprof functions:")
    for k in sorted(c, key=lambda k: -c[k]):
        if not k.startswith("miss "):
            print(f"  {c[k]:6d}  {k}")
    misses = {k: v for k, v in c2.items() if k.startswith("miss ")}
    print(f"memo misses in a steady-state step: {sum(misses.values())} " + (str(misses) if misses else ""))
    t = on_off(step, args.steps, args.blocks, cuda, args.scoped and cuda)
    added = t["on"] - t["off"]
    print(("wall" if cuda else "process CPU") + " ms per step: " + ", ".join(f"{k} {v:.3f}" for k, v in t.items()) +
          f"; added {added:.3f} ms, of which the backward hooks {t['on'] - t['no hooks']:.3f} ms")
    outer = c.get("memo:marker", 0)
    print(f"  added per outermost wrapped call + module range + bwd hook run "
          f"({outer} + {c.get('wrappers:__call__', 0)} + {c.get('backward:_enter', 0)}): "
          f"{added * 1e3 / max(1, outer + c.get('wrappers:__call__', 0) + c.get('backward:_enter', 0)):.2f} us")
    profile(step, 3, 25)


if __name__ == "__main__":
    main()
