"""The helper kernels of a layer norm's or RMS norm's call: PyTorch's CUDA kernels for both
(layer_norm_kernel.cu) read rows in place, so the call first makes a strided input contiguous
(`X.expect_contiguous()`: a copy in one dtype, read and written), and its backward does the same
to the saved input and to the output gradient, which arrives strided where the output was
transposed or expanded after the norm (MultiheadAttention's batch-first transpose, a sum's
gradient). Whether the input is strided is in its marker (its `strides`); the gradient's is not,
so its copy is offered always and costs nothing where no kernel takes it (parts.CallParts).

The parts are put together with the other kinds' in parts.forward_parts and parts.backward_parts.
"""
from __future__ import annotations

from .part import CONTIGUOUS, Part
from .registry import Call, Cost
from .values import ITEMSIZE

# The row norms, by their markers' names, whose CUDA kernels need contiguous rows.
_ROW_NORMS = frozenset(("torch.nn.functional.layer_norm", "torch.layer_norm",
                        "torch.nn.functional.rms_norm", "torch.rms_norm"))


def row_norm_copies(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """A row norm's contiguous copies, in the dtype the norm runs in: forward, the input's when
    its marker gives strides; backward, that one again and the output gradient's (of the input's
    shape). Autocast runs layer_norm in float32 (a 16-bit input cast up first, strides kept); an
    RMS norm of an input in autocast's dtype gets none, as whether autocast casts it is not known."""
    name = f"{marker.get('mod')}.{marker.get('op')}"
    if cost is None or name not in _ROW_NORMS:
        return []
    c = Call(marker)
    x = c.tensor(0, "input")
    if x is None or not x.numel:
        return []
    cast_up = marker.get("autocast") == x.dtype
    if cast_up and "layer_norm" not in name:
        return []
    size = ITEMSIZE.get("float32" if cast_up else x.dtype)
    if size is None:
        return []
    copy = Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size)
    return [copy] * ((c.strides(0, "input") is not None) + bprop)
