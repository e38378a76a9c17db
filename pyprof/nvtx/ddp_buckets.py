"""DDP's gradient buckets in its module marker (docs/markers.md, module `ddp`), and a marker
around the reducer's rebuild of them.

DDP's reducer all-reduces its gradient buckets from C++, under no pyprof marker. NCCL's own
payloads size those all-reduces, but only in exports made with `--include-blobs=true`
(docs/parse.md); `nsys profile --export sqlite` writes none. So DDP's module marker carries the
layout of the buckets its backward will all-reduce, each bucket's bytes in the order the reducer
launches them (bucket i only once buckets 0..i-1 are launched: Reducer::mark_bucket_ready), and
parse sizes the all-reduces that follow a DDP forward from it (pyprof/parse/ddp_buckets.py).

The layout comes from DDP's logging data (the reducer's bucket sizes in bytes). A reducer starts
with the buckets DDP assigned at construction (`bucket_sizes`: one bucket per dtype unless
find_unused_parameters) and, unless it looks for unused parameters without a static graph,
rebuilds them once in gradient-ready order, at the start of the first forward after a backward
(Reducer::rebuild_buckets, under `_rebuild_buckets`, called from DDP's `_pre_forward`); its
logging data gives the new layout from the forward after that one. So the marker's member says,
per DDP module (`id`, its number in this process):

- `{"id":n,"initialBytes":[...]}`: the reducer has not rebuilt: its buckets are the first ones,
  until the call in which it rebuilds (the one whose `_rebuild_buckets` marker holds the rebuild's
  broadcasts);
- `{"id":n}`: it has rebuilt; the new layout is not known yet (a later call of `n` gives it);
- `{"id":n,"bucketBytes":[...]}`: the layout for good;
- `null`: no layout sizes what is sent (a comm hook: a Python hook's collectives carry markers
  of their own; mixed precision; DDP's private API not as expected).

DDP's forward is wrapped to look after each call, until the layout is final, whether the member
changed, and to build the module's marker again when it did. The look runs whether or not
pyprof is recording, so that a marker never says a state older than the reducer's. A comm hook
makes it `null` from the next call, whenever the hook comes: the registrations are wrapped where
every hook passes, torch.distributed's `_register_comm_hook` and `_register_builtin_comm_hook`,
which DDP's own `register_comm_hook` calls and a user may call on the reducer directly.

The rebuild broadcasts, from C++ (Reducer::sync_bucket_indices), rank 0's new bucket assignment:
its parameter indices and the number of buckets (total_size + 1 int32), then each bucket's
parameter count (one int32 per bucket). The rebuild's marker, pushed while the reducer may still
rebuild, says `{"ddp":n,"params":P}`: parse sizes the first broadcast 4 * (P + 1) and the second
4 x the number of buckets of `n`'s final layout.
"""
from __future__ import annotations

import itertools
import weakref
from typing import Any, Callable, Optional

import torch

from ..formats import DIST_MOD
from .emit import state as _state
from .marker import build as _build
from .marker import op_prefix
from .wrappers import _threads, forget_module

_is_compiling = torch.compiler.is_compiling
_NONE = ',"ddp":null'
_REBUILD = "_rebuild_buckets"
_HOOKS = ("_register_comm_hook", "_register_builtin_comm_hook")  # torch.distributed's, (reducer, ...)
# DDP module -> its marker's `ddp` member: the one it says now, and the one it says for good.
_now: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
_final: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# DDP module -> its number in this process, in the order pyprof first described them.
_ids: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
_next_id = itertools.count(1)
# Reducer that may still rebuild its buckets -> its rebuild marker's text.
_pending: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
# Reducers a comm hook was registered on while pyprof was installed.
_hooked: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _ddp_class() -> Optional[type]:
    if not torch.distributed.is_available():
        return None
    return torch.nn.parallel.DistributedDataParallel


def _bytes(sizes: Any) -> Optional[str]:
    """DDP's logged bucket sizes ("6297600, 2109440") as a JSON list, None if any is no positive
    integer."""
    nbytes = [int(s) for s in str(sizes).split(",")]
    return f'[{",".join(map(str, nbytes))}]' if nbytes and all(b > 0 for b in nbytes) else None


def _member(m: Any) -> tuple[str, bool]:
    """(the marker's `ddp` member now, whether it is final)."""
    try:
        data = m._get_ddp_logging_data()
        _pending.pop(m.reducer, None)
        if m.reducer in _hooked or "comm_hook" in data or getattr(m, "mixed_precision", None) is not None:
            return _NONE, True
        n = _ids.get(m)
        if n is None:
            n = _ids[m] = next(_next_id)
        if data.get("has_rebuilt_buckets") == 1 and m._has_rebuilt_buckets:
            said = _bytes(data.get("rebuilt_bucket_sizes"))
        elif m.find_unused_parameters and not m.static_graph:  # a reducer that never rebuilds
            said = _bytes(data.get("bucket_sizes"))
        elif m._has_rebuilt_buckets:
            return f',"ddp":{{"id":{n}}}', False
        else:
            first = _bytes(data.get("bucket_sizes"))
            if first is None:
                return _NONE, True
            _pending[m.reducer] = _rebuild_marker(m, n, int(data["num_parameter_tensors"]))
            return f',"ddp":{{"id":{n},"initialBytes":{first}}}', False
    except Exception:  # a private API that moved, a format that changed: no layout; the call goes on
        return _NONE, True
    return (_NONE, True) if said is None else (f',"ddp":{{"id":{n},"bucketBytes":{said}}}', True)


def _rebuild_marker(m: Any, n: int, params: int) -> str:
    from .distributed import module_dist  # it imports wrappers, as this module does

    return _build(op_prefix(DIST_MOD, _REBUILD), (), {"ddp": n, "params": params}, module_dist(m))


def module_json(m: Any) -> str:
    """`,"ddp":...` for the module marker of a DistributedDataParallel, else ""."""
    cls = _ddp_class()
    if cls is None or not isinstance(m, cls):
        return ""
    said = _final.get(m)
    if said is None:
        said, final = _member(m)
        (_final if final else _now)[m] = said
    return said


def forward_wrapper(orig: Callable) -> Callable:
    """DDP.forward that, until its module's layout is final, looks after each call whether the
    module marker's `ddp` member changed; when it did, the module's marker is built again."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        if self not in _final and not _is_compiling():
            said, final = _member(self)
            if final:
                _final[self] = said
            if said != _now.get(self):
                _now[self] = said
                forget_module(self)
        return out

    forward.__wrapped__ = orig  # type: ignore[attr-defined]
    return forward


def hook_wrapper(orig: Callable) -> Callable:
    """torch.distributed's registration of a comm hook on a reducer, which makes the marker of the
    DDP module that owns it say no layout from the next call on: the hook decides what is sent,
    at whatever step it is registered."""

    def register(reducer: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(reducer, *args, **kwargs)
        _hooked.add(reducer)  # for an owner not described yet
        _pending.pop(reducer, None)
        for m in [m for m in list(_ids) if getattr(m, "reducer", None) is reducer]:
            _final[m] = _NONE
            forget_module(m)
        return out

    register.__wrapped__ = orig  # type: ignore[attr-defined]
    return register


def rebuild_wrapper(orig: Callable) -> Callable:
    """Reducer._rebuild_buckets with a marker around it while its reducer may still rebuild:
    the broadcasts it launches when it does have no marker of their own."""

    def _rebuild_buckets(self: Any) -> Any:
        said = _pending.get(self)
        if said is None or not _state.on or _is_compiling():
            return orig(self)
        tl = _threads.s
        depth = tl.depth
        tl.depth = depth + 1
        _state.push(said)
        try:
            done = orig(self)
        finally:
            _state.pop()
            tl.depth = depth
        if done:
            _pending.pop(self, None)
        return done

    _rebuild_buckets.__wrapped__ = orig  # type: ignore[attr-defined]
    return _rebuild_buckets


def targets() -> list[tuple[type, str, Callable]]:
    """(owner, name, wrapper) of each callable to replace: DistributedDataParallel's forward,
    torch.distributed's comm hook registrations, the reducer's `_rebuild_buckets`; none without
    torch.distributed."""
    cls = _ddp_class()
    if cls is None:
        return []
    found: list = [(cls, "forward", forward_wrapper(vars(cls)["forward"]))]
    found += [(torch.distributed, name, hook_wrapper(getattr(torch.distributed, name))) for name in _HOOKS
              if callable(getattr(torch.distributed, name, None))]
    reducer = getattr(torch.distributed, "Reducer", None)
    rebuild = vars(reducer).get(_REBUILD) if isinstance(reducer, type) else None
    return found + ([(reducer, _REBUILD, rebuild_wrapper(rebuild))] if rebuild is not None else [])
