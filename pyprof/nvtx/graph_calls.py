"""A range around every call of a compiled graph while `pyprof.profiled()` captures.

parse cuts a compiled program's kernels into runs of its graphs by the range PyTorch opens
around each compiled-graph call (`## Call CompiledFxGraph <key> ##`, a `record_function`), and
then joins each run's kernels to the graph's call sites (pyprof/parse/compiled_kernels.py). PyTorch
writes that range to NVTX only under `emit_nvtx`, which `profiled()` no longer turns on by
default: without it a trace holds the kernels and the table but not where one run ends and the
next begins. So while the capture is open and `emit_nvtx` is off, the graph's call opens the same
range itself (default domain), numbered: every graph is called with the key None when Inductor's
FX-graph cache is off (pyprof.init() turns it off), and runs of different graphs back to back on
one thread must not read as one.

Inside the call PyTorch's NVTX op ranges are on (what `emit_nvtx` writes): the library calls of
generated code (`extern_kernels.mm`, `aten.convolution_backward`, cuDNN attention's backward)
launch a varying number of kernels, and when several such calls run back to back only their op
ranges tell which kernel belongs to which call. Where the table cannot price a call alone, they
carry the inputs' shapes (`record_shapes=True`, inductor.sized_calls): in a graph compiled for
CUDA graphs, what no table entry covers (a CUDA graph tree's copies of the inputs into the
graph's static buffers, `aten::_foreach_copy_`, and its setting of the RNG's seed and offset,
`aten::fill_`, launched outside the replayed graph); in a graph of dynamic shapes whose library
calls' sizes vary from call to call (a MoE expert's rows), their sizes, which the table holds
only as compiled for. The other graphs' calls go without: shapes cost time in every op range.
Turned on per call, on the calling thread (the backward's graph runs on the autograd thread),
without emit_nvtx's device synchronizations, which would change the step being measured; the
eager rest of the step keeps the default mode's cost.

The range names the graph's table (` graph 12`, pyprof.nvtx.inductor.graph_id) where pyprof saw
the graph generated: graphs number their kernels from 0, and two graphs can run kernels of the
same names (casts before a library kernel), which parse could not tell apart.

The range also names the module whose code called the graph (` in blocks.0`), when that is not
the compiled module itself: Dynamo records a node's module path relative to the frame it compiled,
and after a graph break it compiles the submodules' calls as frames of their own (one graph for
`blocks.0` and `blocks.1` alike: only the caller tells them apart), so parse prefixes their
paths with it.

Outside `profiled()` nothing is wrapped: no cost to steps that are not captured.
"""
from __future__ import annotations

import contextlib
import itertools
import os
import sys
from typing import Any, Iterator, Optional

import torch.autograd as autograd
from torch.fx import GraphModule
from torch.nn import Module

from .inductor import graph_id, sized_calls, trains
from .leaf_grads import LeafHooks
from .node_ranges import enable
from .wrappers import module_name

_MODULE = "torch._inductor.output_code"
# parse reads the prefix (parse/compiled_kernels.py CALL_RANGE); the run number is opaque to it.
TEXT = "## Call CompiledFxGraph {key} ## run {n}"
# parse reads what follows as the id of the graph's table (pyprof.nvtx.inductor.graph_id).
GRAPH = " graph {gid}"
# parse reads what follows as the calling module's path (parse/compiled_kernels.py CALLER).
CALLER = " in {path}"
# torch.compile's wrapper keeps the module it compiled as this child: paths are relative to it.
_WRAPPED = "_orig_mod"


@contextlib.contextmanager
def ranges() -> Iterator[bool]:
    """Wrap `CompiledFxGraph.__call__` for the body; yields whether compiled graphs can run in it.
    A program that has not imported Inductor's compiled-graph module has no compiled graph to
    wrap: nothing is imported for it."""
    mod = sys.modules.get(_MODULE)
    cls = getattr(mod, "CompiledFxGraph", None)
    original = getattr(cls, "__call__", None)  # noqa: B004 (the method to wrap, not a callable check)
    if original is None:
        yield False
        return
    import torch
    import torch.cuda.nvtx as nvtx  # PyTorch's own ranges go there (default domain)

    counter = itertools.count()
    internal = (os.path.dirname(torch.__file__), "<")  # torch's files and generated code

    def call(self: Any, inputs: Any) -> Any:
        text = TEXT.format(key=getattr(self, "_fx_graph_cache_key", None), n=next(counter))
        gid = graph_id(self)
        if gid is not None:
            text += GRAPH.format(gid=gid)
        owner = caller(sys._getframe(1), internal)
        path = caller_path(owner)
        nvtx.range_push(text + CALLER.format(path=path) if path else text)
        if gid is not None and trains(gid):
            leaves.take(self, inputs, owner, path)
        # Not a context manager: this runs on every graph call, and a generator-based one adds
        # frames of its own to each.
        ops = ops_on(gid is not None and sized_calls(gid))
        try:
            return original(self, inputs)
        finally:
            if ops:
                autograd._disable_profiler()
            nvtx.range_pop()

    leaves = LeafHooks()
    cls.__call__ = call
    try:
        yield True
    finally:
        cls.__call__ = original
        leaves.remove()


def ops_on(shapes: bool = False) -> bool:
    """Turn PyTorch's NVTX op ranges on for this thread (emit_nvtx's profiler state, with the
    inputs' shapes where `shapes`, no synchronization); True when it did, and the caller turns
    them off again (`torch.autograd._disable_profiler()`). False, changing nothing, when a
    profiler is on here already (the user's, or emit_nvtx) or PyTorch cannot turn this one on (a
    build without CUDA)."""
    if autograd._profiler_enabled():
        return False
    try:
        enable(nodes_only=False, shapes=shapes)
    except (RuntimeError, AssertionError):
        return False
    return True


def caller(frame: Any, internal: tuple) -> Optional[Module]:
    """The module whose code called a compiled graph: the `self` of the first frame up from
    `frame` that belongs to an nn.Module, looked up only through torch's own frames (the runtime
    wrappers between the compiled frame and the graph). None when that frame is not a module's."""
    while frame is not None:
        code = frame.f_code
        # f_locals copies every local of the frame: read it only where `self` is the first argument.
        if code.co_argcount and code.co_varnames[0] == "self":
            owner = frame.f_locals.get("self")  # None where the method deleted it
            if isinstance(owner, Module) and not isinstance(owner, GraphModule):
                return owner
        if not code.co_filename.startswith(internal):
            return None
        frame = frame.f_back
    return None


def caller_path(owner: Optional[Module]) -> Optional[str]:
    """The path of module `owner` relative to the module torch.compile wrapped; None when it is
    not in the tree being called."""
    name = None if owner is None else module_name(owner)
    return None if name is None else ".".join(p for p in name.split(".") if p and p != _WRAPPED)
