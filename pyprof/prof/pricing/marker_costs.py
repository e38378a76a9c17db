"""The cost of a pyprof op marker: its op's formula (the op table) applied to the marker's
arguments, moved into the autocast dtype where autocast ran a matrix op in 16 bits, or the warning
that says why there is none; kept by the marker's content, since a training step repeats its
markers. analysis.Analyzer asks it for the marker behind each record.
"""
from __future__ import annotations

from dataclasses import replace

from .custom_ops import custom_op_formula
from .ops import lookup
from .registry import FORMULA_ERRORS, MATRIX_KINDS, MMA_KINDS, Call, Unknowable, kept, retype
from .values import ITEMSIZE

_COST_CACHE = 8192  # distinct markers kept; a training step has far fewer, so memory stays flat

try:  # optional (pyprof-nvtx[fast]), as for reading records: half repr's time for a marker's key
    from orjson import dumps as _json_bytes
except ImportError:
    _json_bytes = None


def _marker_key(marker: dict) -> object:
    """An exact key of a marker's contents (equal markers have equal costs): its JSON bytes, else
    (no orjson, or an integer beyond 64 bits, which json's reader keeps) its repr."""
    if _json_bytes is not None:
        try:
            return _json_bytes(marker)
        except TypeError:
            pass
    return repr(marker)


def _scaled(nbytes: int | None, dtype: str) -> int | None:
    """fp32 bytes counted again in `dtype`."""
    return None if nbytes is None else nbytes * ITEMSIZE[dtype] // 4


def _compute(marker: dict) -> tuple:
    """(cost, None) or (None, (warning kind, op name))."""
    mod, op = marker.get("mod"), marker.get("op")
    formula = lookup(mod, op) or custom_op_formula(mod, op)
    if formula is None:
        return None, ("unknown op", f"{mod}.{op}")
    try:
        cost = formula(Call(marker))
    except Unknowable as why:
        return None, (str(why), f"{mod}.{op}")
    except FORMULA_ERRORS:
        cost = None
    autocast = marker.get("autocast")
    if cost is not None and cost.kind in MATRIX_KINDS and cost.dtype == "float32" and autocast in ITEMSIZE:
        # Under autocast the arguments are fp32 but the matrix kernel runs in `autocast`; a cuDNN
        # RNN in fp16 whatever autocast's dtype (ATen's AutocastRNN.cpp casts its inputs and
        # weights to half: gru_packed_bf16's kernels, under bfloat16 autocast, are __half ones).
        dtype = autocast if cost.kind in MMA_KINDS else "float16"
        cost = replace(cost, dtype=dtype, params=retype(cost.params, dtype))
        if cost.kind not in MMA_KINDS:  # an RNN: every tensor it reads or writes is cast
            cost = replace(cost, bytes=_scaled(cost.bytes, dtype), bwd_bytes=_scaled(cost.bwd_bytes, dtype))
    return cost, None if cost is not None else ("op arguments not understood", f"{mod}.{op}")


class MarkerCosts:
    """The costs of the op markers seen so far, by content (at most _COST_CACHE of them)."""

    __slots__ = ("_costs",)

    def __init__(self) -> None:
        self._costs: dict = {}

    def of(self, marker: dict) -> tuple:
        """(cost, None) or (None, (warning kind, op name)) of an op marker."""
        key = _marker_key(marker)
        hit = self._costs.get(key)
        if hit is None:
            hit = kept(self._costs, key, _compute(marker), _COST_CACHE)
        return hit
