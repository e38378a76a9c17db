"""Where the compiled GPT's added step time goes under profiled()'s default mode (CUDA).

The compiled GPT of benchmarks/overhead.py after pyprof.init(force=True), in one process:

  time     blocks of steps in the in-process states of overhead.py (off, markers, ranges, on:
           overhead.in_process_state) and three more (`scoped`: as on, the profiler switched around
           each graph call recording no op; `forward`: op ranges in forward graphs only;
           `leafless`: as on, without the leaves' AccumulateGrad ranges, pyprof.nvtx.leaf_grads),
           taking turns for --rounds rounds; per state the median ms per step, and its ratio to
           `off` within each round with a 95% bootstrap interval of that ratio's median (and
           on/leafless: what the leaf ranges cost);
  inside   what PyTorch's profiler records inside each compiled-graph call in one step
           (torch.profiler, CPU activity), by name: the op ranges that profiled() turns on there
           are these ops' (Inductor's kernel launches are recorded only under torch.profiler);
  wrapper  per compiled-graph call under profiled()'s tools, us spent in each part of pyprof's
           wrapper (graph_calls.ranges): in all, the calling module's look-up, turning the op
           ranges on, the graph itself, turning them off (medians over --steps steps).

    python benchmarks/graph_calls_cost.py [--rounds 40] [--steps 10] [--warmup 40]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from typing import Callable, Dict, Iterator, List

sys.path[:0] = [os.path.dirname(os.path.abspath(__file__))]
from overhead import build, in_process_state, median_interval, tool, turns  # noqa: E402

# overhead.py's in-process states, `scoped`: as `on`, but the profiler turned on around each
# graph call records autograd nodes alone (none run inside a graph): what the switch and an
# enabled profiler cost without a single op range; `forward`: as `on`, the op ranges only in the
# main thread's graph calls (the backward graph runs on the autograd thread); `leafless`: as `on`,
# no graph counted as training, so no leaf gets an AccumulateGrad range.
STATES = ("off", "markers", "ranges", "on", "scoped", "forward", "leafless")


@contextlib.contextmanager
def state(which: str, device) -> Iterator[None]:
    """The body in one of STATES."""
    if which not in ("scoped", "forward", "leafless"):
        with in_process_state(which, True, device):
            yield
        return
    from pyprof.nvtx import graph_calls, node_ranges

    if which == "leafless":
        trains = graph_calls.trains
        graph_calls.trains = lambda gid: False
        try:
            with tool("pyprof", device):
                yield
        finally:
            graph_calls.trains = trains
        return

    ops_on = graph_calls.ops_on

    def switch(shapes: bool = False) -> bool:
        if which == "forward":
            return threading.current_thread() is threading.main_thread() and ops_on(shapes)
        node_ranges.enable(nodes_only=True)
        return True

    graph_calls.ops_on = switch
    try:
        with tool("pyprof", device):
            yield
    finally:
        graph_calls.ops_on = ops_on


def inside_calls(step: Callable[[], None]) -> Dict[str, int]:
    """Events recorded inside compiled-graph calls in one step, by name (every depth)."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    names: collections.Counter = collections.Counter()

    def walk(event) -> None:
        for child in event.cpu_children:
            names[child.name] += 1
            walk(child)

    for event in prof.events():
        if event.name.startswith("## Call CompiledFxGraph"):
            names["(graph calls)"] += 1
            walk(event)
    return dict(names.most_common())


def wrapper_parts(step: Callable[[], None], device, steps: int) -> Dict[str, float]:
    """Median us per compiled-graph call of each part of pyprof's graph-call wrapper: `call` in
    all, `graph` the graph itself, `caller` the calling module's look-up, `on`/`off` the op
    ranges' switch, `rest` the remainder (the range's text, push and pop)."""
    import torch.autograd as autograd

    from pyprof.nvtx import graph_calls

    cls = sys.modules[graph_calls._MODULE].CompiledFxGraph
    parts: Dict[str, List[float]] = {k: [] for k in ("call", "graph", "caller", "on", "off")}

    def timed(key: str, fn: Callable) -> Callable:
        def run(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                parts[key].append(time.perf_counter() - t)
        return run

    saved = (cls.__call__, graph_calls.caller, graph_calls.ops_on, autograd._disable_profiler)
    # The graph's own time is taken inside ranges()'s wrapper: it wraps what it finds installed.
    cls.__call__ = timed("graph", saved[0])
    graph_calls.caller, graph_calls.ops_on = timed("caller", saved[1]), timed("on", saved[2])
    autograd._disable_profiler = timed("off", saved[3])
    try:
        with tool("pyprof", device):
            wrapped = cls.__call__
            cls.__call__ = timed("call", wrapped)
            try:
                for _ in range(steps):
                    step()
            finally:
                cls.__call__ = wrapped
    finally:
        cls.__call__, graph_calls.caller, graph_calls.ops_on, autograd._disable_profiler = saved
    out = {k: round(statistics.median(v) * 1e6, 1) for k, v in parts.items() if v}
    if len(parts["off"]) == len(parts["call"]):
        rest = [c - g - w - on - off for c, g, w, on, off in zip(*(parts[k] for k in ("call", "graph", "caller", "on", "off")))]
        out["rest"] = round(statistics.median(rest) * 1e6, 1)
    out["calls per step"] = len(parts["call"]) / steps
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=40, help="rounds of one block per state (default 40)")
    p.add_argument("--steps", type=int, default=10, help="steps per block (default 10)")
    p.add_argument("--warmup", type=int, default=40, help="warm-up steps (default 40)")
    args = p.parse_args()
    import torch

    import pyprof

    if not torch.cuda.is_available():
        sys.exit("graph_calls_cost.py: needs CUDA (profiled()'s graph-call ranges and op ranges are CUDA's)")
    pyprof.init(force=True)
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    step = build("gpt_compiled", device, smoke=False)
    for _ in range(args.warmup):
        step()
    times = turns(list(STATES), lambda which: state(which, device), step, torch.cuda.synchronize,
                  args.rounds, args.steps)
    result: Dict[str, object] = {"torch": torch.__version__, "rounds": args.rounds, "steps": args.steps}
    for name in STATES:
        result[name] = round(statistics.median(times[name]), 3)
        if name != "off":
            ratios = [a / b for a, b in zip(times[name], times["off"])]
            low, high = median_interval(ratios)
            result[name + "/off"] = [round(statistics.median(ratios), 3), round(low, 3), round(high, 3)]
    ratios = [a / b for a, b in zip(times["on"], times["leafless"])]
    result["on/leafless"] = [round(statistics.median(ratios), 3), *(round(x, 3) for x in median_interval(ratios))]
    for key in (*STATES[1:], "on/leafless"):
        key = key if "/" in key else key + "/off"
        print(f"{key} within each round: median {result[key][0]:.3f}x, 95% interval "
              f"{result[key][1]:.3f}-{result[key][2]:.3f}x", file=sys.stderr)
    result["wrapper us"] = wrapper_parts(step, device, args.steps)
    with in_process_state("markers", True, device):
        result["inside"] = inside_calls(step)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
