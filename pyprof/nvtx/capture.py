"""The capture range of a profiled region, as pyprof's workflow needs it (`pyprof.profiled()`)."""
from __future__ import annotations

import contextlib
from typing import Iterator

from . import compiled


@contextlib.contextmanager
def profiled(record_shapes: bool = True) -> Iterator[bool]:
    """Profile the body: PyTorch's own op ranges (`emit_nvtx(record_shapes=...)`) around it, and
    the CUDA profiler range (`torch.cuda.profiler.start()`/`stop()`, which `nsys profile -c
    cudaProfilerApi` captures) opened and closed on a synchronized device, so that the capture
    holds the body's kernels and nothing launched before it.

    Yields True when the range was opened; False on a machine without CUDA, where the body runs
    as is (emit_nvtx needs CUDA). Use it around a step after warm-up:

        with pyprof.profiled():
            train_step()
    """
    import torch

    if not torch.cuda.is_available():
        yield False
        return
    with torch.autograd.profiler.emit_nvtx(record_shapes=record_shapes):
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        # Inside the capture range, so the trace carries what its compiled kernels compute.
        compiled.emit()
        try:
            yield True
        finally:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
