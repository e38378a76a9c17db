"""The helper kernels of a layer norm's call: PyTorch's CUDA layer norm (layer_norm_kernel.cu)
reads rows in place, so the call first makes a strided input contiguous (`X.expect_contiguous()`:
a copy in one dtype, read and written), and its backward does the same to the saved input and to
the output gradient, which arrives strided where the output was transposed or expanded after the
norm (MultiheadAttention's batch-first transpose, a sum's gradient). Whether the input is strided
is in its marker (its `strides`); the gradient's is not, so its copy is offered always and costs
nothing where no kernel takes it (parts.CallParts). RMS norm is left out: that its CUDA path
copies alike is not checked against a capture.

The parts are put together with the other kinds' in parts.forward_parts and parts.backward_parts.
"""
from __future__ import annotations

from .part import CONTIGUOUS, Part
from .registry import Call, Cost
from .values import ITEMSIZE

_LAYER_NORMS = frozenset((("torch.nn.functional", "layer_norm"), ("torch", "layer_norm")))


def layer_norm_copies(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """A layer norm's contiguous copies, in the dtype the norm runs in (autocast runs it in
    float32: a 16-bit input is cast up first, keeping its strides): forward, the input's when its
    marker gives strides; backward, that one again and the output gradient's (the input's shape)."""
    if cost is None or (marker.get("mod"), marker.get("op")) not in _LAYER_NORMS:
        return []
    c = Call(marker)
    x = c.tensor(0, "input")
    size = None if x is None else ITEMSIZE.get("float32" if marker.get("autocast") == x.dtype else x.dtype)
    if x is None or not x.numel or size is None:
        return []
    copy = Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size)
    return [copy] * ((c.strides(0, "input") is not None) + bprop)
