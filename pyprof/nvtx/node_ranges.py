"""Backward attribution by PyTorch's own autograd node ranges, while `pyprof.profiled()` captures.

PyTorch's autograd profiler in NVTX mode, limited to RecordScope.BACKWARD_FUNCTION, makes the
engine push one range per autograd node it runs (`AddmmBackward0, seq = 11, op_id = 3`, default
domain), in C++ on the engine's thread: no Python and no GIL there, and no forward op ranges.
Each pyprof op range carries the thread's autograd sequence number at its push as its payload
(pyprof.nvtx.wrappers, docs/markers.md "Payload"), so parse gives a node range the op whose call
created it. That replaces the node hooks of pyprof.nvtx.backward, which cost a Python call per
node on the engine's thread and a registration per forward op (benchmarks/results/
overhead_h100_modes.txt, rounds 8-9).

The profiler is PyTorch's per-thread state: it is turned on for the thread that enters the
block, and the autograd engine carries it to the threads that run backward passes started there.
The hooks are off process-wide while the block runs: a backward pass started on another thread
gets no node ranges, and its kernels no forward op.

When a profiler is already on for the thread (the user's, or emit_nvtx under
`profiled(aten=True)`), or PyTorch cannot turn this one on (a build without CUDA), nothing
changes: the hooks stay. profiled() keeps the hooks too in a program that can run compiled graphs
(pyprof.nvtx.capture.attribution says why).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from .emit import state

# Threads on which this module turned the node ranges on (entered blocks, nesting included).
_active = 0


def enable() -> None:
    """Turn PyTorch's NVTX node ranges on for this thread (RuntimeError or AssertionError when
    PyTorch cannot)."""
    import torch.autograd as autograd
    from torch._C._profiler import RecordScope, _ExperimentalConfig

    config = autograd.ProfilerConfig(autograd.ProfilerState.NVTX, False, False, False, False, False,
                                     _ExperimentalConfig())
    autograd._enable_profiler(config, set(), {RecordScope.BACKWARD_FUNCTION})


@contextlib.contextmanager
def node_ranges() -> Iterator[bool]:
    """PyTorch's node ranges instead of pyprof's node hooks for the body. Yields whether they are
    on (False: a profiler was on already, or none can be; the hooks then stay)."""
    global _active
    import torch.autograd as autograd

    if autograd._profiler_enabled():
        yield False
        return
    try:
        enable()
    except (RuntimeError, AssertionError):
        yield False
        return
    _active += 1
    state.hooks = False
    try:
        yield True
    finally:
        _active -= 1
        state.hooks = _active == 0
        autograd._disable_profiler()
