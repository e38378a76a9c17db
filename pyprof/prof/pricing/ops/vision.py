"""torchvision's detection ops: nms as PyTorch's ranges name it (`torchvision::nms`), priced from
the range's shapes, which pyprof's marker of the custom op (pyprof/nvtx/custom_ops.py) gives too
(pricing/custom_ops.py); roi_align from the marker, whose scalars (the sampling ratio) no range
carries.

Conventions (docs/prof.md): one IoU of two boxes is 19 FLOPs (the intersection's 4 max/min, 2
subtractions, 2 clamps and its product; both areas, 3 each; the union's 2 adds; the division; the
threshold's comparison); a mask word's OR one FLOP.
"""
from __future__ import annotations

from typing import Any

from ..registry import SIMT, Call, Cost, dims, fmt_params, register, register_aten, stage_totals
from ..values import FLOATING, ITEMSIZE, Tensor

IOU_FLOPS = 19
_WORD = 8  # the suppression mask's unsigned long long words
_BLOCK = 64  # boxes a mask word (and nms_kernel_impl's block) covers


def nms_stages(k: int, size: int) -> tuple:
    """torchvision's CUDA nms of k boxes as its kernels, each a named stage: the scores sorted
    (their positions' arange, int64; the in-place sort of keys and positions, k·ceil(log2 k)
    comparisons as order.py counts a sort's), the boxes gathered in that order; nms_kernel_impl
    compares every pair once (k(k - 1) / 2 IoUs), reading the boxes and writing each box's mask
    words from its own block of 64 on (the upper triangle: the others are never written); the keep
    flags zero-filled; gather_keep_from_mask walks the boxes in order, ORing each kept box's words
    into the suppressed set and writing the keep flags; the kept positions found (nonzero: cub's
    count and select) and the sorted positions indexed by them. What depends on how many boxes
    are kept is counted at its most (all of them). From PyTorch's ranges the sort, gather, fill
    and nonzero are ranges of their own, priced by their formulas: only nms's two kernels take
    these stages there."""
    blocks = -(-k // _BLOCK)
    # Box i's row holds the words of the blocks from its own on.
    upper = sum(min(_BLOCK, k - r * _BLOCK) * (blocks - r) for r in range(blocks))
    ints = _WORD * k  # k int64 positions
    return (("elementwise_kernel_with_index", 0, 0, ints),
            ("radixSortKVInPlace", k * max(1, (k - 1).bit_length()), 2 * k * size, 2 * ints),
            ("vectorized_gather_kernel", 0, 2 * 4 * k * size, ints),
            ("nms_kernel_impl", IOU_FLOPS * k * (k - 1) // 2, 4 * k * size, upper * _WORD),
            ("FillFunctor", 0, 0, k),
            ("gather_keep_from_mask", upper, 0, upper * _WORD + k),
            ("DeviceReduceSingleTileKernel", k - 1, 0, k + _WORD), ("DeviceSelectSweepKernel", 0, 0, k + ints),
            ("index_elementwise_kernel", 0, 0, 3 * ints))


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
    return Cost(*stage_totals(stages), fmt_params(dtype, boxes=dims(dets)), dtype, SIMT, stages=stages)


@register("torch.ops.torchvision.roi_align")
def roi_align(c: Call) -> Cost | None:
    """torch.ops.torchvision.roi_align(input [N, C, H, W], rois [K, 5], spatial_scale,
    pooled_height, pooled_width, sampling_ratio, aligned), as pyprof's marker of the custom op
    has it (pyprof/nvtx/custom_ops.py): each of the K x C x ph x pw outputs averages a
    sampling_ratio² grid of bilinear samples (4 taps, 2 FLOPs each: interpolate's convention) and
    divides once; the rois read, the output written, of the input no more than it holds nor than
    the samples' taps (an upper bound: boxes may overlap); the output zero-filled first, a kernel
    of its own (named stages). Backward: the input's gradient
    zero-filled (grad_fill), then each tap's weighted dY added into it (2 FLOPs a tap; dY and the
    rois read, the touched elements read and written). An adaptive ratio (<= 0: each box's own,
    from its size): na."""
    x, rois = c.get(0, "input"), c.get(1, "rois")
    ph, pw, ratio = c.get(3, "pooled_height"), c.get(4, "pooled_width"), c.get(5, "sampling_ratio")
    if not (isinstance(x, Tensor) and isinstance(rois, Tensor)) or len(x.shape) != 4 or len(rois.shape) != 2 \
            or not all(type(v) is int for v in (ph, pw, ratio)) or ratio <= 0 or x.itemsize is None:
        return None
    out = rois.shape[0] * x.shape[1] * ph * pw
    taps = out * ratio * ratio * 4
    touched = min(x.numel, taps)
    size = x.itemsize
    flops, nbytes = out * (2 * 4 * ratio * ratio + 1), rois.numel * size + out * size + touched * size
    # torchvision zero-fills the output before its kernel writes it.
    stages = (("FillFunctor", 0, out * size), ("roi_align_forward", flops, nbytes))
    return Cost(flops, nbytes + out * size,
                fmt_params(x.dtype, input=dims(x.shape), rois=rois.shape[0], out=dims((ph, pw)), ratio=ratio),
                x.dtype, SIMT, bwd_flops=2 * taps, bwd_bytes=(out + rois.numel + 2 * touched) * size, grad_fill=x.numel,
                stages=stages)
