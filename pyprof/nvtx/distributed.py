"""torch.distributed under pyprof.init(): every collective and point-to-point call wrapped like a
torch op, its marker also saying who called and in which group (docs/markers.md, `dist`).

Which functions: those of `torch.distributed` that c10d exports (`distributed_c10d.__all__`) and
that take a `group` plus either `async_op` (every collective, whatever this torch version names
them: `all_gather_into_tensor` and 2.13's `all_gather_single` alike) or a first argument
`tensor` (send, recv, isend, irecv). Queries (`get_rank(group)`) take neither; the `*_object`
helpers take neither and call the wrapped collectives, which are then the outermost call.

A batch of point-to-point ops (`batch_isend_irecv(p2p_op_list)`) is wrapped too: its marker
describes each P2POp as `[op name, tensor, peer]` (a P2POp is no value a marker can hold) and
takes `dist` from the first op's group.

So are two C++ bindings through which DDP launches collectives from C++, whose markers say the
bytes of each NCCL call they make, in order (parse sizes those kernels from them where NCCL's
payloads are not exported: pyprof/parse/ddp_buckets.py):
`torch.distributed._broadcast_coalesced(group, tensors, buffer_size, src)`, DDP's broadcast of its
parameters (at construction) and buffers (`bucketBytes`: one NCCL broadcast per bucket), and
`torch.distributed._verify_params_across_processes(group, tensors, logger)`, DDP's check at
construction that every rank holds the same parameters (`calls`: an all-gather and a broadcast).

Each wrapper replaces the function under both its names, torch.distributed's and
distributed_c10d's: c10d checks P2POp's op by identity and calls collectives by their module names.

The wrapper is op_wrapper's, with the marker's tail extended by
`"dist":{"rank":R,"world":W,"group":NAME,"groupRank":r,"groupSize":n}`, read from the process
group at the call: prof needs the group size for bus bandwidth, parse reads the rank. A module
that owns a process group (DDP, FSDP) carries the same `dist` in its module marker (module_dist).
"""
from __future__ import annotations

import inspect
import types
import warnings
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Callable, Iterator, Optional

import torch

from ..formats import DIST_MOD
from .emit import state as _state
from .marker import autocast_json as _autocast
from .marker import build as _build
from .marker import op_prefix
from .site import site_json as _site
from .wrappers import _dress, _threads, is_wrapper, recognise

_is_compiling = torch.compiler.is_compiling
# The first parameter of a call that runs a batch of point-to-point ops (batch_isend_irecv): its
# sends and receives run as one NCCL group whose kernel starts inside this call, after the
# inner isend/irecv calls returned, so only this call's marker encloses it.
_BATCH = "p2p_op_list"
# DDP broadcasts its parameters (at construction) and buffers (each forward, BatchNorm's running
# statistics) through this C++ binding: one NCCL broadcast per bucket, under no other marker.
_COALESCED = "_broadcast_coalesced"
# DDP's construction checks the parameters' shapes across ranks through this one.
_VERIFY = "_verify_params_across_processes"


def _group_at(fn: Callable) -> tuple[Optional[int], bool]:
    """(position of the `group` parameter, whether the function is a collective or a p2p call)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None, False
    names = [p.name for p in params]
    if names[:1] == [_BATCH]:
        return None, True
    if "group" not in names or not params:
        return None, False
    wanted = "async_op" in names or names[0] == "tensor"
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return (positional.index("group") if "group" in positional else None), wanted


def targets() -> Iterator[tuple[str, Callable]]:
    """(name, function) of every torch.distributed call to wrap (the module docstring's rule)."""
    if not torch.distributed.is_available():
        return
    dist = torch.distributed
    found = []
    with warnings.catch_warnings():  # looking at deprecated aliases (reduce_op) warns
        warnings.simplefilter("ignore", FutureWarning)
        for name in getattr(dist.distributed_c10d, "__all__", ()):
            fn = vars(dist).get(name)
            if isinstance(fn, types.FunctionType) and not is_wrapper(fn) and _group_at(fn)[1]:
                found.append((name, fn))
    yield from found


def dist_json(args: tuple, kwargs: dict, group_at: Optional[int]) -> str:
    """`,"dist":{...}` for a call with these arguments; "" when no process group is up."""
    try:
        d = torch.distributed
        if not d.is_initialized():
            return ""
        group = kwargs.get("group")
        if group is None and group_at is not None and group_at < len(args):
            group = args[group_at]
        pg = group if group is not None else d.distributed_c10d._get_default_group()
        name = getattr(pg, "group_name", None)
        return (f',"dist":{{"rank":{d.get_rank()},"world":{d.get_world_size()},'
                f'"group":{_quote(name) if isinstance(name, str) else "null"},'
                f'"groupRank":{d.get_rank(group)},"groupSize":{d.get_world_size(group)}}}')
    except Exception:  # a marker never breaks the call it describes
        return ""


def module_dist(m: Any) -> str:
    """`,"dist":{...}` for the module marker of a module that owns a process group (its
    `process_group`: DistributedDataParallel, FSDP), else "": the collectives it launches from
    C++ (DDP's reducer) have no marker of their own, and parse learns their communicator's size
    from the module's. Called once per module (its marker is built once)."""
    try:
        pg = getattr(m, "process_group", None)
        d = torch.distributed
        if pg is None or not d.is_available() or not isinstance(pg, d.ProcessGroup):
            return ""
    except Exception:  # a module's own __getattr__ may raise anything
        return ""
    return dist_json((), {"group": pg}, None)


def _first_param(fn: Callable) -> Optional[str]:
    try:
        return next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return None


def _batch(args: tuple, kwargs: dict) -> tuple[tuple, dict, str]:
    """(the marker's arguments, keyword arguments, `dist`) of a batch_isend_irecv call: each
    P2POp as [op name, tensor, peer]; the first op's group."""
    ops = args[0] if args else kwargs.get(_BATCH)
    try:
        shown = [[getattr(op.op, "__name__", None), op.tensor, op.peer] for op in ops]
        group = ops[0].group if ops else None
    except Exception:  # not a list of P2POps: torch will say so; the marker just says less
        return (), {}, ""
    return (shown,), {}, dist_json((), {"group": group}, None)


def _coalesced(args: tuple, kwargs: dict) -> tuple[tuple, dict, str]:
    """(the marker's arguments, keyword arguments, `dist`) of a `_broadcast_coalesced(group,
    tensors, buffer_size, src)` call: the bytes of each flat tensor it broadcasts, in order
    (`bucketBytes`), and `src`. c10d's broadcast_coalesced groups the tensors with
    compute_bucket_assignment_by_size(tensors, [buffer_size]) and broadcasts each group
    flattened, one NCCL broadcast per group in that order; the grouping is asked of the same
    function."""
    try:
        group, tensors, size = args[:3]
        src = args[3] if len(args) > 3 else kwargs.get("rank", kwargs.get("src"))
        buckets = torch.distributed._compute_bucket_assignment_by_size(list(tensors), [size])[0]
        nbytes = [sum(tensors[i].numel() * tensors[i].element_size() for i in b) for b in buckets]
    except Exception:  # arguments torch itself will refuse, or a binding that moved
        return (), {}, ""
    return (), {"bucketBytes": nbytes, "src": src}, dist_json((), {"group": group}, None)


def _verified(args: tuple, kwargs: dict) -> tuple[tuple, dict, str]:
    """(the marker's arguments, keyword arguments, `dist`) of a `_verify_params_across_processes(
    group, tensors, logger)` call: the NCCL calls it makes, as NCCL's payloads would say them
    (`calls`: [call, bytes]). c10d's verify_params_across_processes all-gathers the number of
    tensors (one int64 from each rank), then broadcasts from rank 0 each tensor's sizes and
    strides (2 x dim() int64 a tensor)."""
    try:
        group, tensors = args[:2]
        dims = sum(t.dim() for t in tensors)
    except Exception:  # arguments torch itself will refuse
        return (), {}, ""
    calls = [["ncclAllGather", 8]] + ([["ncclBroadcast", 16 * dims]] if dims else [])
    return (), {"calls": calls}, dist_json((), {"group": group}, None)


# The C++ bindings wrapped -> what their marker says of their arguments.
_BINDINGS = {_COALESCED: _coalesced, _VERIFY: _verified}


def binding_targets() -> Iterator[tuple[str, Callable]]:
    """(name, function) of the torch.distributed C++ bindings DDP launches collectives through
    (the module docstring), those this torch has."""
    if not torch.distributed.is_available() or not hasattr(torch.distributed, "_compute_bucket_assignment_by_size"):
        return
    for name in _BINDINGS:
        fn = getattr(torch.distributed, name, None)
        if callable(fn) and not is_wrapper(fn):
            yield name, fn


def collective_wrapper(orig: Callable, name: str) -> Callable:
    """A wrapper of torch.distributed.`name` that pushes an op marker with `dist` around each
    outermost call (nested ones, as op_wrapper, only with pyprof.init(nested=True))."""
    prefix = op_prefix(DIST_MOD, name)
    group_at = _group_at(orig)[0]
    describe = _batch if _first_param(orig) == _BATCH else _BINDINGS.get(name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _state.on or _is_compiling():
            return orig(*args, **kwargs)
        tl = _threads.s
        depth = tl.depth
        if depth and not _state.nested:
            return orig(*args, **kwargs)
        tl.depth = depth + 1
        try:
            if describe is None:
                shown, named, dist = args, kwargs, dist_json(args, kwargs, group_at)
            else:
                shown, named, dist = describe(args, kwargs)
            _state.push(_build(prefix, shown, named, _site() + tl.mod + _autocast() + dist))
            try:
                return orig(*args, **kwargs)
            finally:
                _state.pop()
        finally:
            tl.depth = depth

    _dress(wrapper, orig, DIST_MOD, name)
    return wrapper


recognise(collective_wrapper(len, "x"))
