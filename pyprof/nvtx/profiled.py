"""The capture range of a profiled region, as pyprof's workflow needs it (`pyprof.profiled()`)."""
from __future__ import annotations

import contextlib
from typing import Iterator

from . import graph_calls, inductor, node_ranges


@contextlib.contextmanager
def attribution(aten: bool = False, record_shapes: bool = True) -> Iterator[None]:
    """What profiled() turns on around its body besides the capture range (CUDA only; the overhead
    benchmark measures the same): emit_nvtx with `aten`; otherwise the range around each
    compiled-graph call (which emit_nvtx would give) and, in a program that has no compiled graph
    to run, PyTorch's autograd node ranges instead of pyprof's node hooks."""
    import torch

    if aten:
        with torch.autograd.profiler.emit_nvtx(record_shapes=record_shapes):
            yield
        return
    with graph_calls.ranges() as compiled_graphs:
        # A compiled graph's op ranges need the NVTX profiler of their own thread, and giving way
        # to them on the autograd thread breaks the node ranges' shared state (PyTorch asserts
        # "Expected profiler state set" on every later node: H100, torch 2.11): a program that
        # can run compiled graphs keeps the hooks.
        with contextlib.nullcontext() if compiled_graphs else node_ranges.node_ranges():
            yield


@contextlib.contextmanager
def profiled(aten: bool = False, record_shapes: bool = True) -> Iterator[bool]:
    """Profile the body: the CUDA profiler range (`torch.cuda.profiler.start()`/`stop()`, which
    `nsys profile -c cudaProfilerApi` captures) opened and closed on a synchronized device, so
    that the capture holds the body's kernels and nothing launched before it.

    pyprof's own markers attribute every kernel: backward ones through PyTorch's autograd node
    ranges (the autograd profiler in NVTX mode for backward nodes only, pyprof.nvtx.node_ranges),
    joined by sequence number to the op range whose call created the node, or through pyprof's
    node hooks (docs/markers.md, `kind: "bwd"`) where a profiler of the user's is on already.
    `aten=True` adds PyTorch's own op ranges (`emit_nvtx(record_shapes=...)`): the ATen ops
    inside each call (`torchOps` in the records, exact GEMM sizes of composite ops) at about
    twice the step time (docs/annotation.md, "Cost").

    Yields True when the range was opened; False on a machine without CUDA, where the body runs
    as is. Use it around a step after warm-up:

        with pyprof.profiled():
            train_step()
    """
    import torch

    if not torch.cuda.is_available():
        yield False
        return
    with attribution(aten, record_shapes):
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        # Inside the capture range, so the trace carries what its compiled kernels compute.
        inductor.emit()
        try:
            yield True
        finally:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
