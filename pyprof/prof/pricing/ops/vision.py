"""torchvision's detection ops as PyTorch's ranges name them (`torchvision::nms`): their kernels
run inside the op (no pyprof marker reaches them: a custom op is not a torch function), so they
are priced at the aten level from the range's shapes.

Conventions (docs/prof.md): one IoU of two boxes is 19 FLOPs (the intersection's 4 max/min, 2
subtractions, 2 clamps and its product; both areas, 3 each; the union's 2 adds; the division; the
threshold's comparison); a mask word's OR one FLOP.
"""
from __future__ import annotations

from typing import Any

from ..registry import SIMT, Cost, dims, fmt_params, register_aten
from ..values import FLOATING, ITEMSIZE

IOU_FLOPS = 19
_WORD = 8  # the suppression mask's unsigned long long words
_BLOCK = 64  # boxes a mask word (and nms_kernel_impl's block) covers


def nms_stages(k: int, size: int) -> tuple:
    """torchvision's CUDA nms of k boxes (sorted by score before, by ops of their own ranges), as
    its two kernels: nms_kernel_impl compares every pair once (k(k - 1) / 2 IoUs), reading the
    boxes and writing each box's mask words from its own block of 64 on (the upper triangle:
    the others are never written); gather_keep_from_mask walks the boxes in order, ORing each
    kept box's words into the suppressed set (every box counted kept: the most) and writing the
    keep flags."""
    blocks = -(-k // _BLOCK)
    # Box i's row holds the words of the blocks from its own on.
    upper = sum(min(_BLOCK, k - r * _BLOCK) * (blocks - r) for r in range(blocks))
    return (("nms_kernel_impl", IOU_FLOPS * k * (k - 1) // 2, 4 * k * size, upper * _WORD),
            ("gather_keep_from_mask", upper, 0, upper * _WORD + k))


@register_aten("torchvision::nms")
def nms(a: Any) -> Cost | None:
    """(dets [k, 4], scores [k], iou_threshold): nms_stages in the boxes' dtype (their producer's,
    else the kernel's)."""
    dets = a.shape(0)
    dtype = a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None)
    size = ITEMSIZE.get(dtype)
    if not dets or len(dets) != 2 or dets[1] != 4 or size is None:
        return None
    stages = nms_stages(dets[0], size)
    return Cost(sum(s[1] for s in stages), sum(s[2] + s[3] for s in stages), fmt_params(dtype, boxes=dims(dets)),
                dtype, SIMT, stages=stages)
