"""The hot path of op markers: a call seen before costs a key and a dict look-up, not an encoding.

In steady-state training a call site sees the same argument signature every step. The key of a
call is everything its marker text depends on - the call site (code object, by id, and instruction
offset, which fix file and line), the enclosing module, the autocast dtype, and per argument its
description: (shape, strides, dtype) for a plain tensor, (type, value) for an int, bool, str or
None, float.hex() for a float, the encoded text for anything else (encode() is exact by
definition; a tuple of scalars it met before as the same object is read from its cache here,
without calling it) - so equal keys give byte-identical markers (tests compare with
marker.build). The text object returned on a hit is the one stored, so the NVTX attribute cache
finds it by a cached hash as well.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from .marker import any_autocast, autocast_region, build, encode, tuple_texts
from .site import user_frame

# Markers kept per wrapper; a wrapper seeing more signatures than this (dynamic shapes) starts over.
CACHE_LIMIT = 512

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_KWARGS = None  # separates positional from keyword parts of a key (no part is ever None)
# Arguments whose value and exact type fix their text: the key holds (type, value) instead of the
# encoding (1, True and 1.0 are equal keys alone).
_PLAIN = frozenset({int, bool, str, type(None)})
# A float's key is its hex form: equal floats (0.0 and -0.0) may be written differently, and nan
# is not equal to itself; float.hex tells exactly the values encode() tells apart, in one C call
# (its text, "0x1.8p+0", "-0x0.0p+0", "nan", is never the JSON text encode() gives another value).
_hex = float.hex
# A tuple's text from encode()'s cache of scalar tuples by identity, read here without encode()'s
# two calls: a module's stride and padding come back as the same object call after call.
_tuple_hit = tuple_texts.get


def marker(cache: dict, prefix: str, args: Sequence[Any], kwargs: Mapping[str, Any], mod: str) -> str:
    """The op marker of a call from a wrapper (`prefix`: its op_prefix, `mod`: the module
    fragment), from `cache` when this wrapper met the same key before. Never raises."""
    site, frame = user_frame(3)  # 0: user_frame, 1: here, 2: the wrapper, 3: its caller
    autocast = autocast_region() if any_autocast() else ""  # the call saved outside autocast
    # The code object by id (site._code_prefix says why); the cache entry holds it.
    code = frame.f_code if site else None
    key: Any = [id(code), frame.f_lasti, mod, autocast] if site else [0, 0, mod, autocast]
    try:
        for a in args:
            t = type(a)
            # Strides, not is_contiguous(): the text (contiguous, channels_last or strided) is a
            # function of shape and strides; stride() raises for layouts without strides.
            key.append((a.shape, a.stride(), a.dtype) if t is _Tensor or t is _Parameter else
                       (t, a) if t in _PLAIN else _hex(a) if t is float else
                       hit[1] if t is tuple and (hit := _tuple_hit(id(a))) is not None and hit[0] is a else
                       encode(a))
        if kwargs:
            key.append(_KWARGS)
            for k, v in kwargs.items():
                key.append(k)
                t = type(v)
                key.append((v.shape, v.stride(), v.dtype) if t is _Tensor else (t, v) if t in _PLAIN else
                           _hex(v) if t is float else encode(v))
        key = tuple(key)
        hit = cache.get(key)
    except Exception:  # unhashable or unqueryable: encode this call alone
        key = hit = None
    if hit is not None:
        return hit[0]
    text = build(prefix, args, kwargs, (site + str(frame.f_lineno) + '"' if site else "") + mod + autocast)
    if key is not None:
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
        cache[key] = (text, code)
    return text
