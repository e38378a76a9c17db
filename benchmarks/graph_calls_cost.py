"""Step time of the compiled GPT (examples/compiled.py's) under profiled()'s default mode, with and
without what it does around compiled-graph calls (pyprof/nvtx/graph_calls.py).

    python benchmarks/graph_calls_cost.py [--blocks 7] [--steps 20]

Three ways, blocks interleaved in one process (drift hits all alike), after warm-up: `markers`
(pyprof.init(), markers built), `+ranges` (also the numbered range around each graph call, and
the calling module looked up), `+ops` (also PyTorch's NVTX op ranges inside each call: what
profiled() does). Markers are forced (PYPROF_FORCE=1), as nsys would make them live. Prints one
JSON line: the median ms per step of each.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from typing import Iterator

sys.path[:0] = [os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=7)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    os.environ.setdefault("PYPROF_FORCE", "1")
    import torch
    import torch.nn.functional as F

    import pyprof
    from gpt import GPT
    from pyprof.nvtx import graph_calls

    pyprof.init()
    device = torch.device("cuda")
    model = GPT(1024, 128, 256, 4, 2).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    inputs = torch.randint(0, 1024, (4, 128), device=device)
    target = torch.randint(0, 1024, (4, 128), device=device)
    run = torch.compile(model)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(run(inputs).view(-1, 1024), target.view(-1))
        loss.backward()
        optimizer.step()

    @contextlib.contextmanager
    def no_ops() -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def ranges_only() -> Iterator[None]:
        saved, graph_calls.op_ranges = graph_calls.op_ranges, no_ops
        try:
            with graph_calls.ranges():
                yield
        finally:
            graph_calls.op_ranges = saved

    ways = {"markers": contextlib.nullcontext, "+ranges": ranges_only, "+ops": graph_calls.ranges}
    for _ in range(5):
        step()
    times: dict = {k: [] for k in ways}
    for _ in range(args.blocks):
        for name, ctx in ways.items():
            with ctx():
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    step()
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - t0) * 1e3 / args.steps)
    print(json.dumps({"torch": torch.__version__, "steps": args.steps, "blocks": args.blocks,
                      **{k: round(statistics.median(v), 3) for k, v in times.items()}}))


if __name__ == "__main__":
    main()
