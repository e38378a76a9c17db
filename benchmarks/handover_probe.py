"""Does a profiler the user starts inside `pyprof.profiled()` take over from PyTorch's node ranges?

On a CUDA machine: a small MLP's training step inside profiled() (node ranges on, pyprof's hooks
off), then inside that block torch.profiler.profile() with CUDA activities and, in a second
profiled() block, emit_nvtx(); after each, one more torch.profiler in the process. Prints one
line per check and exits 1 if any failed (pyprof.nvtx.node_ranges, "hand-over": tested on the
development VM only with PyTorch's switches faked).

    python3 benchmarks/handover_probe.py
"""
from __future__ import annotations

import sys
from typing import Callable


def main() -> int:
    import torch

    import pyprof
    from pyprof.nvtx.emit import state

    if not torch.cuda.is_available():
        print("handover: no CUDA", file=sys.stderr)
        return 2
    pyprof.init()
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    x = torch.randn(32, 64, device="cuda")

    def step() -> None:
        model(x).square().mean().backward()

    def user_profiler() -> int:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            step()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    def emit_nvtx() -> int:
        with torch.autograd.profiler.emit_nvtx(record_shapes=True):
            step()
        return 1

    failed = 0

    def check(name: str, ok: bool, detail: str = "") -> None:
        nonlocal failed
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)

    def runs(name: str, profiler: Callable[[], int]) -> None:
        """Check that a user's profiler runs and sees the step (a raise is the failure looked for)."""
        try:
            seen = profiler()
            check(name, seen > 0, f"{seen} CUDA events" if profiler is user_profiler else "")
        except Exception as e:
            check(name, False, f"{type(e).__name__}: {e}")

    step()
    with pyprof.profiled():
        step()
        check("node ranges on inside profiled() (hooks off)", state.hooks is False, f"hooks={state.hooks}")
        runs("torch.profiler inside profiled() runs", user_profiler)
        check("hooks back after the hand-over", state.hooks is True, f"hooks={state.hooks}")
        step()
    check("profiler off after profiled()", not torch.autograd._profiler_enabled())
    runs("torch.profiler after profiled() runs", user_profiler)
    with pyprof.profiled():
        runs("emit_nvtx inside profiled() runs", emit_nvtx)
        step()
    runs("torch.profiler after the second profiled() runs", user_profiler)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
