"""The helper kernels of `[]` indexing's backward (Tensor.__getitem__), from its marker.

Basic indexing (ints, slices) is a chain of views whose backward nodes (SelectBackward0,
SliceBackward0), the last view's first, each zero-fill a gradient of their input's shape and copy
their dY into its region: the first step's fill is dX's, a gradient's fill (parts._gradients); the
others' fills and every copy are parts here, each of its own size, so that the launch rule gives
each kernel its own. The copy runs as a kernel where dY or the region is strided (as a memcpy
where both are contiguous: no kernel takes the part). Advanced indexing by an integer tensor
(ops/memory.py getitem) copies dY contiguous where it arrives strided before its index_put's
kernels (named stages, ops/memory.py) add it into dX.
"""
from __future__ import annotations

from .ops.memory import basic_index_steps
from .part import CONTIGUOUS, FILL, Part
from .registry import Call
from .values import Tensor


def index_grads(marker: dict) -> list[Part]:
    """The fills and copies of a `[]` call's backward (module docstring): each fill written, each
    copy's elements read and written, in the indexed tensor's dtype."""
    if marker.get("mod") != "Tensor" or marker.get("op") != "__getitem__":
        return []
    c = Call(marker)
    x, index = c.get(0, "self"), c.get(1, "index")
    size = x.itemsize if isinstance(x, Tensor) else None
    if not size or not x.numel:
        return []
    chain = basic_index_steps(x.shape, index)
    if chain is not None:
        steps = chain[1]
        return [Part(FILL, n, 0, n * size) for n, _ in steps[1:]] + [Part(CONTIGUOUS, n, 0, 2 * n * size)
                                                                     for _, n in steps]
    if isinstance(index, Tensor) and x.shape:
        rows = index.numel * (x.numel // max(x.shape[0], 1))
        return [Part(CONTIGUOUS, rows, 0, 2 * rows * size)]
    return []
