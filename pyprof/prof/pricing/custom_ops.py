"""Markers of other libraries' custom ops (`torch.ops.<namespace>.<op>`, pyprof/nvtx/custom_ops.py)
priced by the op's formula at the aten level (`<namespace>::<op>`, registered once: the same
definition prices the op from PyTorch's ranges): the marker's arguments as a range's sizes (a
tensor its shape, anything else `[]`), in the dtype of its first floating-point tensor. An op with
a marker-level formula of its own (one that reads scalars) takes that first."""
from __future__ import annotations

from typing import Callable

from .op_ranges import AtenCall
from .registry import Call, Cost, lookup_aten
from .values import FLOATING, Tensor

PREFIX = "torch.ops."


def custom_op_formula(mod: str | None, op: str | None) -> Callable[[Call], Cost | None] | None:
    """The marker formula of custom op `mod`.`op` adapted from its aten-level one; None for any
    other marker or an op without one."""
    if not isinstance(mod, str) or not mod.startswith(PREFIX) or not op:
        return None
    name = f"{mod[len(PREFIX):]}::{op}"
    aten = lookup_aten(name)
    if aten is None:
        return None

    def formula(c: Call) -> Cost | None:
        sizes = [list(a.shape) if isinstance(a, Tensor) else [] for a in c.args]
        dtype = next((a.dtype for a in c.args if isinstance(a, Tensor) and a.dtype in FLOATING), None)
        return aten(AtenCall(name, sizes, dtype, None))
    return formula
