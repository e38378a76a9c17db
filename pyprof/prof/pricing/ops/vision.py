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

from ..registry import GEMM_STAGE, SIMT, Call, Cost, dims, fmt_params, register, register_aten, stage_totals
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


# torchvision's deform_conv2d: the images it samples at once (kMaxParallelImgs), its FLOPs per
# bilinear sample (interpolate's convention: 4 taps, 2 each) and the mask's product.
_PARALLEL_IMGS = 32
_SAMPLE = 2 * 4 + 1
# deformable_col2im_coord_kernel, per column element: both offsets' coordinate weights (4 taps,
# 2 each) and multiply-adds, the mask's bilinear sample and multiply-add.
_COORD = 2 * (8 + 2) + (8 + 2)


def _parallel_imgs(batch: int) -> int:
    """get_greatest_divisor_below_bound(batch, 32): the images one im2col holds."""
    return next((k for k in range(min(batch, _PARALLEL_IMGS), 1, -1) if batch % k == 0), 1)


def deform_conv2d_stages(x: Tensor, w: Tensor, offset: Tensor, mask: Tensor | None, strided: tuple = ()) -> tuple | None:
    """(forward, backward) kernels of torchvision's CUDA deform_conv2d (input x [B, C, H, W],
    weight [K, C/g, kh, kw], offset [B, 2·og·kh·kw, OH, OW], the DCNv2 mask or None), each a
    named stage: forward, the arguments made contiguous (`strided`: those that are not), the
    output, its buffer and the columns zero-filled, per block of P images deformable_im2col (a
    bilinear sample and the mask's product per column element: x, the offsets and mask read, the
    columns written) and per weight group a GEMM into the buffer (read and written: addmm_), the
    buffer copied out, the bias added. Backward: the arguments made contiguous, the input, offset
    and mask gradients zero-filled; per block the columns zeroed, per group dY's block made
    contiguous (P > 1) and the columns' GEMM Wᵀ·dY, deformable_col2im_coord (the offsets' and
    mask's gradients) and deformable_col2im (the input's, added into it); the weight gradient
    zero-filled, dY permuted contiguous (P > 1), per block im2col again and per group dY·colsᵀ
    added into the weight's gradient; the bias gradient (dY summed per channel, ones times it).
    None for shapes that do not fit."""
    size = x.itemsize
    if size is None or len(x.shape) != 4 or len(w.shape) != 4 or len(offset.shape) != 4:
        return None
    b, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    taps = kh * kw
    oh, ow = offset.shape[2:]
    if not cg or c % cg or k % (c // cg) or offset.shape[1] % (2 * taps) or offset.shape[0] != b:
        return None
    g, og, p = c // cg, offset.shape[1] // (2 * taps), _parallel_imgs(b)
    blocks, plane = b // p, p * oh * ow
    cols, out = c * taps * plane, b * k * oh * ow
    offsets, masks = p * og * 2 * taps * oh * ow, (p * og * taps * oh * ow if mask is not None else 0)
    im2col = ("deformable_im2col_kernel", _SAMPLE * cols, (p * c * h * wd + offsets + masks + cols) * size)
    copies = tuple(("direct_copy_kernel", 0, 2 * t.numel * size) for t in strided)
    fgemm = (GEMM_STAGE, 2 * (k // g) * (cg * taps) * plane, ((k // g) * cg * taps + cols // g + 2 * (k // g) * plane) * size)
    forward = copies + (("FillFunctor", 0, out * size),) * 2 + (("FillFunctor", 0, cols * size),) \
        + ((im2col,) + (fgemm,) * g) * blocks \
        + (("direct_copy_kernel", 0, 2 * out * size), ("CUDAFunctor_add", out, (2 * out + k) * size))
    permuted = p > 1 and k // g > 1  # dY's block viewed [K/g, P·OH·OW] is strided
    dy_block = (("direct_copy_kernel", 0, 2 * (k // g) * plane * size),) if permuted else ()
    grads = ("FillFunctor", 0, b * c * h * wd * size), ("FillFunctor", 0, b * offsets // p * size), \
        ("FillFunctor", 0, (b * og * taps * oh * ow) * size)
    dgemm = (GEMM_STAGE, fgemm[1], (cg * taps * (k // g) + (k // g) * plane + 2 * cols // g) * size)
    per_block = (("FillFunctor", 0, cols * size),) + (dy_block + (dgemm,)) * g + (
        ("deformable_col2im_coord_kernel", _COORD * cols, (cols + p * c * h * wd + offsets + masks) * size
         + (offsets + masks) * size),
        ("deformable_col2im_kernel", _SAMPLE * cols, (cols + offsets + masks + 2 * p * c * h * wd) * size))
    wgemm = (GEMM_STAGE, fgemm[1], ((k // g) * plane + cols // g + 2 * (k // g) * cg * taps) * size)
    backward = copies + grads + per_block * blocks + (("FillFunctor", 0, k * cg * taps * size),) \
        + ((("direct_copy_kernel", 0, 2 * out * size),) if p > 1 else ()) + ((im2col,) + (wgemm,) * g) * blocks \
        + (("sum_functor", out - k, (out + k) * size), ("FillFunctor", 0, k * size), ("MulFunctor", k, 3 * k * size))
    return forward, backward


@register("torch.ops.torchvision.deform_conv2d")
def deform_conv2d(c: Call) -> Cost | None:
    """torch.ops.torchvision.deform_conv2d(input, weight, offset, mask, bias, stride_h, stride_w,
    pad_h, pad_w, dilation_h, dilation_w, groups, offset_groups, use_mask) as pyprof's marker of
    the custom op has it: deform_conv2d_stages, the arguments the marker says are strided copied
    first."""
    x, w, offset, mask = (c.tensor(i, n) for i, n in enumerate(("input", "weight", "offset", "mask")))
    if x is None or w is None or offset is None:
        return None
    use_mask = c.get(13, "use_mask", True) is not False
    strided = tuple(t for i, t in enumerate((x, w, offset, mask, c.tensor(4, "bias")))
                    if t is not None and c.strides(i, ("input", "weight", "offset", "mask", "bias")[i]) is not None)
    stages = deform_conv2d_stages(x, w, offset, mask if use_mask else None, strided)
    if stages is None:
        return None
    fwd, bwd = stages
    return Cost(*stage_totals(fwd), fmt_params(x.dtype, input=dims(x.shape), weight=dims(w.shape)), x.dtype, SIMT,
                bwd_flops=stage_totals(bwd)[0], bwd_bytes=stage_totals(bwd)[1], stages=fwd, bwd_stages=bwd)


def _deform_range(backward: bool):
    def formula(a: Any) -> Cost | None:
        """torchvision::deform_conv2d (input, weight, offset, mask, bias, ...) and its backward
        (grad, input, weight, offset, mask, bias, ...) from PyTorch's ranges: of
        deform_conv2d_stages the kernels under the range itself (im2col, col2im and its
        coordinates': the copies, fills and GEMMs are ranges of their own, priced by theirs), in
        the input's dtype (its producer's, else the kernel's)."""
        at = 1 if backward else 0
        dtype = a.input_dtype(at) or (a.dtype if a.dtype in FLOATING else None)
        shapes = [a.shape(at + i) for i in range(4)]
        if dtype is None or not all(shapes[:3]):
            return None
        x, w, offset, mask = (Tensor(tuple(s), dtype) if s else None for s in shapes)
        stages = deform_conv2d_stages(x, w, offset, mask)
        if stages is None:
            return None
        own = tuple(s for s in stages[backward] if s[0].startswith("deformable_"))
        return Cost(*stage_totals(own), fmt_params(dtype, input=dims(x.shape), weight=dims(w.shape)), dtype, SIMT,
                    stages=own)
    return formula


register_aten("torchvision::deform_conv2d")(_deform_range(False))
register_aten("torchvision::_deform_conv2d_backward")(_deform_range(True))
