"""DDP's gradient buckets in its module marker (docs/markers.md, module `ddp`).

DDP's reducer all-reduces its gradient buckets from C++, under no pyprof marker. NCCL's own
payloads size those all-reduces, but only in exports made with `--include-blobs=true`
(docs/parse.md); `nsys profile --export sqlite` writes none. So DDP's module marker carries the
bucket layout, `"ddp":{"bucketBytes":[...]}`, each bucket's bytes in the order the reducer
launches them (bucket i only once buckets 0..i-1 are launched: Reducer::mark_bucket_ready), and
parse sizes the all-reduces that follow a DDP forward from it (pyprof/parse/ddp_buckets.py).

The layout is read from DDP's logging data (the reducer's bucket sizes in bytes) once it is
final: after the reducer rebuilt its buckets in gradient-ready order (it does so once, early in
training), or from the start where it never rebuilds (find_unused_parameters without a static
graph). Until then the marker says `"ddp":null`, and so it does for good where the layout does
not size what is sent: a comm hook (a Python hook's collectives carry markers of their own) or
mixed precision. The marker is built once per module, so the
layout appears from the DDP call after the one that found it final: the reducer rebuilds its
buckets in its second forward and logs them in its third, so the fourth has them.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch

from .emit import state as _state
from .wrappers import forget_module

_is_compiling = torch.compiler.is_compiling
_NONE = ',"ddp":null'
# DDP module -> its marker's `ddp` member, once final.
_final: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def _ddp_class() -> Optional[type]:
    if not torch.distributed.is_available():
        return None
    return torch.nn.parallel.DistributedDataParallel


def _layout(m: Any) -> Optional[str]:
    """The `ddp` member once it can no longer change, else None."""
    try:
        data = m._get_ddp_logging_data()
        if "comm_hook" in data or getattr(m, "mixed_precision", None) is not None:
            return _NONE
        if data.get("has_rebuilt_buckets") == 1 and m._has_rebuilt_buckets:
            sizes = data.get("rebuilt_bucket_sizes")
        elif m.find_unused_parameters and not m.static_graph:
            sizes = data.get("bucket_sizes")
        else:
            return None
        nbytes = [int(s) for s in sizes.split(",")]
    except Exception:  # a private API that moved, a format that changed: no layout; the call goes on
        return _NONE
    if not nbytes or any(b <= 0 for b in nbytes):
        return _NONE
    return f',"ddp":{{"bucketBytes":[{",".join(map(str, nbytes))}]}}'


def module_json(m: Any) -> str:
    """`,"ddp":...` for the module marker of a DistributedDataParallel, else ""."""
    cls = _ddp_class()
    if cls is None or not isinstance(m, cls):
        return ""
    return _final.get(m, _NONE)


def forward_wrapper(orig: Callable) -> Callable:
    """DDP.forward that, until its module's layout is final, looks after each call whether it
    now is (DDP's forward logs the rebuilt buckets); once it is, the module's marker is built
    again with it."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, *args, **kwargs)
        if _state.on and not _is_compiling() and self not in _final:
            layout = _layout(self)
            if layout is not None:
                _final[self] = layout
                forget_module(self)
        return out

    forward.__wrapped__ = orig  # type: ignore[attr-defined]
    return forward


def target() -> Optional[tuple[type, Callable]]:
    """(DistributedDataParallel, its forward) to wrap, None without torch.distributed."""
    cls = _ddp_class()
    return None if cls is None else (cls, vars(cls)["forward"])
