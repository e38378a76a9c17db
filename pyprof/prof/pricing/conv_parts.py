"""The helper kernels cuDNN launches around a convolution's own: its layout conversions (NCHW to
NHWC and back), its scaling of what the convolution writes by beta, its channel padding of a
16-bit convolution's tensors, its sum of the per-sample weight gradients, a strided output
gradient made contiguous, and xmma's segment-K weight gradient; with the matrices a convolution's
implicit GEMMs write (conv_outputs), which tell a split-K reduction after it (gemm_parts.split_k)
which output it sums. From a marker's tensors or from a PyTorch range's shapes (range_parts).

A layout conversion of an (N, C, spatial...) tensor runs one block per 32 x 32 tile of (spatial,
channel) elements per sample, a grid of [ceil(spatial / 32), ceil(C / 32), N]: the tensor whose
grid is the kernel's is the one converted. Its role tells more: cuDNN converts what its kernel
reads into the kernel's layout (forward the input and weight; backward the output gradient, the
input and the weight) and what it writes back (BACK: the output; the input's and the weight's
gradients), and a call's first conversion is always one into, so its direction (nchwToNhwc for
NCHW tensors, nhwcToNchw for channels_last ones) is the call's: a 1-D or 3-D convolution's input
and output, often one grid (C 16 and 32 both one tile of channels, 995 and 993 steps both 32
tiles), go to their own conversions. Where tensors of different sizes still share a grid and a
role, the order cuDNN's engines convert in tells (conversions), or nothing does: na. The same
tensor (or a gradient of its shape) may be converted more than once, so those parts are never
used up (parts.CallParts.take).
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Callable

from .gemm_parts import gemm_tile, grid_z
from .op_ranges import template_dtype
from .part import CONTIGUOUS, Part, launch_count
from .registry import CONV, GEMM, Call, Cost
from .values import ITEMSIZE, acc_size, reduce_adds

SCALE, WGRAD_SUM, PAD, TRANSFORM = "scale", "wgrad-sum", "channel-pad", "filter-transform"
# A layout conversion's roles in a call (conversions): what its kernel reads converted into the
# kernel's layout, as the call's first conversion, as an engine's first after a conversion back,
# as an engine's second; what it wrote converted back. And the two kernels (directions) that convert.
FIRST, NEXT, SECOND, BACK = "layout", "layout-next", "layout-second", "layout-back"
INTO = (FIRST, NEXT, SECOND)
TO_NHWC, TO_NCHW = "to-nhwc", "to-nchw"
CONVERSIONS = (TO_NHWC, TO_NCHW)
# cuDNN's generic tensor transform, which converts a convolution's filter to the layout its kernel
# reads where no layout conversion kernel does (a filter of few output channels: UNet's 3 x 64 x 3 x
# 3 head), forward and for the data gradient. Nsight Compute on an H100 (16 launches, K 1 to 12 of
# C 32 to 128, bf16): its global loads and stores are the filter's bytes each, exactly. Its launch
# is a grid-stride loop's (two blocks of 1,024 threads an SM, whatever the size), and its L2 writes,
# 845,000 sectors (27 MB, its 10 us) for each filter and input size measured, are no tensor's: the
# filter's bytes are its own, the rest is not counted.
TRANSFORM_KERNEL = re.compile(r"\btensorTransformGeneric<")
# cuDNN's scaling of an output by beta before a kernel accumulates into it; PyTorch passes beta 0,
# and cuDNN never reads an output scaled by 0 (its documented contract): the output zeroed.
SCALE_KERNEL = re.compile(r"\bscalePackedTensor_kernel<")
# cuDNN's sum of the per-sample weight gradients of an NCHW convolution's GEMM (one thread per
# weight element): reduce_wgrad_nchw_helper<partials' type, weight's type>.
WGRAD_SUM_KERNEL = re.compile(r"\breduce_wgrad_nchw_helper<([^,<>]+), ([^,<>]+)>")
# cuDNN's copy of an NHWC tensor between its C channels and C padded up for a Tensor Core kernel
# (either way: the same kernel strips the padding off a gradient).
PAD_KERNEL = re.compile(r"\bnhwcAddPaddingKernel<")
TO_NHWC_KERNEL = re.compile(r"\bnchwToNhwcKernel<")
TO_NCHW_KERNEL = re.compile(r"\bnhwcToNchwKernel<")
_LAYOUT_TILE = 32
# The channel multiple cuDNN pads a 16-bit convolution's NHWC tensors to (nhwcAddPaddingKernel):
# forward 4, for sm90's image_first_layer fprop kernel (`k64c4r7s7`: 4 channels); backward 8, the
# 16-byte vectors of the dgrad and CUTLASS wgrad kernels (AlignedArray<half_t, 8>). ncu on
# ResNet-18's 3-channel stem (tests/data/kernel_truth/conv_ncu_resnet.csv.xz): the forward's image
# read 2,408,448 bytes (8x3x224x224 fp16), wrote 3.9 MB (8x4x224x224: 3,211,264; the write
# sectors over-count partial writes by 1.1-1.2x); the backward's wrote 7.1 MB (8 channels:
# 6,422,528), and the CUTLASS wgrad's split-K partials are 64 x 7·7·8 fp32 (2,910,208 bytes, exact).
_PAD_MULTIPLE = {False: 4, True: 8}
# The channel multiple a cuDNN convolution kernel reads NHWC tensors in, as its name states it:
# CUTLASS's operand alignment (`..._nhwc_align8`: 8 elements), sm90's image_first_layer kernel's
# channels (`k64c4r7s7`: 4). A range-priced forward's padding takes the multiple of the kernel it
# pads for (ResNet-50's bf16 stem at 128 x 128 on H100 ran CUTLASS's align8 kernel after it).
_KERNEL_CHANNELS = re.compile(r"_align(\d+)\b|_k\d+c(\d+)r\d+s\d+_")
# A convolution gradient kernel's role, as cuDNN's and CUTLASS's names state it.
_GRADIENT = re.compile(r"dgrad|wgrad", re.IGNORECASE)
# xmma's segment-K weight gradient: `..._wgrad_..._execute_segment_k_on_kernel` computes the
# gradient's GEMM (K x C·taps over N·spatial) in segments of the reduction, each tile's segments one
# block apiece, and writes every segment's partial tile in fp32; `..._execute_split_k_kernel` then
# sums them into the gradient (gemm_parts.split_pass).
_SEGMENT_K = re.compile(r"_wgrad_\w*_execute_segment_k_on_kernel")


def scaled_outputs(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """cuDNN's scaling (by beta, 0: zeroed, written once) of what a convolution writes: forward its
    output, backward the gradients of its input and weight, in the dtype the op ran in."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size:
        return []
    return scale_parts([t.numel for t in Call(marker).tensors()[:2]] if bprop else [cost.out_elems], size)


def scale_parts(numels: list, size: int) -> list[Part]:
    """cuDNN's scaling by 0 of tensors of `numels` elements: each written once in `size` bytes."""
    return [Part(SCALE, e, 0, e * size) for e in numels if e]


def marker_layouts(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """A convolution's tensors as cuDNN's layout conversions move them (conversions): input,
    weight, output or their gradients, and for a grouped one a group's slices (group_slices),
    each read and written once in the dtype the op ran in; and its filter's transform. Backward,
    only the engines of the gradients the marker says were computed (`grad`)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size or not cost.out_shape:
        return []
    tensors = Call(marker).tensors()[:2]
    x, w = ([t.shape for t in tensors] + [None, None])[:2]
    dx, dw = ([t.grad for t in tensors] + [None, None])[:2]
    return conversions(x, w, cost.out_shape, bprop, size, dx, dw is not False) + filter_transform(w, size)


def conversions(x: object, w: object, y: object, bprop: bool, size: int, dx: bool | None = None,
                dw: bool = True) -> list[Part]:
    """The layout conversions of a convolution of input, weight and output shapes `x`, `w`, `y`
    (each None where not known) and of a grouped one's slices. cuDNN's engines each convert their
    two operands in turn, then run, then convert what they wrote back: forward the fprop engine (x,
    w; y back); backward the dgrad engine (w, dY; dX back) then the wgrad engine (x, dY; dW back),
    `dx`, `dw` saying whether that gradient's engine runs (None: not known, as True); a transposed
    convolution runs the other engine each way (forward dgrad: w, then x as its dY; backward fprop:
    dY, w; wgrad: dY, x as its dY). An operand already in the kernel's layout is not converted (a
    1 x 1 filter), and a dgrad run as a GEMM converts nothing. So what a conversion into the
    kernel's layout converts depends on what came before it in the call (CallParts.take): FIRST,
    the call's first; NEXT, an engine's first after a conversion back; SECOND, an engine's second.
    Nsight Systems on 1-D, 2-D and 3-D convolutions (H100, H200): every conversion so."""
    whole = {"x": x, "w": w, "y": y}
    sliced = dict(zip("xwy", group_slices(x, w, y) or (None, None, None)))
    flipped = _transposed(x, w, y)
    if not bprop:
        pair = ("w", "x") if flipped else ("x", "w")
        into = {FIRST: pair, NEXT: (), SECOND: pair[1:]}
    elif flipped:
        into = {FIRST: ("y",), NEXT: ("y",), SECOND: ("w", "x")}
    else:
        # The dgrad engine starts with the filter, or with dY where the filter is 1 x 1; the wgrad
        # engine with x (the first where the dgrad converts nothing or does not run).
        dgrad = ("w", "y") if _conv_shape(w) and math.prod(w[2:]) == 1 else ("w",)
        into = {FIRST: (dgrad if dx is not False else ()) + ("x",), NEXT: ("x",), SECOND: ("y",)}
    back = [n for n, on in (("x", dx is not False), ("w", dw)) if on] if bprop else ["y"]
    parts: list[Part] = []
    for role, names in (*into.items(), (BACK, back)):
        parts += layout_parts([whole[n] for n in names] + [sliced[n] for n in names], size, role)
    return parts


def filter_transform(w: object, size: int) -> list[Part]:
    """cuDNN's transform of a convolution's filter of shape `w` (TRANSFORM_KERNEL): read and
    written once in `size`-byte elements."""
    return [Part(TRANSFORM, math.prod(w), 0, 2 * math.prod(w) * size)] if _conv_shape(w) else []


def group_slices(x: object, w: object, y: object) -> list:
    """One group's slices of a grouped convolution's input, weight and output (or their
    gradients'), which cuDNN converts apart around a kernel run a group at a time
    (one_group_wgrad): [N, C/g, ...], [K/g, C/g, ...], [N, K/g, ...]; none for one group."""
    g = conv_groups(x, w, y)
    if g < 2 or not _conv_shape(y):
        return []
    return [(x[0], x[1] // g, *x[2:]), (w[0] // g, *w[1:]), (y[0], y[1] // g, *y[2:])]


def layout_parts(shapes: list, size: int, role: str) -> list[Part]:
    """The layout conversions in `role` (FIRST, NEXT, SECOND, BACK) of a convolution's (N, C,
    spatial...) tensors of `shapes`, each read and written once in `size`-byte elements."""
    return [Part(role, math.prod(s), 0, 2 * math.prod(s) * size, _layout_grid(tuple(s))) for s in shapes
            if _conv_shape(s)]


def _conv_shape(s: object) -> bool:
    """Whether `s` is an (N, C, spatial...) shape: a list of 3 or more positive ints."""
    return isinstance(s, (list, tuple)) and len(s) >= 3 and all(type(d) is int and d > 0 for d in s)


def range_parts(sizes: list, cost: Cost | None, kernel: str | None, bprop: bool,
                upcoming: Callable[[], list] = list) -> list[Part]:
    """The helper parts of a convolution priced from its PyTorch range (op_ranges.py) rather than
    a marker, from the range's shapes (forward: input, weight; backward, aten::convolution_backward:
    dY, input, weight) and the forward's output, whose shape the formula had from a consumer: their
    layout conversions, the filter's transform, cuDNN's scaling of what it writes (scaled_outputs),
    its channel padding (forward: pad_parts, to the multiple of the first of the call's kernels read ahead whose name
    states one; backward: range_backward_pads, by the gradient kernels' names; `upcoming` gives
    those names, called only where a pad may run) and, backward, cuDNN's sum of the per-sample
    weight gradients, written in the weight's type `kernel`'s name states (a range's cost is
    priced per kernel: from this one's name, the partials' type). Taken as a marker's parts are
    (CallParts.take)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size:
        return []
    x, w = range_conv_tensors(sizes, bprop)
    y = sizes[0] if bprop and sizes else cost.out_shape
    wgrad = wgrad_sum(x[0], math.prod(w), wgrad_sum_dtype(kernel or "") or cost.dtype) \
        if bprop and _conv_shape(x) and _conv_shape(w) else None
    scaled = [math.prod(s) for s in ((x, w) if bprop else (cost.out_shape,)) if _conv_shape(s)]
    pads: list[Part] = []
    if pad_parts(x, w, cost, _PAD_MULTIPLE[True]):
        kernels = [kernel] + upcoming()
        pads = range_backward_pads(x, w, cost, kernels) if bprop else pad_parts(x, w, cost, pad_multiple(kernels))
    return conversions(x, w, y, bprop, size) + ([] if wgrad is None else [wgrad]) + scale_parts(scaled, size) + pads \
        + filter_transform(w, size)


def range_conv_tensors(sizes: list, bprop: bool) -> tuple:
    """(input, weight) shapes of a convolution's PyTorch range (forward: input, weight, ...;
    aten::convolution_backward: dY, input, weight, ...), None where the range has fewer."""
    x, w = ((sizes[1:3] if bprop else sizes[:2]) + [None, None])[:2]
    return x, w


def range_outputs(sizes: list, cost: Cost, bprop: bool) -> list:
    """conv_outputs of a convolution priced from its PyTorch range (range_parts' shapes)."""
    x, w = range_conv_tensors(sizes, bprop)
    return conv_outputs(x, w, cost.out_shape, bprop, ITEMSIZE.get(cost.dtype))


def _layout_grid(shape: tuple) -> tuple:
    """cuDNN's grid converting an (N, C, spatial...) tensor: one block per 32 x 32 tile."""
    n, c, spatial = shape[0], shape[1], math.prod(shape[2:])
    return (-(-spatial // _LAYOUT_TILE), -(-c // _LAYOUT_TILE), n)


def _dense(shape: list, strides: object) -> bool:
    """Whether strides lay a tensor of `shape` out densely in some order of its dims (a
    transpose's): PyTorch's casts keep such a layout, and write any other contiguous."""
    if not isinstance(strides, list) or len(strides) != len(shape):
        return False
    expected = 1
    for size, stride in sorted(zip(shape, strides), key=lambda d: d[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def strided_input(marker: dict, cost: Cost | None) -> list[Part]:
    """A convolution's input copied into a contiguous tensor before cuDNN reads it, where the
    marker says it is contiguous in no memory format (its `strides`: ShuffleNet's channel split,
    a Conformer's transposed [B, C, T] view) and it is already in the dtype the op runs in, or
    autocast's cast keeps its layout (a dense permutation of its dims; it writes any other
    contiguous): read and written once, in the op's dtype. Nsight Compute on an H200 (the
    Conformer's bf16 pointwise Conv1d of a transposed fp32 input): 944,384 bytes, these 921,600."""
    args = marker.get("args") if cost is not None and cost.kind == CONV else None
    x = args[0] if isinstance(args, list) and args and isinstance(args[0], dict) else None
    shape = x.get("shape") if x is not None else None
    copied = x is not None and "strides" in x and _conv_shape(shape) and (
        x.get("dtype") == cost.dtype or _dense(shape, x.get("strides")))
    size = ITEMSIZE.get(cost.dtype) if copied else None
    n = math.prod(shape) if size else 0
    return [Part(CONTIGUOUS, n, 0, 2 * n * size)] if n else []


def contiguous_grad(cost: Cost, size: int | None) -> list[Part]:
    """A convolution's or a GEMM's output gradient copied into a contiguous tensor (read and
    written in the op's dtype) before cuDNN or cuBLAS reads it, where it arrives as a strided view
    (the gradient of a slice of a cat's output: a U-Net's skip connections; of a matmul's output
    transposed after it: swin's attention @ v, its UnsafeViewBackward0's reshape). A
    convolution's once for each gradient, as PyTorch's cuDNN data- and weight-gradient calls each
    make their own copy (DenseNet-121's 4x4 dgrad and wgrad: one such copy before each); a copy
    no kernel takes (one gradient) costs nothing."""
    n = cost.out_elems
    copies = 2 if cost.kind == CONV else 1 if cost.kind == GEMM else 0
    return [Part(CONTIGUOUS, n, 0, 2 * n * size)] * copies if n and size else []


def channel_pads(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """cuDNN's channel padding of a 16-bit convolution whose channels C are not a multiple of
    _PAD_MULTIPLE, in launch order (CallParts.take gives each such kernel the first left): each
    copy reads the tensor in one channel count and writes it in the other (C·rest + C'·rest
    elements, no FLOPs). Forward the input, then the weight. Backward the weight padded and the
    input's gradient stripped around the data-gradient kernel where the input requires grad, then
    the input padded and the weight's gradient stripped around the weight-gradient kernel where
    the weight does; none where the marker does not say which require grad (an old marker: the
    first kernel could be either). The launch grid (2 blocks per SM, grid-stride) tells none
    apart. A transposed convolution (channels_last: a compiled VQ-VAE's 64-to-3-channel decoder)
    pads its output's channels: forward the weight padded, then the output stripped; backward dY
    and the weight padded for dX, dY padded and dW stripped for dW. Grouped
    convolutions: none (not seen). (A range-priced forward reads its multiple from
    the kernel after the pads instead, range_parts: reading ahead here would make every call
    with pads one the memo cannot replay, pricing/memo.py.)"""
    tensors = Call(marker).tensors()[:2] if cost is not None and cost.kind == CONV else []
    if len(tensors) < 2:
        return []
    x, w = tensors
    if _transposed(x.shape, w.shape, cost.out_shape):
        # cuDNN runs a transposed convolution's forward as a data gradient (the weight padded
        # before it, the output, whose channels are the weight's second dimension, stripped
        # after), its input's gradient as a forward (dY and the weight padded) and its weight's
        # as a weight gradient (dY padded, dW stripped).
        py, pw = pad_parts(cost.out_shape, w.shape, cost, _PAD_MULTIPLE[True]) or (None, None)
        if py is None or bprop and (x.grad is None or w.grad is None):
            return []
        return [pw, py] if not bprop else ([py, pw] if x.grad else []) + ([py, pw] if w.grad else [])
    pads = pad_parts(x.shape, w.shape, cost, _PAD_MULTIPLE[bprop])
    if not bprop or not pads:
        return pads
    px, pw = pads
    if x.grad is None or w.grad is None:
        return []
    return ([pw, px] if x.grad else []) + ([px, pw] if w.grad else [])


def range_backward_pads(x: tuple | None, w: tuple | None, cost: Cost | None, kernels: list) -> list[Part]:
    """channel_pads' backward copies of a convolution priced from its range, which does not say
    which arguments required grad: each pair of pads in the call's `kernels` (names, from the
    first pad on) is the one around the gradient kernel right after its first pad, as that
    kernel's name says (`dgrad`: the weight padded, dX stripped; `wgrad`: the input padded, dW
    stripped); none from a pair around a kernel that names neither on (their order is then not
    known)."""
    pads = pad_parts(x, w, cost, _PAD_MULTIPLE[True])
    if not pads:
        return []
    px, pw = pads
    out: list[Part] = []
    names = iter(kernels)
    for name in names:
        if not PAD_KERNEL.search(name or ""):
            continue
        role = _GRADIENT.search(next(names, "") or "")
        if role is None:
            break
        out += [pw, px] if role.group(0).lower() == "dgrad" else [px, pw]
        next((n for n in names if PAD_KERNEL.search(n or "")), None)  # the pair's closing pad
    return out


def pad_multiple(kernels: list) -> int | None:
    """The channel multiple (_KERNEL_CHANNELS) of the first of `kernels` (names) that states one."""
    for name in kernels:
        m = _KERNEL_CHANNELS.search(name or "")
        if m:
            return int(m.group(1) or m.group(2))
    return None


def pad_parts(x: tuple | None, w: tuple | None, cost: Cost | None, multiple: int | None) -> list[Part]:
    """channel_pads' copies of the input and the weight to a multiple of `multiple` channels, in
    that order (a forward's launch order), from their shapes; none where the channels need no
    padding, the multiple is not known or the op is not a 16-bit convolution."""
    size = None if cost is None or cost.kind != CONV else ITEMSIZE.get(cost.dtype)
    if size != 2 or not multiple or not (_conv_shape(x) and _conv_shape(w)) or x[1] != w[1]:
        return []
    c = x[1]
    wide = -(-c // multiple) * multiple
    return [] if wide == c else [Part(PAD, n, 0, (n + n // c * wide) * size) for n in (math.prod(x), math.prod(w))]


def marker_wgrad_sum(marker: dict, cost: Cost) -> list[Part]:
    """wgrad_sum's part of a convolution's backward from its marker: the input's batch, the
    weight's elements, the op's dtype."""
    tensors = Call(marker).tensors()
    if cost.kind != CONV or len(tensors) < 2 or not tensors[0].shape or not tensors[1].numel:
        return []
    part = wgrad_sum(tensors[0].shape[0], tensors[1].numel, cost.dtype)
    return [] if part is None else [part]


def wgrad_sum(n: int, w: int, dtype: str | None) -> Part | None:
    """cuDNN's sum of an NCHW convolution's per-sample weight gradients (reduce_wgrad_nchw_helper,
    after a GEMM that wrote one per sample): N partials of the W weight elements read in fp32 (fp64
    for a float64 op: cuDNN's accumulator), N - 1 adds each, the gradient written in `dtype`, the
    dtype the op ran in (unet's 1x1 convolutions under bf16 autocast: within 2% of ncu's bytes);
    None where its size is not known."""
    size = ITEMSIZE.get(dtype)
    if not size or n < 1:
        return None
    partial = acc_size(dtype)
    return Part(WGRAD_SUM, w, reduce_adds(n * w, w), n * w * partial + w * size)


def wgrad_sum_dtype(kernel: str) -> str | None:
    """The gradient's dtype a reduce_wgrad_nchw_helper<partials' type, weight's type> writes."""
    m = WGRAD_SUM_KERNEL.search(kernel)
    return template_dtype(m.group(2)) if m else None


def conv_outputs(input_shape: object, weight_shape: object, out_shape: object, bprop: bool,
                 size: int | None = None) -> list:
    """(rows, cols) of the matrices a convolution's implicit GEMMs write: forward the output as
    (N·spatial, K); backward the input's gradient (N·spatial, C) and the weight's (K, C/g·taps),
    and for g groups one group's (K/g, C/g·taps) (cuDNN's CUTLASS kernels run a group at a time:
    one_group_wgrad),
    for a 16-bit op (`size` 2) with K and C each padded to a multiple of 8 (channel_pads: the
    weight gradient is computed on the padded tensors; CUTLASS's split-K wgrad of a 3-channel stem
    wrote 29 partials of 64 x 7·7·8 for ResNet-18's, 23 of 64 x 3·3·8 for a CIFAR one, of
    ShuffleNet's 58-filter 1x1 convolutions 9 of 64 x 64 and 9 of 64 x 24, and the reduction after
    them the 64 x 64 bf16 gradient: ncu). Of one image (N 1) the output or input gradient also as
    (K or C, spatial): an NCHW image is that matrix, which a GEMM over it writes (MaxViT's 1x1
    convolutions of 1 x 1024 x 14 x 14: CUTLASS's GEMM split 8 ways, then a splitKreduce_kernel of
    7 x 16 blocks, 196 columns by 256 rows). Shapes that are not lists of positive ints are left out."""
    if not bprop:
        return _image_matrices(out_shape)
    out = _image_matrices(input_shape)
    if not _conv_shape(weight_shape):
        return out
    k, c_taps = _weight_matrix(weight_shape, size)
    g = conv_groups(input_shape, weight_shape, out_shape)
    return out + [(k, c_taps)] + ([(k // g, c_taps)] if g > 1 else [])


def _weight_matrix(weight_shape: list, size: int | None) -> tuple:
    """(K, C·taps) of a convolution's weight gradient as its implicit GEMM writes it: K and C each
    padded to a multiple of 8 for a 16-bit op (`size` 2: channel_pads)."""
    k, c, taps = weight_shape[0], weight_shape[1], math.prod(weight_shape[2:])
    if size == 2:
        k, c = (-(-d // _PAD_MULTIPLE[True]) * _PAD_MULTIPLE[True] for d in (k, c))
    return k, c * taps


def cutlass_wgrad_splits(kernel: str | None, grid: object, weight_shape: object, size: int | None) -> tuple | None:
    """(splits, elements of one partial) of CUTLASS's implicit-GEMM weight gradient (cuDNN's cutlass
    kernels: `ImplicitGemmConvolution<...Conv2dWgrad...>`) split K: CUTLASS runs a convolution's
    split-K slices in its grid's z (the images fold into the GEMM's K, never into z), each slice
    writing an fp32 partial of the K x C·taps gradient (_weight_matrix) that ReduceSplitK then sums.
    Nsight Compute: the partials written to the byte (ResNet-18's stem, 29 of 64 x 7·7·8; a CIFAR
    stem's 23 of 64 x 3·3·8). None for any other kernel, a z below 2 or a weight of no conv shape."""
    z = grid_z(grid)
    name = kernel or ""
    if z is None or z < 2 or "ImplicitGemmConvolution<" not in name or "dWgrad" not in name \
            or not _conv_shape(weight_shape):
        return None
    k, c_taps = _weight_matrix(list(weight_shape), size)
    return z, k * c_taps


def _image_matrices(shape: object) -> list:
    """(rows, cols) a convolution's (N, C, spatial...) tensor is as a GEMM's output: (N·spatial,
    C), and with N 1 also (C, spatial); none for a shape that is not positive ints."""
    if not _conv_shape(shape):
        return []
    spatial = math.prod(shape[2:])
    return [(shape[0] * spatial, shape[1])] + ([(shape[1], spatial)] if shape[0] == 1 else [])


def _transposed(x: object, w: object, y: object) -> bool:
    """Whether a convolution of input, weight and output shapes `x`, `w`, `y` is a transposed one:
    its weight's first dimension the input's channels and not the output's."""
    return _conv_shape(x) and _conv_shape(w) and _conv_shape(y) and y[1] != w[0] and x[1] == w[0]


def conv_groups(x: object, w: object, y: object = None) -> int:
    """A convolution's groups from its input's channels over its weight's (1 where not known). A
    transposed convolution's weight is (C_in, C_out / groups, ...), which an output `y` whose
    channels are not the weight's first dimension while the input's are tells: its groups are
    the output's channels over the weight's second dimension."""
    if not _conv_shape(x) or not _conv_shape(w):
        return 1
    channels, other = (y[1], x[1]) if _transposed(x, w, y) else (x[1], w[0])
    if channels % w[1] or other % (channels // w[1]):
        return 1
    return channels // w[1]


def wgrad_segments(kernel: str | None, grid: object, weight_shape: object) -> int | None:
    """The reduction segments of an xmma segment-K weight-gradient kernel (_SEGMENT_K): its grid's
    blocks over the gradient's tiles (tile M x N from the name: gemm_parts.gemm_tile; over K rows
    and C·taps columns; ResNet-18's 64x64x3x3 weights in 64x64 tiles: 9 tiles, grid 117, 13 segments, and ncu saw it
    write 13 x 64 x 576 fp32 partials, 1,916,928 bytes, exact). None for any other kernel, and
    where the blocks are no whole number (2 or more) of segments a tile: a grid of 48 for those 9
    tiles (batch 2) wrote no such partials and ran no split-K kernel after it (ncu)."""
    tile = gemm_tile(kernel) if _SEGMENT_K.search(kernel or "") else None
    blocks = launch_count(grid)
    if tile is None or blocks is None or not _conv_shape(weight_shape):
        return None
    tiles = -(-weight_shape[0] // tile[0]) * -(-math.prod(weight_shape[1:]) // tile[1])
    segments, left = divmod(blocks, tiles)
    return segments if not left and segments >= 2 else None


# cuDNN's depthwise weight gradient (one input channel a filter) for NHWC tensors: a block per 32
# channels (x) and per image and slice of the output (y, z), each writing its fp32 partial of the
# gradient, then a reduction of one block per tap (x) and 32 channels (y) summing them.
_DEPTHWISE_WGRAD = re.compile(r"\bwgrad2d_c1_k1_nhwc(_reduce)?\b")
_DEPTHWISE_CHANNELS = 32


def depthwise_partials(kernel: str | None, grid: object, weight_shape: object) -> tuple | None:
    """(partials, elements a partial) of cuDNN's depthwise weight gradient `wgrad2d_c1_k1_nhwc`
    for a weight of shape (K, 1, taps...): one fp32 partial of the gradient a block of its grid's
    y x z, each over its x blocks of 32 channels (K padded to them) x taps. Nsight Compute on
    MobileNetV3-Large's seven (grids 21x8x3 to 1x8x8): every launch stored y·z x 32·x x taps x 4
    bytes, to the byte (672 channels, 5x5: 24 partials of 672 x 25; 240, 3x3: 56 of 256 x 9).
    None for any other kernel, weight or grid."""
    m = _DEPTHWISE_WGRAD.search(kernel or "")
    if m is None or m.group(1) or launch_count(grid) is None or len(grid) != 3 or not _conv_shape(weight_shape) \
            or weight_shape[1] != 1 or grid[0] != -(-weight_shape[0] // _DEPTHWISE_CHANNELS):
        return None
    return grid[1] * grid[2], grid[0] * _DEPTHWISE_CHANNELS * math.prod(weight_shape[2:])


def depthwise_reduce(kernel: str | None, grid: object, wgrad: tuple | None, weight_shape: object,
                     size: int | None) -> tuple | None:
    """(FLOPs, bytes) of `wgrad2d_c1_k1_nhwc_reduce` after the depthwise weight gradient launch
    `wgrad` (name, grid: depthwise_partials): its partials read, summed (partials - 1 adds an
    element of the gradient) and the K x taps gradient written once in `size`-byte elements; its
    grid one block per tap and 32 channels. ncu on MobileNetV3-Large's seven: loads and stores
    to the byte (bf16 gradients). None for any other kernel, launch before it or grid."""
    m = _DEPTHWISE_WGRAD.search(kernel or "")
    partials = depthwise_partials(*wgrad, weight_shape) if wgrad else None
    if m is None or not m.group(1) or partials is None or size is None or launch_count(grid) is None:
        return None
    taps = math.prod(weight_shape[2:])
    if list(grid[:2]) != [taps, -(-weight_shape[0] // _DEPTHWISE_CHANNELS)]:
        return None
    count, elems = partials
    out = weight_shape[0] * taps
    return (count - 1) * out, count * elems * 4 + out * size


# cuDNN's FFT convolution: the filter flipped, real-to-complex transforms of the operands, a
# complex GEMM for each frequency over the spectra, a complex-to-real transform of the result
# (a gradient's path may run in rounds). No one of them is a gradient's matrix kernel (analysis's
# gradient slots): each is priced by fft_work.
FFT_PATH = re.compile(r"\bfft2d_(?:r2c|c2r)|_gemm_cf32cf32_|\bflip_filter\b")
_FFT_TRANSFORM = re.compile(r"\bfft2d_(r2c|c2r)_(\d+)x(\d+)\b")
_FFT_SPECTRUM_ITEM = 8  # float2: the transforms of fp32 tensors write and read complex fp32
_FFT_GEMM = "cgemm"
_FFT_FLIP = "flip"


@lru_cache(maxsize=1024)
def fft_stage(kernel: str | None) -> tuple | None:
    """("r2c" or "c2r", FFT size) of one of cuDNN's square FFT transforms of fp32 tensors (size x
    size points), (_FFT_GEMM,) of its complex GEMM, (_FFT_FLIP,) of its filter flip; None for any
    other kernel, a transform of another type or a rectangular one (none measured)."""
    low = kernel or ""
    if "_gemm_cf32cf32_" in low:
        return (_FFT_GEMM,)
    if re.search(r"\bflip_filter\b", low):
        return (_FFT_FLIP,)
    m = _FFT_TRANSFORM.search(low)
    if m is None or m.group(2) != m.group(3) or template_dtype(low[m.end():]) != "float32":
        return None
    return m.group(1), int(m.group(2))


def fft_operand(stage: tuple, grid: object, block: object, shapes: tuple) -> int | None:
    """Which of a 2-D convolution's (input or dX, weight or dW, output or dY) `shapes` a transform
    (fft_stage) reads or writes: the one whose images (N x C, K x C, N x K) its launch covers,
    block x / S images a block along its grid's x for S x S points (16 of 32x32 a 512-thread
    block); None where no shape or two of different image sizes match, or the launch is not
    known."""
    if stage[0] not in ("r2c", "c2r") or launch_count(grid) is None or launch_count(block) is None \
            or block[0] < stage[1]:
        return None
    x, w, y = shapes
    per_block = block[0] // stage[1]
    matches = [i for i, n in enumerate((x[0] * x[1], w[0] * w[1], y[0] * y[1])) if -(-n // per_block) == grid[0]]
    return matches[0] if matches and all(math.prod(shapes[i][2:]) == math.prod(shapes[matches[0]][2:])
                                         for i in matches) else None


def fft_work(stage: tuple | None, grid: object, block: object, x: object, w: object, y: object,
             freqs: int | None) -> tuple | None:
    """(FLOPs, bytes) of a kernel of cuDNN's FFT convolution path (fft_stage) for a 2-D
    convolution of input `x`, weight `w` and output `y` (shapes; backward: y is dY's), all fp32.
    A transform of S x S points has S x (S/2 + 1) complex frequencies a real image (its images:
    fft_operand): r2c reads its tensor
    (whichever of X, W, dY those images are) and writes their spectra, c2r reads the spectra of
    its result (Y, dX or dW) and writes it; FLOPs 2.5 x S² x log2(S²) an image (the customary
    count of a real FFT). The complex GEMM (grid z: `freqs`, the frequencies of the
    call's transforms) multiplies, at every frequency, the N x C, K x C and N x K spectra's two
    operands into the third, whichever gradient it computes: 8 FLOPs a complex multiply-add, the
    three spectra read or written once. The flip copies the weight. ncu on an H200 (a 16-to-32
    channel 5x5 convolution of 64 30x30 images, forward and data gradient): every spectrum
    written and the GEMM's reads and writes to 0.3%, the transforms' reads of X and W to 1%. None
    where the shapes or the launch do not say which tensor a transform is of."""
    if stage is None or not all(_conv_shape(s) and len(s) == 4 for s in (x, w, y)):
        return None
    if stage[0] == _FFT_FLIP:
        return 0, 2 * math.prod(w) * 4
    n, c, k = x[0], x[1], w[0]
    if stage[0] == _FFT_GEMM:
        if freqs is None or grid_z(grid) != freqs:
            return None
        return 8 * freqs * n * c * k, freqs * (n * c + k * c + n * k) * _FFT_SPECTRUM_ITEM
    which = fft_operand(stage, grid, block, (x, w, y))
    if which is None:
        return None
    tensor = (x, w, y)[which]
    images, points = tensor[0] * tensor[1], stage[1] * stage[1]
    spectra = images * fft_frequencies(stage) * _FFT_SPECTRUM_ITEM
    return int(2.5 * points * math.log2(points)) * images, math.prod(tensor) * 4 + spectra


def fft_frequencies(stage: tuple) -> int:
    """The complex frequencies of one image of a real FFT transform (fft_stage)."""
    return stage[1] * (stage[1] // 2 + 1)


# cuDNN's non-fused Winograd F(4x4, 3x3) of a 3x3 convolution (stride 1): transform kernels, each
# reading one tensor and writing its transformed tile set in T1 (the compute type; T2: the
# tensors'), around a batched GEMM (grid z 36: one product per element of a 6x6 tile).
# winograd<Forward|Wgrad><Data|Filter|Delta|Output>4x4<T1, T2>.
WINOGRAD_KERNEL = re.compile(r"\bwinograd(Forward|Wgrad)(Data|Filter|Delta|Output)4x4<([^,<>]+), ([^,<>]+)>")
_WINOGRAD_TILE = 36  # 6x6 elements a tile, each tile over 4x4 output elements
_WINOGRAD_OUT = 4
WINOGRAD_GEMM_Z = _WINOGRAD_TILE  # the GEMM after the transforms runs one grid layer per tile element


def _winograd_tiles(shape: object) -> int | None:
    """N x the 4x4 tiles over an (N, C, H, W) tensor's H x W, None for another shape."""
    if not _conv_shape(shape) or len(shape) != 4:
        return None
    n, _, h, w = shape
    return n * -(-h // _WINOGRAD_OUT) * -(-w // _WINOGRAD_OUT)


@lru_cache(maxsize=1024)
def winograd_stage(kernel: str | None) -> tuple | None:
    """(Forward or Wgrad, Data/Filter/Delta/Output, the tiles' item size, the tensors' item size) of a
    Winograd transform kernel (WINOGRAD_KERNEL), None for any other kernel or type."""
    m = WINOGRAD_KERNEL.search(kernel or "")
    if m is None:
        return None
    tile, size = ITEMSIZE.get(template_dtype(m.group(3))), ITEMSIZE.get(template_dtype(m.group(4)))
    return None if tile is None or size is None else (m.group(1), m.group(2), tile, size)


def _forward_tiles(shape: tuple) -> int | None:
    """The tiles of the Forward path's tile sets over its output of (N, C, H, W) `shape`: padded,
    16 a column of tiles where the output is one row of tiles (H at most 4) of at most 16 images
    (Nsight Compute on an H100, data gradients of N 1 to 8 and H x W 2x2 to 4x8: 16 for 1 to 8
    tiles of one column, 32 for 4 images of two columns); None elsewhere (not measured: cuDNN's
    heuristics chose the path for none of the larger shapes tried)."""
    n, _, h, w = shape
    return 16 * -(-w // _WINOGRAD_OUT) if h <= _WINOGRAD_OUT and n <= 16 else None


def winograd_transform(kernel: str | None, x: object, w: object, y: object, bprop: bool = False) -> tuple | None:
    """(FLOPs, bytes) of one of cuDNN's Winograd transforms for a 3x3 convolution of input `x`,
    weight `w` and output `y` (shapes; backward: y is dY's): the tensor it reads once in T2 and its
    tile set written in T1, 36 elements a tile. FLOPs 0: the convolution's FLOPs are on its GEMM
    (winograd_gemm), as with every helper. The weight gradient (Wgrad: dW = X correlated with dY,
    over dY's N x 4x4 tiles): Data reads X and writes C rows a tile, Delta reads dY and writes K,
    Output reads the GEMM's 36 K x C products and writes dW. A forward convolution's (Forward;
    `bprop`: the data gradient, dY to dX run as one, its source dY and its result dX): Filter reads W
    and writes 36 x K x C; Data reads the source and writes a row a tile per source channel, Output
    reads a row a tile per result channel and writes the result, over the padded tiles of
    _forward_tiles. ncu (conv_ncu_winograd.csv.xz and 16 more data gradients): the writes to the
    byte, the reads of X 1.0-1.17x these (overlapping tiles), the Forward path's reads and writes
    to the byte. None where the shapes do not say it: a Forward Data or Output of a result not
    measured (_forward_tiles), a filter that is not 3x3."""
    stage = winograd_stage(kernel)
    if stage is None or not all(_conv_shape(s) and len(s) == 4 for s in (x, w, y)) or tuple(w[2:]) != (3, 3):
        return None
    kind, part, tile, size = stage
    k, c, t = w[0], w[1], _winograd_tiles(y)
    if kind == "Forward" and part in ("Data", "Output"):
        (source, s_rows), (result, r_rows) = ((y, k), (x, c)) if bprop else ((x, c), (y, k))
        padded = _forward_tiles(tuple(result))
        if padded is None:
            return None
        if part == "Data":
            return 0, math.prod(source) * size + _WINOGRAD_TILE * s_rows * padded * tile
        return 0, _WINOGRAD_TILE * r_rows * padded * tile + math.prod(result) * size
    read, rows = {("Wgrad", "Data"): (math.prod(x), c * t), ("Wgrad", "Delta"): (math.prod(y), k * t),
                  ("Forward", "Filter"): (math.prod(w), k * c)}.get((kind, part), (None, None))
    if kind == "Wgrad" and part == "Output":
        return 0, _WINOGRAD_TILE * k * c * tile + math.prod(w) * size
    return None if read is None else (0, read * size + _WINOGRAD_TILE * rows * tile)


def winograd_gemm(x: object, w: object, y: object, tile: int) -> tuple | None:
    """(FLOPs, bytes) of the batched GEMM between a weight gradient's Winograd transforms
    (winograd_transform): for each of the 36 tile elements a K x C product over the N x 4x4 tiles
    of dY (2 x 36 x K x C x tiles FLOPs: what it executes, a quarter of the convolution's count
    for a 3x3 filter), reading both tile sets and writing the products, in `tile`-byte elements.
    ncu: its stores to the byte, its FFMAs 36 x K x C x (tiles + 0-1)."""
    if not all(_conv_shape(s) and len(s) == 4 for s in (x, w, y)):
        return None
    k, c, t = w[0], w[1], _winograd_tiles(y)
    return 2 * _WINOGRAD_TILE * k * c * t, _WINOGRAD_TILE * ((k + c) * t + k * c) * tile


# CUTLASS's implicit-GEMM convolution as cuDNN builds it: ImplicitGemmConvolution<..., Operator (0
# fprop, 1 dgrad, 2 wgrad), ..., GroupMode (0: none, the kernel convolves one group)>.
_CUTLASS_CONV = re.compile(r"\bImplicitGemmConvolution<.*\bconv::Operator\)(\d), .*\bconv::GroupMode\)(\d)>")


@lru_cache(maxsize=1024)
def ungrouped_wgrad(kernel: str | None) -> bool:
    """Whether a kernel is CUTLASS's weight gradient of no group mode (_CUTLASS_CONV: Operator 2,
    GroupMode 0)."""
    m = _CUTLASS_CONV.search(kernel or "")
    return m is not None and m.groups() == ("2", "0")


def one_group_wgrad(kernel: str | None, grid: object, x: object, w: object, y: object, flops: int | None,
                    size: int | None) -> tuple | None:
    """(FLOPs, bytes) of a CUTLASS weight-gradient kernel of no group mode (_CUTLASS_CONV: Operator
    2, GroupMode 0) for a convolution of g > 1 groups, input `x`, weight `w` and dY `y`: cuDNN
    launches one a group, each a group's share of the gradient's FLOPs `flops`, reading its
    slices of X and dY in `size`-byte elements and writing, split K over its grid's z, that many
    fp32 partials of the group's K/g x C/g·taps gradient (else the gradient once). ncu on
    RegNetY-400MF's 6-group 48-channel 3x3 convolution: 6 launches of grid z 13, each wrote
    13 x 8 x 72 fp32 (29,952 bytes), then a ReduceSplitK of 8 x 72. None for any other kernel or
    shape."""
    g = conv_groups(x, w, y)
    if not ungrouped_wgrad(kernel) or g < 2 or flops is None or size is None or not _conv_shape(y) \
            or launch_count(grid) is None:
        return None
    part = math.prod(w) // g
    splits = grid[2] if len(grid) == 3 else 1
    return flops // g, (math.prod(x) + math.prod(y)) // g * size + (splits * part * 4 if splits > 1 else part * size)
