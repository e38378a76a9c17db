"""The helper kernels of `[]` indexing's backward (Tensor.__getitem__), from its marker.

Basic indexing (ints, slices) is a chain of views whose backward nodes (SelectBackward0,
SliceBackward0), the last view's first, each zero-fill a gradient of their input's shape and copy
their dY into its region (an assignment `x[index] = value`, its CopySlices: _assigned_grads): the first step's fill is dX's, a gradient's fill (parts._gradients); the
others' fills and every copy are parts here, each of its own size, so that the launch rule gives
each kernel its own. The copy runs as a kernel where dY or the region is strided (as a memcpy
where both are contiguous: no kernel takes the part). Advanced indexing by an integer tensor
(ops/memory.py getitem) copies dY contiguous where it arrives strided before its index_put's
kernels (named stages, ops/memory.py) add it into dX.
"""
from __future__ import annotations

from math import prod

from .ops.memory import basic_index_steps
from .part import CONTIGUOUS, FILL, Part
from .registry import Call
from .values import Tensor


def index_grads(marker: dict) -> list[Part]:
    """The fills and copies of a `[]` call's backward (module docstring): each fill written, each
    copy's elements read and written, in the indexed tensor's dtype."""
    if marker.get("mod") != "Tensor" or marker.get("op") not in ("__getitem__", "__setitem__"):
        return []
    c = Call(marker)
    x, index = c.get(0, "self"), c.get(1, "index")
    size = x.itemsize if isinstance(x, Tensor) else None
    if not size or not x.numel:
        return []
    chain = basic_index_steps(x.shape, index)
    if marker["op"] == "__setitem__":
        return _assigned_grads(x, chain, size)
    if chain is not None:
        steps = chain[1]
        return [Part(FILL, n, 0, n * size) for n, _ in steps[1:]] + [Part(CONTIGUOUS, n, 0, 2 * n * size)
                                                                     for _, n in steps]
    if isinstance(index, Tensor) and x.shape:
        rows = index.numel * (x.numel // max(x.shape[0], 1))
        return [Part(CONTIGUOUS, rows, 0, 2 * rows * size)]
    return []


def _assigned_grads(x: Tensor, chain: tuple | None, size: int) -> list[Part]:
    """The kernels of `x[index] = value`'s backward (CopySlices around copy_'s CopyBackwards), basic
    indexing: dY copied whole into x's gradient (where it is not one memcpy), the region's dY
    cloned contiguous (value's gradient), and where x takes a gradient the region zeroed (a fill)
    and that copied into x's strided region; each of its own size, the launch picking which."""
    if chain is None:
        return []
    n = prod(chain[0])
    parts = [Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size), Part(CONTIGUOUS, n, 0, 2 * n * size)]
    if x.grad is not False:
        parts += [Part(FILL, n, 0, n * size), Part(CONTIGUOUS, n, 0, 2 * n * size)]
    return parts
