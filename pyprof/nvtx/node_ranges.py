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
(pyprof.nvtx.profiled.attribution says why). A profiler the user starts inside the block on that
thread (torch.profiler, emit_nvtx) gets it: the node ranges step aside and the hooks come back.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from typing import Any, Callable, Iterator

import torch.autograd as autograd

from .emit import state

# Thread ident -> the function that turns off the node ranges this module turned on there.
_owners: dict = {}
# torch.autograd.profiler's names of PyTorch's profiler switches that torch.profiler and emit_nvtx
# call to start (bound there at import), and what they held before hand_over() replaced them.
_STARTS = ("_prepare_profiler", "_enable_profiler")
_originals: dict = {}
_lock = threading.Lock()


def enable(nodes_only: bool = True, shapes: bool = False) -> None:
    """Turn PyTorch's NVTX profiler on for this thread, without synchronization: its autograd node
    ranges alone (`nodes_only`), else every op range as emit_nvtx's, with the inputs' shapes
    where `shapes` (RuntimeError or AssertionError when PyTorch cannot)."""
    config, nodes = _settings(shapes)
    if nodes_only:
        autograd._enable_profiler(config, set(), nodes)
    else:
        autograd._enable_profiler(config, set())


@functools.lru_cache(maxsize=None)
def _settings(shapes: bool) -> tuple:
    """The profiler's configuration (input shapes in the ranges or not) and the node ranges'
    scopes, built once: enable() runs around every compiled-graph call (round 13 of
    benchmarks/results/overhead_h100_modes.txt times the switch)."""
    from torch._C._profiler import RecordScope, _ExperimentalConfig

    config = autograd.ProfilerConfig(autograd.ProfilerState.NVTX, shapes, False, False, False, False,
                                     _ExperimentalConfig())
    return config, {RecordScope.BACKWARD_FUNCTION}


def _hand_over(original: Callable) -> Callable:
    """`original` (a profiler start) preceded by turning this thread's node ranges off: PyTorch
    keeps one profiler per thread, and refusing the user's (torch.profiler inside profiled())
    would also leave its Kineto state prepared, failing the next one. The hooks take over."""

    def hand_over(*args: Any, **kwargs: Any) -> Any:
        release = _owners.get(threading.get_ident())
        if release is not None:
            release()
        return original(*args, **kwargs)

    hand_over.__wrapped__ = original  # type: ignore[attr-defined]
    return hand_over


@contextlib.contextmanager
def node_ranges() -> Iterator[bool]:
    """PyTorch's node ranges instead of pyprof's node hooks for the body. Yields whether they are
    on (False: a profiler was on already, or none can be; the hooks then stay). A profiler the
    body starts on this thread (torch.profiler, emit_nvtx) takes over from them: the hooks are
    back from there on."""
    import torch.autograd.profiler as profiler

    if autograd._profiler_enabled():
        yield False
        return
    try:
        enable()
    except (RuntimeError, AssertionError):
        yield False
        return
    ident = threading.get_ident()

    def release() -> None:
        with _lock:
            if _owners.pop(ident, None) is None:
                return
            state.hooks = not _owners
        autograd._disable_profiler()

    with _lock:
        _owners[ident] = release
        state.hooks = False
        if not _originals:
            for name in _STARTS:
                _originals[name] = getattr(profiler, name)
                setattr(profiler, name, _hand_over(_originals[name]))
    try:
        yield True
    finally:
        release()
        with _lock:
            if not _owners:
                for name, original in _originals.items():
                    setattr(profiler, name, original)
                _originals.clear()


def graphing(fn: Callable) -> Callable:
    """`fn` (torch.autograd.grad or backward) with PyTorch's op ranges, shapes recorded, in place
    of the node ranges while a call with create_graph=True runs on a thread whose node ranges
    this module turned on. The ops such a backward runs make autograd nodes of their own (a
    gradient penalty's ConvolutionBackwardBackward0), whose ranges, when the graph's backward
    runs them, carry the seq of the op that made them but no marker and no shapes: that op's
    range of the same seq, with its shapes, is what prices them (pyprof/prof/pricing/ops/
    double_backward.py). The switch costs two profiler toggles per such call; every other call
    goes straight through."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        ident = threading.get_ident()
        if ident not in _owners or not _creates_graph(signature, args, kwargs):
            return fn(*args, **kwargs)
        autograd._disable_profiler()
        try:
            enable(nodes_only=False, shapes=True)
        except (RuntimeError, AssertionError):  # as it did at first, the node ranges come back
            enable()
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            autograd._disable_profiler()
            enable()

    return call


def _creates_graph(signature: inspect.Signature, args: tuple, kwargs: dict) -> bool:
    """Whether a call of a function of `signature` passes create_graph=True."""
    try:
        return bool(signature.bind(*args, **kwargs).arguments.get("create_graph"))
    except TypeError:
        return False
