"""The user's call site: `file:line` of the first frame outside torch and pyprof."""
from __future__ import annotations

import os
import sys
from json.encoder import encode_basestring_ascii as _quote
from types import CodeType

import torch

import pyprof

_getframe = sys._getframe
_CACHE_LIMIT = 65536


def _dirs(module: object) -> tuple:
    d = os.path.dirname(getattr(module, "__file__", "") or "")
    return tuple({os.path.join(d, ""), os.path.join(os.path.realpath(d), "")})


_INTERNAL = _dirs(torch) + _dirs(pyprof)
# torch.fx writes generated forward() code under these pseudo file names.
_GENERATED = ("<eval_with_key>",)

# id(code object) -> (code object, ',"site":"file:' (JSON text up to the line number), or "" for
# torch/pyprof code). Deciding once per code object keeps the walk to one dict look-up per frame.
# Keyed by id: a code object's hash is recomputed on every use from its names and constants
# (0.1-1 us for torch's _call_impl, on every frame of every walk); the entry holds the code object,
# so that its id is not reused while the entry lives.
code_prefix: dict = {}


def is_internal(filename: str) -> bool:
    """True for files of torch, pyprof and code torch generates: never the user's call site."""
    return filename.startswith(_INTERNAL) or filename.startswith(_GENERATED)


def classify(code: CodeType) -> tuple:
    """code_prefix's entry for `code`, made and stored (the first frame of it that a walk meets)."""
    name = code.co_filename
    e = (code, "" if is_internal(name) else ',"site":' + _quote(name + ":")[:-1])
    if len(code_prefix) >= _CACHE_LIMIT:
        code_prefix.clear()
    code_prefix[id(code)] = e
    return e


def site_json() -> str:
    """`,"site":"file:line"` for the first user frame, or "" when every frame is internal."""
    p, f = user_frame(3)  # this function's caller is a wrapper: internal
    return p + str(f.f_lineno) + '"' if p else ""


def user_frame(skip: int = 2) -> tuple:
    """(`,"site":"file:` prefix, frame) of the first user frame at least `skip` frames up (1: the
    caller), or ("", None) when every frame is internal. The frame, not its line: f_lineno maps
    the instruction offset to a line on every read (as long as the rest of a cached call), while
    (f_code, f_lasti) fixes both prefix and line and is two attribute reads, so the hot path keys
    on those and reads the line only to build a new marker."""
    try:
        f = _getframe(skip)
    except ValueError:  # fewer frames than that: a wrapped op run as a thread's own function
        return "", None
    while f is not None:
        code = f.f_code
        e = code_prefix.get(id(code))
        if e is None:
            e = classify(code)
        if e[1]:
            return e[1], f
        f = f.f_back
    return "", None
