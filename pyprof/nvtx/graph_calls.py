"""A range around every call of a compiled graph while `pyprof.profiled()` captures.

parse cuts a compiled program's kernels into runs of its graphs by the range PyTorch opens
around each compiled-graph call (`## Call CompiledFxGraph <key> ##`, a `record_function`), and
then joins each run's kernels to the graph's call sites (pyprof/parse/compiled.py). PyTorch
writes that range to NVTX only under `emit_nvtx`, which `profiled()` no longer turns on by
default: without it a trace holds the kernels and the table but not where one run ends and the
next begins. So while the capture is open and `emit_nvtx` is off, the graph's call opens the same
range itself (default domain), numbered: every graph is called with the key None when Inductor's
FX-graph cache is off (pyprof.init() turns it off), and runs of different graphs back to back on
one thread must not read as one.

Outside `profiled()` nothing is wrapped: no cost to steps that are not captured.
"""
from __future__ import annotations

import contextlib
import itertools
import sys
from typing import Any, Iterator

_MODULE = "torch._inductor.output_code"
# parse reads the prefix (parse/compiled.py CALL_RANGE); the run number is opaque to it.
TEXT = "## Call CompiledFxGraph {key} ## run {n}"


@contextlib.contextmanager
def ranges() -> Iterator[None]:
    """Wrap `CompiledFxGraph.__call__` for the body. A program that has not imported Inductor
    has no compiled graph to wrap: nothing is imported for it."""
    mod = sys.modules.get(_MODULE)
    cls = getattr(mod, "CompiledFxGraph", None)
    original = getattr(cls, "__call__", None)
    if original is None:
        yield
        return
    import torch.cuda.nvtx as nvtx  # PyTorch's own ranges go there (default domain)

    counter = itertools.count()

    def call(self: Any, inputs: Any) -> Any:
        nvtx.range_push(TEXT.format(key=getattr(self, "_fx_graph_cache_key", None), n=next(counter)))
        try:
            return original(self, inputs)
        finally:
            nvtx.range_pop()

    cls.__call__ = call
    try:
        yield
    finally:
        cls.__call__ = original
