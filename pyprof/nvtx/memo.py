"""The hot path of op markers: a call seen before costs a key and a dict look-up, not an encoding.

In steady-state training a call site sees the same argument signature every step. The key of a
call is everything its marker text depends on - the call site (code object, by id, and instruction
offset, which fix file and line), the enclosing module, the autocast dtype, and per argument its
description: (shape, strides, dtype, requires_grad) for a plain tensor, (type, value) for an int, bool, str or
None, a float itself unless it is 0 or nan (float.hex() for those), the encoded text for anything else (encode() is exact by
definition; a tuple of scalars it met before as the same object is read from its cache here,
without calling it) - so equal keys give byte-identical markers (tests compare with
marker.build). The text object returned on a hit is the one stored, so the NVTX attribute cache
finds it by a cached hash as well.

The hit path - key and look-up - runs in C where the optional extension pyprof/nvtx/_hot.c was
built (`lookup` is then its function), else in Python (`_lookup`). On a miss either hands back the
key it made, and marker(), the miss path, stores the text under it: the C key is bytes (one object
per call, hashed over a flat buffer), equal for two calls only where their marker texts are equal
(the tests check it tells apart the same calls as the Python key).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from .marker import any_autocast, autocast_region, budget, build, encode, tuple_texts
from .site import classify, code_prefix, user_frame

# Markers kept per wrapper; a wrapper seeing more signatures than this (dynamic shapes) starts over.
# Their bytes count against marker.CACHE_BYTES with the encoder's caches.
CACHE_LIMIT = 512


def new_cache() -> dict:
    """A wrapper's cache of markers (call key -> (text, code object)), bounded by CACHE_LIMIT
    entries and marker.CACHE_BYTES."""
    return budget.cache(CACHE_LIMIT)

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_KWARGS = None  # separates positional from keyword parts of a key (no part is ever None)
# Arguments whose value and exact type fix their text: the key holds (type, value) instead of the
# encoding (1, True and 1.0 are equal keys alone).
_PLAIN = frozenset({int, bool, str, type(None)})
# A float is its own key but for the two cases where equality is not identity of text: 0.0 and
# -0.0 are equal, nan is not equal to itself. Those are keyed by float.hex, which tells exactly the
# values encode() tells apart (its text, "0x0.0p+0", "-0x0.0p+0", "nan", is never the JSON text
# encode() gives another value, and no key part of another kind equals a float).
_hex = float.hex
# A tuple's text from encode()'s cache of scalar tuples by identity, read here without encode()'s
# two calls: a module's stride and padding come back as the same object call after call.
_tuple_hit = tuple_texts.get


def _key(frame: Any, args: Sequence[Any], kwargs: Mapping[str, Any], mod: str, autocast: str) -> tuple:
    # The code object by id (site.code_prefix says why); a cache entry holds it.
    key = [id(frame.f_code), frame.f_lasti, mod, autocast] if frame is not None else [0, 0, mod, autocast]
    # One expression written out for positional and keyword arguments: a call per argument would
    # cost the Python hit path about 0.1 us each.
    for a in args:
        t = type(a)
        # Strides, not is_contiguous(): the text (contiguous, channels_last or strided) is a
        # function of shape and strides; stride() raises for layouts without strides.
        key.append((a.shape, a.stride(), a.dtype, a.requires_grad) if t is _Tensor or t is _Parameter else
                   (t, a) if t in _PLAIN else (a if a and a == a else _hex(a)) if t is float else
                   hit[1] if t is tuple and (hit := _tuple_hit(id(a))) is not None and hit[0] is a else
                   encode(a))
    if kwargs:
        key.append(_KWARGS)
        for k, v in kwargs.items():
            key.append(k)
            t = type(v)
            key.append((v.shape, v.stride(), v.dtype, v.requires_grad) if t is _Tensor or t is _Parameter else
                       (t, v) if t in _PLAIN else (v if v and v == v else _hex(v)) if t is float else
                       hit[1] if t is tuple and (hit := _tuple_hit(id(v))) is not None and hit[0] is v else
                       encode(v))
    return tuple(key)


def key(args: Sequence[Any], kwargs: Mapping[str, Any], mod: str) -> tuple:
    """The cache key of a call made by this function's caller's caller (a wrapper's caller):
    the tuple whose equality pyprof.nvtx._hot.key (bytes) follows."""
    frame = user_frame(3)[1]  # 0: user_frame, 1: here, 2: the wrapper, 3: its caller
    return _key(frame, args, kwargs, mod, autocast_region() if any_autocast() else "")


def _lookup(cache: dict, args: Sequence[Any], kwargs: Mapping[str, Any], mod: str) -> Any:
    """For this call of the caller's caller: the marker text cached in `cache`; on a miss the
    call's key (marker() stores the text under it); None for a call whose key cannot be made
    (marker() then encodes it alone). What pyprof.nvtx._hot.lookup returns, with the Python key."""
    frame = user_frame(3)[1]
    try:
        key = _key(frame, args, kwargs, mod, autocast_region() if any_autocast() else "")
        hit = cache.get(key)
    except Exception:
        return None
    return hit[0] if hit is not None else key


try:
    from . import _hot
except ImportError:  # not built (no C compiler at install): the same look-up in Python
    _hot = None
    lookup = _lookup
else:
    lookup = _hot.lookup
    _hot.setup(code_prefix, classify, tuple_texts, encode, any_autocast, autocast_region, _Tensor, _Parameter,
               torch.dtype)


def marker(cache: dict, prefix: str, args: Sequence[Any], kwargs: Mapping[str, Any], mod: str, key: Any) -> str:
    """The op marker of a call from a wrapper (`prefix`: its op_prefix, `mod`: the module
    fragment) that lookup() missed, built and stored in `cache` under `key`, what lookup()
    returned (None: not stored). Never raises."""
    site, frame = user_frame(3)  # 0: user_frame, 1: here, 2: the wrapper, 3: its caller
    autocast = autocast_region() if any_autocast() else ""
    text = build(prefix, args, kwargs, (site + str(frame.f_lineno) + '"' if site else "") + mod + autocast)
    if key is not None:
        # The code object is held by the entry: the key names it by address. A key is bytes (C)
        # or a tuple of parts (Python), which hold the arguments' texts or values: counted
        # generously, about the text's size again and a hundred bytes a part.
        size = len(text) + (len(key) if type(key) is bytes else len(text) + 96 * len(key)) + 300
        cache.put(key, (text, frame.f_code if frame is not None else None), size)
    return text
