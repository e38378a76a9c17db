"""torch.nn's defaults that are torch functions pyprof wraps, swapped for the wrappers while it is on.

A torch.nn module whose __init__ takes a torch function as a default and tests the argument by
identity (nn.TransformerEncoderLayer: `activation=F.relu`, then `activation is F.relu` to allow
its fused fast path) holds the original function, bound when torch was imported; under
pyprof.init() the name it compares with is the wrapper, so the test fails and the layer runs
another path than it does without pyprof. So the defaults of torch.nn's own modules' __init__
that are functions pyprof wrapped are the wrappers while pyprof is on, and the originals again
after restore(). Users' classes are left as they are.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Iterable, List, Optional, Tuple

# (__init__, its defaults and keyword defaults before the swap), in the order swapped.
_swapped: List[Tuple[types.FunctionType, Optional[tuple], Optional[dict]]] = []


def swap(wrappers: dict[int, Callable], classes: Iterable[type]) -> None:
    """Give each torch.nn class of `classes` whose __init__ has a default that is a wrapped
    function (`wrappers`: id(original) -> its wrapper) the wrapper instead."""
    for cls in classes:
        init = vars(cls).get("__init__")
        if not isinstance(init, types.FunctionType) or not str(getattr(cls, "__module__", "")).startswith("torch.nn"):
            continue
        d, kd = init.__defaults__, init.__kwdefaults__
        # By identity only: a default may be a tensor, whose == is no truth value.
        if not (any(id(v) in wrappers for v in d or ()) or any(id(v) in wrappers for v in (kd or {}).values())):
            continue
        _swapped.append((init, d, kd))
        if d:
            init.__defaults__ = tuple(_swapped_value(v, wrappers) for v in d)
        if kd:
            init.__kwdefaults__ = {k: _swapped_value(v, wrappers) for k, v in kd.items()}


def _swapped_value(v: Any, wrappers: dict[int, Callable]) -> Any:
    return wrappers.get(id(v), v)


def restore() -> None:
    """Put back every default swap() changed."""
    while _swapped:
        init, d, kd = _swapped.pop()
        init.__defaults__, init.__kwdefaults__ = d, kd
