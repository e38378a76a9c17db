"""The copies of a cat that PyTorch runs one input at a time. Its CUDA cat (Shape.cu) copies every
input with one kernel (CatArrayBatchedCopy, the op's own) where the inputs share the result's
dtype and layout and have at most 4 dimensions, and else copies each input into its slice of the
result (`result.narrow(dim, offset, size).copy_(input)`): a cast where the input's dtype is not
the result's, a copy in one dtype where it is. Each of those copies is a part (parts.CallParts),
taken by the kernel whose launch fits its input, so each kernel carries its own input's bytes (a
3-D U-Net's cat of two [2, 32, 16, 32, 32] fp32 inputs: two copies, each 1.00 of the bytes Nsight
Compute counted; DeepLabV3's cat of four fp16 inputs and an fp32 one: four casts and a copy).
A cat that ran batched leaves them untaken: they cost nothing. stack, hstack and vstack run as cat.
"""
from __future__ import annotations

from .ops.memory import CATS
from .part import CONTIGUOUS, COPY, Part
from .registry import Call, Cost
from .values import ITEMSIZE, Tensor


def cat_copies(marker: dict, cost: Cost | None) -> list[Part]:
    """One copy of each input of a torch cat (or stack) call into the result's dtype: read in its
    own, written in the result's; none where an input is not known."""
    if cost is None or marker.get("mod") != "torch" or marker.get("op") not in CATS:
        return []
    inputs = Call(marker).get(0, "tensors")
    out = ITEMSIZE.get(cost.dtype)
    if not isinstance(inputs, list) or out is None:
        return []
    copies = []
    for t in inputs:
        size = ITEMSIZE.get(t.dtype) if isinstance(t, Tensor) else None
        if size is None or not t.numel:
            return []
        copies.append(Part(CONTIGUOUS if t.dtype == cost.dtype else COPY, t.numel, 0, t.numel * (size + out)))
    return copies
