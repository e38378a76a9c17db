"""The user's call site: `file:line` of the first frame outside torch and pyprof."""
from __future__ import annotations

import os
import sys
from json.encoder import encode_basestring_ascii as _quote
from types import CodeType

import torch

_getframe = sys._getframe
_CACHE_LIMIT = 65536


def _dirs(d: str) -> tuple:
    return tuple({os.path.join(d, ""), os.path.join(os.path.realpath(d), "")})


# pyprof's directory is found from this file's place in the package, not by importing pyprof:
# nvtx is imported by the package, never the other way round.
_INTERNAL = _dirs(os.path.dirname(torch.__file__)) + _dirs(os.path.dirname(os.path.dirname(__file__)))
# torch.fx writes generated forward() code under these pseudo file names.
_GENERATED = ("<eval_with_key>",)

# code object -> ',"site":"file:' (JSON text up to the line number), or "" for torch/pyprof code.
# Deciding once per code object keeps the walk to one dict look-up per frame.
_code_prefix: dict = {}


def _classify(code: CodeType) -> str:
    name = code.co_filename
    internal = name.startswith(_INTERNAL) or name.startswith(_GENERATED)
    p = "" if internal else ',"site":' + _quote(name + ":")[:-1]
    if len(_code_prefix) >= _CACHE_LIMIT:
        _code_prefix.clear()
    _code_prefix[code] = p
    return p


def site_json() -> str:
    """`,"site":"file:line"` for the first user frame, or "" when every frame is internal."""
    f = _getframe(2)  # this function's caller is a wrapper: internal
    while f is not None:
        code = f.f_code
        p = _code_prefix.get(code)
        if p is None:
            p = _classify(code)
        if p:
            return p + str(f.f_lineno) + '"'
        f = f.f_back
    return ""

