"""The contiguous copies of the ops whose CUDA kernels read their input in place, rows in order: a
strided input is copied first (`input.contiguous()`, a copy in one dtype, read and written).
PyTorch's layer norm (layer_norm_kernel.cu: `X.expect_contiguous()`), whose backward does the
same to the saved input and to the output gradient, which arrives strided where the output was
transposed or expanded after the norm (MultiheadAttention's batch-first transpose, a sum's
gradient); softmax and log_softmax (SoftMax.cu's host_softmax: `input_.contiguous()`, and its
backward the gradient's: a CTC loss's arrives transposed), and so
cross_entropy, whose log_softmax reads a transposed [N, C, L] logits tensor so (a speech model's
frame labels: the copy, then cunn_SpatialSoftMaxForward; its stages shifted by one before). Whether
the input is strided is in its marker (its `strides`); the gradient's is not, so its copy is
offered always and costs nothing where no kernel takes it (parts.CallParts). RMS norm is left
out: that its CUDA path copies alike is not checked against a capture.

The parts are put together with the other kinds' in parts.forward_parts and parts.backward_parts.
"""
from __future__ import annotations

from .part import CONTIGUOUS, Part
from .registry import Call, Cost
from .values import ITEMSIZE

# (module, op) -> whether its backward copies the output gradient too (softmax's backward,
# host_softmax_backward: `grad_.contiguous()`; a CTC loss's gradient arrives transposed).
_READ_IN_PLACE = {("torch.nn.functional", "layer_norm"): True, ("torch", "layer_norm"): True,
                  **{(mod, op): True for mod in ("torch.nn.functional", "torch", "Tensor")
                     for op in ("softmax", "log_softmax")},
                  ("torch.nn.functional", "cross_entropy"): False}


def contiguous_copies(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """The contiguous copies of an op that reads its input in place (_READ_IN_PLACE), in the dtype
    it runs in (autocast runs these in float32: a 16-bit input is cast up first, keeping its
    strides): forward, the input's when its marker gives strides; backward (a layer norm's, a
    softmax's), that one again and the output gradient's (the input's shape)."""
    key = (marker.get("mod"), marker.get("op"))
    if cost is None or key not in _READ_IN_PLACE or bprop and not _READ_IN_PLACE[key]:
        return []
    c = Call(marker)
    x = c.tensor(0, "input")
    size = None if x is None else ITEMSIZE.get("float32" if marker.get("autocast") == x.dtype else x.dtype)
    if x is None or not x.numel or size is None:
        return []
    copy = Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size)
    return [copy] * ((c.strides(0, "input") is not None) + bprop)
