"""What turning PyTorch's NVTX profiler on and off costs, per graph call (pyprof.nvtx.graph_calls).

On a CUDA machine: the mean wall time of 200 enable/disable pairs of the profiler in NVTX mode
(node ranges only, and all op ranges as graph_calls.ops_on turns on per compiled-graph call),
then a small torch.mm's wall time per call with and without the op ranges on.

    python3 benchmarks/profiler_toggle.py
"""
import time

import torch

from pyprof.nvtx.node_ranges import enable

x = torch.randn(64, 64, device="cuda")
for scope_all in (False, True):
    for _ in range(5):
        enable(nodes_only=not scope_all)
        torch.autograd._disable_profiler()
    t = time.perf_counter()
    for _ in range(200):
        enable(nodes_only=not scope_all)
        torch.autograd._disable_profiler()
    print(f"enable+disable ({'all ops' if scope_all else 'nodes only'}): {(time.perf_counter() - t) / 200 * 1e6:.1f} us")


def ops(n):
    for _ in range(n):
        torch.mm(x, x)


for on in (False, True):
    if on:
        enable(nodes_only=False)
    ops(100)
    torch.cuda.synchronize()
    t = time.perf_counter()
    ops(2000)
    torch.cuda.synchronize()
    print(f"torch.mm with op ranges {on}: {(time.perf_counter() - t) / 2000 * 1e6:.2f} us")
    if on:
        torch.autograd._disable_profiler()
