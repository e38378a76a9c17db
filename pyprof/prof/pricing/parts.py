"""The helper kernels of an op call: work an op's formula does not count but its call launches;
and the stages of an op PyTorch runs as a sequence of kernels (Cost.stages), taken in turn.

An op's formula (registry.Cost) counts what the op computes; its main kernel carries that. The
call may launch more kernels that move real bytes: under `torch.autocast`, a matrix op (GEMM,
convolution, attention) first casts every floating-point tensor argument that is not in the
autocast dtype (`bfloat16_copy_kernel_cuda`, `float16_copy_kernel_cuda`), and its backward casts
each such argument's gradient back (`direct_copy_kernel_cuda`, a ToCopyBackward node). Each of
those is a `Part`: its kernel family, the elements it touches, its FLOPs and bytes. A call's parts
follow from its marker alone (the arguments' shapes and dtypes, the autocast dtype), so they are
known before its first kernel runs; analysis.Analyzer gives each helper kernel of the call the
part it matches (`CallParts.take`), and a part no kernel took costs nothing (autocast keeps one
cast of a weight per autocast region, so a second use of the weight launches no cast).

Which part a kernel is: the family must match and the part's element count must be one the
kernel's launch could cover. PyTorch's element-wise kernels run one block of `block` threads per
`block x k` elements (k, elements per thread, is 1 to 16), so `(grid - 1) x block < n <= grid x
block x 16`; of the parts that fit, the one nearest `grid x block x k` for the kernel's own k
(its template argument, or PyTorch's default 4) wins, so that an input and a weight of different
sizes go to their own casts whatever the order the kernels run in. A layout conversion of an
(N, C, spatial...) tensor runs one block per 32 x 32 tile of (spatial, channel) elements per
sample, a grid of [ceil(spatial / 32), ceil(C / 32), N]: the tensor whose grid is the kernel's is
the one converted (none where tensors of different sizes share the grid: na). The same tensor (or
a gradient of its shape) may be converted more than once, so those parts are never used up.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import NamedTuple

from .op_ranges import template_dtype
from .multitensor import Lists, is_launch
from .ops.memory import REVIEWED
from .registry import ATTN, CONV, GEMM, MATRIX_KINDS, MMA_KINDS, RNN, Call, Cost
from .values import FLOATING, ITEMSIZE, Tensor

COPY, SUM, ADD, LAYOUT, LAUNCH, FILL, SCALE, SPLIT_K = "copy", "sum", "add", "layout", "launch", "fill", "scale", "split-k"
BETA, EPILOGUE, BROADCAST = "beta", "epilogue", "broadcast"
WGRAD_SUM, CONTIGUOUS = "wgrad-sum", "contiguous"
PAD = "channel-pad"
# The math attention path's element-wise and softmax kernels (_math_attention).
SCALAR_MUL, MUL, SOFTMAX, NEGINF, ALL, WHERE = "scalar-mul", "mul", "softmax", "isneginf", "all", "where"
DOT_DO_O, CAST_DQ, REDUCE_HEAD = "dot-do-o", "cast-dq", "reduce-head"
# Flash attention's backward (PyTorch's flash_bwd_*, cuDNN's fusion::*) runs its main kernel
# between two helpers: one takes D = rowsum(dO * O) per query row, one casts dQ, accumulated in
# fp32, down to the op's dtype.
_DOT_DO_O_KERNEL = re.compile(r"dot_do_o")
_CAST_DQ_KERNEL = re.compile(r"convert_dq")
_REDUCE_HEAD_KERNEL = re.compile(r"\bfmha_reduce_head<")
# PyTorch's copy kernels, which also cast: `bfloat16_copy_kernel_cuda`, `direct_copy_kernel_cuda`.
_COPY_KERNEL = re.compile(r"\w+_copy_kernel_cuda")
# Of those, the one a copy between tensors of one dtype runs (a cast into 16 bits runs its own).
_DIRECT_COPY = re.compile(r"\bdirect_copy_kernel_cuda\b")
# Its copies that cast nothing (CONTIGUOUS): a strided tensor made contiguous in its own dtype. PyTorch
# runs a copy between two dtypes through LoadWithCast/StoreWithCast or gpu_kernel_impl (dynamic
# casting); a vectorized kernel or gpu_kernel_impl_nocast only where the dtypes are the same.
_SAME_DTYPE_COPY = re.compile(
    r"\b(?:gpu_kernel_impl_nocast|vectorized_elementwise_kernel)<[^<>]*?\bdirect_copy_kernel_cuda")
# PyTorch's sum and mean reductions (a bias gradient, a loss's closing reduction).
_SUM_KERNEL = re.compile(r"\breduce_kernel<.*\b(?:sum_functor|MeanOps)<")
# cuDNN's scaling of an output by beta before a kernel accumulates into it; PyTorch passes beta 0,
# and cuDNN never reads an output scaled by 0 (its documented contract): the output zeroed.
_SCALE_KERNEL = re.compile(r"\bscalePackedTensor_kernel<")
# cuBLASLt's reduction of a split-K GEMM's partial products: splitKreduce_kernel<rows x cols
# tile: (int)32, (int)16, int, partials' type, ...>, one block per 32 output columns and 16 rows.
_SPLIT_K_KERNEL = re.compile(r"\bsplitKreduce_kernel<\(int\)(\d+), \(int\)(\d+)")
# CUTLASS's (cuDNN's cutlass kernels') reduction of a split-K convolution's partial products:
# ReduceSplitK<MatrixShape<rows, cols>, ..., ReduceAdd<partials' type, ...>>, one block per rows x
# cols tile of the output, the grid's x over its rows and y over its columns.
_CUTLASS_SPLIT_K = re.compile(r"\bReduceSplitK<[\w:]*MatrixShape<\(int\)(\d+), \(int\)(\d+)>.*?\bReduceAdd<([\w:]+),")
# cuDNN's sum of the per-sample weight gradients of an NCHW convolution's GEMM (one thread per
# weight element): reduce_wgrad_nchw_helper<partials' type, weight's type>.
_WGRAD_SUM_KERNEL = re.compile(r"\breduce_wgrad_nchw_helper<([^,<>]+), ([^,<>]+)>")
# cuDNN's copy of an NHWC tensor between its C channels and C padded up for a Tensor Core kernel
# (either way: the same kernel strips the padding off a gradient).
_PAD_KERNEL = re.compile(r"\bnhwcAddPaddingKernel<")
_ADD_KERNEL = re.compile(r"elementwise_kernel<.*\bCUDAFunctor_add<")
# cuBLAS's scaling of a GEMM's output by beta (scal_kernel) before a split-K kernel accumulates
# into it (sgemm_largek's grid z); PyTorch passes beta 0: the output zeroed, written once.
_BETA_KERNEL = re.compile(r"\bscal_kernel<")
# cuBLASLt's epilogue run as a kernel of its own after a GEMM kernel that cannot fuse it: the bias
# PyTorch's addmm hands it (CUBLASLT_EPILOGUE_BIAS) added to every output element.
_EPILOGUE_KERNEL = re.compile(r"\bcublasLt::epilogue::impl::globalKernel<")
_LAYOUT_KERNEL = re.compile(r"\b(?:nchwToNhwc|nhwcToNchw)Kernel<")
_FILL_KERNEL = re.compile(r"\bFillFunctor<")
_LAYOUT_TILE = 32
# A fused attention kernel (flash, memory-efficient, cuDNN's): not one of the math path's GEMMs.
_FUSED_ATTENTION = re.compile(r"fmha|flash|attention|sdpa|attn|_mha", re.IGNORECASE)
# The families PyTorch launches by its per-thread rule (TensorIterator element-wise kernels).
_ELEMENTWISE = frozenset((COPY, CONTIGUOUS, BROADCAST, ADD, FILL, SCALAR_MUL, MUL, NEGINF, WHERE))
# Elements per thread that a TensorIterator kernel's name states: elementwise_kernel<threads, k>
# and vectorized_elementwise_kernel<vector width, ...>.
_PER_THREAD = re.compile(r"\belementwise_kernel<\(int\)\d+, \(int\)(\d+)|vectorized_elementwise_kernel<\(int\)(\d+)")
_MAX_PER_THREAD = 16
# cuDNN's scaling kernel runs one thread per element.
_ONE_PER_THREAD = frozenset((SCALE,))
_DEFAULT_PER_THREAD = 4  # PyTorch's thread_work_size for the unrolled kernels
# A vectorized kernel's thread handles at least 8 elements, in vectors of its width: relu's
# vectorized<4> on fp32 runs 5 blocks of 128 threads for 4,704 elements (examples/lenet.sqlite).
_VECTOR_PER_THREAD = 8


class Part(NamedTuple):
    """One helper kernel's work: its family (COPY, ...), the elements it reads and writes, FLOPs,
    bytes; for LAYOUT the launch grid that converts it."""

    family: str
    numel: int
    flops: int
    bytes: int
    grid: tuple | None = None


# The helper families by their kernels' names, the first match winning (a name can hold two).
_FAMILIES = ((CONTIGUOUS, _SAME_DTYPE_COPY), (COPY, _COPY_KERNEL), (LAYOUT, _LAYOUT_KERNEL), (FILL, _FILL_KERNEL),
             (SCALE, _SCALE_KERNEL), (SPLIT_K, _SPLIT_K_KERNEL), (SPLIT_K, _CUTLASS_SPLIT_K),
             (WGRAD_SUM, _WGRAD_SUM_KERNEL), (PAD, _PAD_KERNEL),
             (DOT_DO_O, _DOT_DO_O_KERNEL), (CAST_DQ, _CAST_DQ_KERNEL), (REDUCE_HEAD, _REDUCE_HEAD_KERNEL),
             (SUM, _SUM_KERNEL), (ADD, _ADD_KERNEL), (BETA, _BETA_KERNEL), (EPILOGUE, _EPILOGUE_KERNEL)
             ) + tuple((fam, re.compile(pattern)) for fam, pattern in (
                 # The math attention path's: a tensor times a scalar, times a tensor, softmax and
                 # _safe_softmax's isneginf, all() and where.
                 (SCALAR_MUL, r"\b[AB]UnaryFunctor<[^<>]*\bMulFunctor<"), (MUL, r"\bBinaryFunctor<[^<>]*\bMulFunctor<"),
                 (SOFTMAX, r"\bsoftmax_warp_(?:forward|backward)<|\bcunn_SoftMax(?:Forward|Backward)"),
                 (NEGINF, r"\bisneginf_kernel_impl\b"), (ALL, r"\breduce_kernel<.*\band_kernel_cuda\b"),
                 (WHERE, r"\bwhere_kernel_impl\b")))


@lru_cache(maxsize=4096)
def family(kernel: str | None) -> str | None:
    """The helper family of a kernel from its demangled name (_FAMILIES; LAUNCH: a multi-tensor
    launch), or None."""
    if not kernel:
        return None
    if is_launch(kernel):
        return LAUNCH
    return next((fam for fam, pattern in _FAMILIES if pattern.search(kernel)), None)


@lru_cache(maxsize=4096)
def _legacy_per_thread(kernel: str | None) -> int | None:
    """k of PyTorch's legacy elementwise_kernel<threads, k> (not the vectorized or unrolled ones,
    whose elements per thread vary with the dtypes), else None."""
    m = _PER_THREAD.search(kernel or "")
    return int(m.group(1)) if m is not None and m.group(1) else None


@lru_cache(maxsize=4096)
def _per_thread(kernel: str) -> int:
    m = _PER_THREAD.search(kernel)
    if m is None:
        return _DEFAULT_PER_THREAD
    return int(m.group(1)) if m.group(1) else max(int(m.group(2)), _VECTOR_PER_THREAD)


def autocast_casts(marker: dict, cost: Cost | None) -> list[tuple[Tensor, str]]:
    """(argument, the dtype autocast casts it to) for each tensor an autocast region may cast
    before the op runs: for the matrix ops it runs in lower precision, every floating-point
    argument not in its dtype; for the others, every argument in its dtype, cast up to float32
    where the op is one autocast runs in float32 (norms, softmax, losses: a cast no kernel
    takes costs nothing where it is not)."""
    low = marker.get("autocast")
    if cost is None or low not in ITEMSIZE:
        return []
    floating = [t for t in _operands(Call(marker)) if t.dtype in FLOATING and t.numel]
    if cost.kind in MATRIX_KINDS:
        return [(t, low) for t in floating if t.dtype != low]
    return [(t, "float32") for t in floating if t.dtype == low]


def _operands(call: Call) -> list[Tensor]:
    """Every tensor argument, those inside a list too (an RNN's weights)."""
    out = []
    for v in (*call.args, *(v for k, v in call.kwargs.items() if k != "out")):
        out += [t for t in v if isinstance(t, Tensor)] if isinstance(v, list) else [v] if isinstance(v, Tensor) else []
    return out


def _flat_weights(marker: dict, cost: Cost | None, bprop: bool = False) -> list[Part]:
    """An RNN's flat weight buffer, zeroed (a fill written once): under autocast before the
    weights are cast into it, in the autocast dtype, and its gradient buffer in backward
    (_casts_back); without autocast (`bprop`) the gradient buffer alone, in the op's dtype,
    before cuDNN accumulates the weight gradients into it."""
    low = marker.get("autocast")
    if bprop:
        low = None if low is not None or cost is None else cost.dtype
    if cost is None or cost.kind != RNN or low not in ITEMSIZE:
        return []
    weights = sum(t.numel for v in Call(marker).args if isinstance(v, list) for t in v if isinstance(t, Tensor))
    return [Part(FILL, weights, 0, weights * ITEMSIZE[low])] if weights else []


def _final_state_grads(cost: Cost) -> list[Part]:
    """An RNN backward's zeroed gradients of the final states h_n (and LSTM's c_n), layers x
    directions x N x R (H), written in the op's dtype: _cudnn_rnn_backward makes them where the
    loss did not use the states (kernel_truth's gru: a 12,288-element fp16 fill), whether or not
    h0 required grad."""
    s, size = cost.rnn, ITEMSIZE.get(cost.dtype)
    if cost.kind != RNN or s is None or size is None:
        return []
    units = s.layers * s.dirs * s.batch
    return [Part(FILL, units * n, 0, units * n * size) for n in ((s.rec, s.hidden) if s.gates == 4 else (s.rec,))]


def forward_parts(marker: dict, cost: Cost | None) -> list[Part]:
    """The helper kernels of an op call's forward: autocast's casts (source read, copy written),
    what a matrix op's call does to its output besides computing it (output_parts: a bias added
    apart, one add per output element; the op's own formula counts none for its bias, as
    FlopCounterMode does, so that matrix FLOPs stay its count), cuDNN's layout conversions, its
    scaling of a convolution's output and its channel padding."""
    return (_inputs(marker, cost) + output_parts(cost) + _layouts(marker, cost) + _scaled(marker, cost, False)
            + channel_pads(marker, cost, False))


def _inputs(marker: dict, cost: Cost | None) -> list[Part]:
    """What a forward call does to its inputs before computing: autocast's casts (source read, copy
    written), an RNN's flat weight buffer, the math attention path's kernels."""
    casts = [Part(COPY, t.numel, 0, t.numel * (ITEMSIZE[t.dtype] + ITEMSIZE[to])) for t, to in autocast_casts(marker, cost)]
    return casts + _flat_weights(marker, cost) + _math_attention(marker, cost, False)


def output_parts(cost: Cost | None) -> list[Part]:
    """What a matrix op's forward call may do to its output besides computing it, in the dtype the
    op ran in: a bias added apart (output and bias read, output written: one add per output
    element), by PyTorch (an add kernel) or by cuBLASLt's epilogue kernel; for a GEMM, also the
    bias broadcast into the output before a GEMM with beta 1 (PyTorch's addmm off cuBLASLt's bias
    epilogue: the bias read, the output written; a copy in one dtype, taken by
    `direct_copy_kernel_cuda` only, not by autocast's casts) and cuBLAS's zeroing of the output before a
    split-K kernel accumulates into it (written once). From the op's Cost alone: a marker's or
    an aten range's (aten::addmm)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind not in MMA_KINDS or not cost.out_elems or not size:
        return []
    out, bias = cost.out_elems, cost.bias_elems
    parts = [Part(BETA, out, 0, out * size)] if cost.kind == GEMM else []
    if not bias:
        return parts
    added = [Part(fam, out, out, (2 * out + bias) * size) for fam in ((ADD, EPILOGUE) if cost.kind == GEMM else (ADD,))]
    return added + parts + ([Part(BROADCAST, out, 0, (out + bias) * size)] if cost.kind == GEMM else [])


def _scaled(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """cuDNN's scaling (by beta, 0: zeroed, written once) of what a convolution writes: forward its
    output, backward the gradients of its input and weight, in the dtype the op ran in."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size:
        return []
    n = [t.numel for t in Call(marker).tensors()[:2]] if bprop else [cost.out_elems]
    return [Part(SCALE, e, 0, e * size) for e in n if e]


def _layouts(marker: dict, cost: Cost | None) -> list[Part]:
    """A convolution's tensors as cuDNN's layout conversions move them: input, weight, output
    (or gradients of their shapes), each read and written once in the dtype the op ran in."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size or not cost.out_shape:
        return []
    return layout_parts([t.shape for t in Call(marker).tensors()[:2]] + [cost.out_shape], size)


def layout_parts(shapes: list, size: int) -> list[Part]:
    """The layout conversions of a convolution's (N, C, spatial...) tensors of `shapes`, each read
    and written once in `size`-byte elements: from a marker, or from the shapes of a PyTorch range
    (range_parts)."""
    return [Part(LAYOUT, math.prod(s), 0, 2 * math.prod(s) * size, _layout_grid(tuple(s))) for s in shapes
            if _conv_shape(s)]


def _conv_shape(s: object) -> bool:
    """Whether `s` is an (N, C, spatial...) shape: a list of 3 or more positive ints."""
    return isinstance(s, (list, tuple)) and len(s) >= 3 and all(type(d) is int and d > 0 for d in s)


def range_parts(sizes: list, cost: Cost | None, kernel: str | None, bprop: bool) -> list[Part]:
    """The helper parts of a convolution priced from its PyTorch range (op_ranges.py) rather than
    a marker, from the range's shapes (forward: input, weight; backward, aten::convolution_backward:
    dY, input, weight) and the forward's output, whose shape the formula had from a consumer: their
    layout conversions and, backward, cuDNN's sum of the per-sample weight gradients, written in the
    weight's type `kernel`'s name states (a range's cost is priced per kernel: from this one's
    name, the partials' type). Taken as a marker's parts are (CallParts.take)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    if cost is None or cost.kind != CONV or not size:
        return []
    shapes = sizes[:3] + ([cost.out_shape] if cost.out_shape else [])
    x, w = range_conv_tensors(sizes, bprop)
    wgrad = wgrad_sum(x[0], math.prod(w), wgrad_sum_dtype(kernel or "") or cost.dtype) \
        if bprop and _conv_shape(x) and _conv_shape(w) else None
    return layout_parts(shapes, size) + ([] if wgrad is None else [wgrad])


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


def _casts_back(marker: dict, cost: Cost | None) -> list[Part]:
    return [p for p in _inputs(marker, cost) + _layouts(marker, cost) if p.family in (COPY, LAYOUT, FILL)]


def _gradients(marker: dict, cost: Cost | None) -> list[Part]:
    """What a backward may do to an argument's gradient besides computing it, one part per
    floating-point tensor argument that may require grad (the marker's `grad`), of its shape
    and dtype, the kernel's launch picking which
    (CallParts.take): its zero fill before a kernel scatters or accumulates into it (max
    pooling's and mse_loss's dInput; `grad_fill`, written in the op's dtype, where the formula
    declares the one), and the autograd engine's accumulation of it into the gradient an earlier
    node left (an add per element: both read, the sum written)."""
    if cost is None:
        return []
    args = [t for t in _operands(Call(marker)) if t.dtype in FLOATING and t.numel and t.grad is not False]
    size = ITEMSIZE.get(cost.dtype)
    fills = [Part(FILL, cost.grad_fill, 0, cost.grad_fill * size)] if cost.grad_fill and size else [
        Part(FILL, t.numel, 0, t.numel * ITEMSIZE[t.dtype]) for t in args] + _flat_weights(marker, cost, True) \
        + _final_state_grads(cost)
    return fills + [Part(ADD, t.numel, t.numel, 3 * t.numel * ITEMSIZE[t.dtype]) for t in args]


def backward_parts(marker: dict, cost: Cost | None) -> list[Part]:
    """The helper kernels of the op's backward: a gradient's zero fill and accumulation (_gradients), the bias
    gradient (the output gradient summed: it read and the bias written, in the dtype the op ran
    in; E - O adds for E output elements into O bias elements), cuDNN's scaling of the gradients
    (_scaled), a convolution's output gradient or a view's made contiguous (_contiguous_grad,
    _view_grad_copy), each cast's gradient cast back (ToCopyBackward) and cuDNN's channel padding
    (channel_pads), for the arguments that need a gradient. Which do is not in the marker; a part
    that never ran is one no kernel takes."""
    grads = _gradients(marker, cost)
    if cost is None or cost.kind not in MMA_KINDS:
        return grads + _casts_back(marker, cost) + _view_grad_copy(marker)
    size = ITEMSIZE.get(cost.dtype)
    if cost.kind == ATTN:
        c = Call(marker)
        return flash_helpers(c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value"), size) + \
            _math_attention(marker, cost, True) + grads + _casts_back(marker, cost)
    bias = [Part(SUM, cost.out_elems, cost.out_elems - cost.bias_elems, (cost.out_elems + cost.bias_elems) * size)
            ] if cost.bias_elems and cost.out_elems and size else []
    return bias + grads + _scaled(marker, cost, True) + _wgrad_sum(marker, cost) + _contiguous_grad(cost, size) \
        + _casts_back(marker, cost) + channel_pads(marker, cost, True)


def _view_grad_copy(marker: dict) -> list[Part]:
    """A view's backward, the gradient viewed back to the input's shape (memory.REVIEWED), copied
    where it arrives strided (a reshape's): the input's elements read and written in its dtype."""
    if marker.get("mod") not in ("torch", "Tensor") or marker.get("op") not in REVIEWED:
        return []
    x = Call(marker).tensor(0, "input")
    size = None if x is None else ITEMSIZE.get(x.dtype)
    return [Part(CONTIGUOUS, x.numel, 0, 2 * x.numel * size)] if size and x.numel else []


def _contiguous_grad(cost: Cost, size: int | None) -> list[Part]:
    """A convolution's output gradient copied into a contiguous tensor (read and written in the
    op's dtype) before cuDNN reads it, where it arrives as a strided view (the gradient of a
    slice of a cat's output: a U-Net's skip connections)."""
    n = cost.out_elems
    return [Part(CONTIGUOUS, n, 0, 2 * n * size)] if cost.kind == CONV and n and size else []


# The channel multiple cuDNN pads a 16-bit convolution's NHWC tensors to (nhwcAddPaddingKernel):
# forward 4, for sm90's image_first_layer fprop kernel (`k64c4r7s7`: 4 channels); backward 8, the
# 16-byte vectors of the dgrad and CUTLASS wgrad kernels (AlignedArray<half_t, 8>). ncu on
# ResNet-18's 3-channel stem (tests/data/kernel_truth/conv_ncu_resnet.csv.xz): the forward's image
# read 2,408,448 bytes (8x3x224x224 fp16), wrote 3.9 MB (8x4x224x224: 3,211,264; the write
# sectors over-count partial writes by 1.1-1.2x); the backward's wrote 7.1 MB (8 channels:
# 6,422,528), and the CUTLASS wgrad's split-K partials are 64 x 7·7·8 fp32 (2,910,208 bytes, exact).
_PAD_MULTIPLE = {False: 4, True: 8}


def channel_pads(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """cuDNN's channel padding of a 16-bit convolution whose channels C are not a multiple of
    _PAD_MULTIPLE, in launch order (CallParts.take gives each such kernel the first left): each
    copy reads the tensor in one channel count and writes it in the other (C·rest + C'·rest
    elements, no FLOPs). Forward the input, then the weight. Backward the weight padded and the
    input's gradient stripped around the data-gradient kernel where the input requires grad, then
    the input padded and the weight's gradient stripped around the weight-gradient kernel where
    the weight does; none where the marker does not say which require grad (an old marker: the
    first kernel could be either). The launch grid (2 blocks per SM, grid-stride) tells none
    apart. Grouped convolutions: none (not seen)."""
    size = None if cost is None else ITEMSIZE.get(cost.dtype)
    tensors = Call(marker).tensors()[:2] if cost is not None and cost.kind == CONV and size == 2 else []
    if len(tensors) < 2 or any(len(t.shape or ()) < 3 or not t.numel for t in tensors) \
            or tensors[0].shape[1] != tensors[1].shape[1]:
        return []
    x, w = tensors
    multiple = _PAD_MULTIPLE[bprop]
    c = x.shape[1]
    wide = -(-c // multiple) * multiple
    if wide == c:
        return []
    px, pw = (Part(PAD, t.numel, 0, (t.numel + t.numel // c * wide) * size) for t in tensors)
    if not bprop:
        return [px, pw]
    if x.grad is None or w.grad is None:
        return []
    return ([pw, px] if x.grad else []) + ([px, pw] if w.grad else [])


def _wgrad_sum(marker: dict, cost: Cost) -> list[Part]:
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
    partial = 8 if dtype == "float64" else 4
    return Part(WGRAD_SUM, w, (n - 1) * w, n * w * partial + w * size)


def wgrad_sum_dtype(kernel: str) -> str | None:
    """The gradient's dtype a reduce_wgrad_nchw_helper<partials' type, weight's type> writes."""
    m = _WGRAD_SUM_KERNEL.search(kernel)
    return template_dtype(m.group(2)) if m else None


def flash_helpers(q: Tensor | None, k: Tensor | None, v: Tensor | None, size: int | None) -> list[Part]:
    """Flash attention's backward helpers over R = batch x heads x L query rows: D = rowsum(dO * O)
    (2 FLOPs an element of O; dO and O read, D written in fp32), which also zeroes dQ's fp32
    accumulator (R x E written: FlashAttention-2's Clear_dQaccum; cuDNN's counted bytes, within 3%
    of ncu's on llama_block), and dQ's cast from that accumulator (read in fp32, written in the
    op's dtype); with fewer key/value heads than query heads (grouped-query attention), cuDNN's
    fmha_reduce_head sums dK's and dV's per-query-head copies into their heads (the copies read,
    the sums written in the op's dtype). From the query, key and value of a marker or of the
    backward op's range (aten::_scaled_dot_product_*_attention_backward); none when the query or
    value is not known."""
    if q is None or v is None or not q.shape or not v.shape or size is None:
        return []
    rows = math.prod(q.shape[:-1])
    out = rows * v.shape[-1]
    dq = rows * q.shape[-1]
    parts = [Part(DOT_DO_O, out, 2 * out, 2 * out * size + rows * 4 + dq * 4), Part(CAST_DQ, dq, 0, dq * (4 + size))]
    if k is None or len(q.shape) < 3 or len(k.shape) != len(q.shape) or k.shape[-3] >= q.shape[-3] or not k.numel:
        return parts
    group = q.shape[-3] // k.shape[-3]
    return parts + [Part(REDUCE_HEAD, t.numel * group, t.numel * (group - 1), t.numel * (group + 1) * size)
                    for t in (k, v)]


def _math_attention(marker: dict, cost: Cost | None, bprop: bool) -> list[Part]:
    """The math attention path's kernels besides its GEMMs (where the op's formula defines the
    path: ops/attention.py's stages), over Q, K, V (n each), the B·H·L x S scores (ns) and the
    output (no), in fp32 (fp64 for a float64 op): a 16-bit op's Q, K and V cast up first (read in
    its dtype, written in fp32); Q and Kᵀ each scaled by √scale (1 FLOP an element, read and
    written); softmax over the scores (5 an element, read and written), then _safe_softmax's
    isneginf of the scores (read, a bool written: 1 an element), their all() per row (the bools
    read, (ns - rows) ands, a bool per row written), a 0-d zero (a fill) and the where (1 an
    element: the row bools and the probabilities read, ns written); the probabilities and the output
    cast back to the op's dtype. Backward: dO cast up, dP·P (1 an element: two read, one
    written), softmax's backward (4 an element: two read, one written), dK and dQ scaled by √scale,
    and dQ, dK, dV cast back."""
    if cost is None or cost.kind != ATTN or cost.stages is None:
        return []
    c = Call(marker)
    q, k, v = c.tensor(0, "query"), c.tensor(1, "key"), c.tensor(2, "value")
    size = ITEMSIZE.get(cost.dtype)
    if q is None or k is None or v is None or not q.shape or size is None:
        return []
    acc = 8 if cost.dtype == "float64" else 4
    rows = q.numel // q.shape[-1]
    ns, no = rows * k.shape[-2], rows * v.shape[-1]
    up = size == 2  # 16-bit inputs run in fp32

    def casts(*ns_: int) -> list[Part]:
        return [Part(COPY, n, 0, n * (size + acc)) for n in ns_] if up else []
    if bprop:
        return casts(no) + [Part(MUL, ns, ns, 3 * ns * acc), Part(SOFTMAX, ns, 4 * ns, 3 * ns * acc)] + [
            Part(SCALAR_MUL, t.numel, t.numel, 2 * t.numel * acc) for t in (k, q)] + casts(q.numel, k.numel, v.numel)
    return casts(q.numel, k.numel, v.numel) + [Part(SCALAR_MUL, t.numel, t.numel, 2 * t.numel * acc) for t in (q, k)] + [
        Part(SOFTMAX, ns, 5 * ns, 2 * ns * acc), Part(NEGINF, ns, ns, ns * (acc + 1)),
        Part(ALL, ns, ns - rows, ns + rows), Part(FILL, 1, 0, acc), Part(WHERE, ns, ns, rows + 2 * ns * acc)
    ] + casts(ns, no)


def math_attention_gemm(kernel: str | None) -> bool:
    """Whether an attention call's matrix kernel is one of the math path's batched GEMMs, not a
    fused attention kernel (flash, memory-efficient, cuDNN's)."""
    return _FUSED_ATTENTION.search(kernel or "") is None


def split_pass(kernel: str | None) -> bool:
    """Whether a kernel with a GEMM's name is cuBLAS's split-K pass after the GEMM (xmma's
    `..._cute_split_k_kernel__5x_cublas`, `..._execute_split_k_kernel`): it sums the partial
    products the GEMM's grid z left, it computes no product."""
    return "split_k_kernel" in (kernel or "")


def split_k(kernel: str, grid: object, splits: int | None, outputs: list, size: int | None) -> tuple | None:
    """(FLOPs, bytes) of a split-K reduction: `splits` partial products of the GEMM output (read
    in the type its name states: cuBLASLt's partials' third type argument, CUTLASS's ReduceAdd's
    first), summed (splits - 1 adds an element) and written once in `size`-byte elements.
    `outputs`: the (rows, cols) the output may be (a backward's gradients); the one whose tiles
    make the grid is taken: cuBLASLt's splitKreduce_kernel<cols, rows> one block per 32 columns
    (x) and 16 rows (y), else the one whose rows need at least its y blocks (a long output strides
    over a capped grid: 1000 rows in 21 blocks); CUTLASS's ReduceSplitK<MatrixShape<rows, cols>>
    its rows in x and its columns in y. None when the splits, the output or the types are not
    known, or two outputs fit."""
    cublas, cutlass = _SPLIT_K_KERNEL.search(kernel), _CUTLASS_SPLIT_K.search(kernel)
    partial = ITEMSIZE.get(template_dtype(kernel) if cutlass is None else template_dtype(cutlass.group(3)))
    if cublas is None and cutlass is None or not splits or splits < 2 or partial is None or size is None \
            or not isinstance(grid, list) or len(grid) < 2 or not all(type(d) is int and d > 0 for d in grid):
        return None
    if cublas is not None:
        cols, rows = int(cublas.group(1)), int(cublas.group(2))
        wide = [(r, c) for r, c in outputs if -(-c // cols) == grid[0]]
        fits = {r * c for r, c in wide if grid[1] == -(-r // rows)} or \
            {r * c for r, c in wide if grid[1] < -(-r // rows)}
    else:
        rows, cols = int(cutlass.group(1)), int(cutlass.group(2))
        fits = {r * c for r, c in outputs if (-(-r // rows), -(-c // cols)) == (grid[0], grid[1])}
    if len(fits) != 1:
        return None
    out = fits.pop()
    return (splits - 1) * out, splits * out * partial + out * size


# cub's single-pass scans (DeviceScan, unique-by-key, select) first initialise their tile-status
# array: DeviceScanInitKernel<ScanTileState<T, (bool)1>> and DeviceCompactInitKernel<ScanTileState<T,
# (bool)1>, counter type *>, which also zeroes the count of selected items.
_TILE_INIT = re.compile(r"\bDevice(Scan|Compact)InitKernel<[\w:]*ScanTileState<([^<>]+), \(bool\)1>"
                        r"(?:, ([^<>]+?) \*>)?")
_TILE_STATUS_PADDING = 32  # cub's warp of out-of-bounds descriptors before the first tile's


def tile_init(kernel: str | None, grid: object, block: object) -> tuple | None:
    """(FLOPs, bytes) of cub's tile-status initialisation, which its launch alone states: one
    thread per tile writes its descriptor (T's status word and value: 2 x sizeof(T), the one
    transaction word of a primitive T), and 32 padding descriptors before them; the compaction's
    kernel writes its selected-item counter too. cub launches ceil(tiles / block) blocks, so the
    tiles are told to within the last block: counted the fewest the grid implies,
    (grid - 1) x block + 1 (the padding dominates a one-block grid: 528 bytes for ncu's 544 with
    two tiles, exact with one). Nothing is read. None for any other kernel or a type not known."""
    m = _TILE_INIT.search(kernel) if kernel and "InitKernel<" in kernel else None
    if m is None:  # every kernel comes here: the name first, the launch only for cub's
        return None
    g, b = _threads(grid), _threads(block)
    if g is None or b is None:
        return None
    value = ITEMSIZE.get(template_dtype(f"<{m.group(2)}>"))  # as a template argument
    counter = ITEMSIZE.get(template_dtype(f"<{m.group(3)}>")) if m.group(1) == "Compact" else 0
    if not value or counter is None:
        return None
    return 0, ((g - 1) * b + 1 + _TILE_STATUS_PADDING) * 2 * value + counter


def split_sum(splits: int | None, out: int, size: int | None) -> tuple | None:
    """(FLOPs, bytes) of a pass summing `splits` fp32 partials of an `out`-element output (xmma's
    split-K pass after a GEMM or a segment-K weight gradient): splits - 1 adds an element, the
    partials read, the output written once in `size`-byte elements (bytes None where `size` is);
    None where nothing was split."""
    if not splits or splits < 2:
        return None
    return (splits - 1) * out, None if size is None else splits * out * 4 + out * size


def conv_outputs(input_shape: object, weight_shape: object, out_shape: object, bprop: bool,
                 size: int | None = None) -> list:
    """(rows, cols) of the matrices a convolution's implicit GEMMs write: forward the output as
    (N·spatial, K); backward the input's gradient (N·spatial, C) and the weight's (K, C/g·taps),
    for a 16-bit op (`size` 2) whose C is no multiple of 8 with C padded to 8 (channel_pads: the
    weight gradient is computed on the padded tensors; CUTLASS's split-K wgrad of a 3-channel stem
    wrote 29 partials of 64 x 7·7·8 for ResNet-18's, 23 of 64 x 3·3·8 for a CIFAR one: ncu). Shapes
    that are not lists of positive ints are left out."""
    if not bprop:
        return [(math.prod(out_shape) // out_shape[1], out_shape[1])] if _conv_shape(out_shape) else []
    out = [(math.prod(input_shape) // input_shape[1], input_shape[1])] if _conv_shape(input_shape) else []
    if not _conv_shape(weight_shape):
        return out
    k, c, taps = weight_shape[0], weight_shape[1], math.prod(weight_shape[2:])
    wide = -(-c // _PAD_MULTIPLE[True]) * _PAD_MULTIPLE[True]
    return out + [(k, (wide if size == 2 else c) * taps)]


# A GEMM kernel's tile (M x N) as cuBLAS, cuBLASLt, CUTLASS and xmma names spell it: nvjet_sm90_hsh_64x8_...,
# ..._tilesize64x64x8_..., cutlass_80_simt_sgemm_64x64_8x5_...
_GEMM_TILE = re.compile(r"(?:tilesize|_)(\d+)x(\d+)(?:x\d+)?_")
# xmma's segment-K weight gradient: `..._wgrad_..._execute_segment_k_on_kernel` computes the
# gradient's GEMM (K x C·taps over N·spatial) in segments of the reduction, each tile's segments one
# block apiece, and writes every segment's partial tile in fp32; `..._execute_split_k_kernel` then
# sums them into the gradient (split_pass).
_SEGMENT_K = re.compile(r"_wgrad_\w*_execute_segment_k_on_kernel")


def wgrad_segments(kernel: str | None, grid: object, weight_shape: object) -> int | None:
    """The reduction segments of an xmma segment-K weight-gradient kernel (_SEGMENT_K): its grid's
    blocks over the gradient's tiles (tile M x N from the name, over K rows and C·taps columns;
    ResNet-18's 64x64x3x3 weights in 64x64 tiles: 9 tiles, grid 117, 13 segments, and ncu saw it
    write 13 x 64 x 576 fp32 partials, 1,916,928 bytes, exact). None for any other kernel, and
    where the blocks are no whole number (2 or more) of segments a tile: a grid of 48 for those 9
    tiles (batch 2) wrote no such partials and ran no split-K kernel after it (ncu)."""
    m = _GEMM_TILE.search(kernel or "") if _SEGMENT_K.search(kernel or "") else None
    blocks = _threads(grid)
    if m is None or blocks is None or not _conv_shape(weight_shape):
        return None
    tiles = -(-weight_shape[0] // int(m.group(1))) * -(-math.prod(weight_shape[1:]) // int(m.group(2)))
    segments, left = divmod(blocks, tiles)
    return segments if not left and segments >= 2 else None


def tensor_lists(marker: dict, cost: Cost | None) -> Lists | None:
    """The tensor lists of an optimizer step's marker (`kwargs.params`: count and numel) for its
    multi-tensor launches (multitensor.py), or of GradScaler's unscale (the gradients); None for
    any other call."""
    params = (marker.get("kwargs") or {}).get("params")
    if cost is None or not isinstance(params, dict):
        return None
    numel, count = params.get("numel"), params.get("count")
    if type(numel) is not int or type(count) is not int or numel <= 0 or count <= 0:
        return None
    fused = bool((marker.get("kwargs") or {}).get("fused"))
    # One op over the lists (a fused step, GradScaler's unscale), not a sequence of foreach ops:
    # every launch does the formula's FLOPs per element.
    per = cost.flops // numel if not cost.composite and cost.flops is not None else None
    sizes = params.get("numels")
    ok = isinstance(sizes, list) and len(sizes) == count and all(type(n) is int and n >= 0 for n in sizes) \
        and sum(sizes) == numel
    return Lists(numel, count, per, fused, sizes if ok else None)



def gemm_tiles(kernel: str | None, grid: object) -> tuple | None:
    """(tile M, tile N, the grid's x * y blocks) of a GEMM launch whose name states its tile
    (_GEMM_TILE; z splits K or batches); None where the name states none or the grid is not
    positive ints."""
    m = _GEMM_TILE.search(kernel or "")
    if m is None or _threads(grid) is None or len(grid) < 2:
        return None
    return int(m.group(1)), int(m.group(2)), grid[0] * grid[1]


def tiled_outputs(kernel: str | None, grid: object, outputs: list) -> list:
    """The distinct (rows, cols) among `outputs` (the matrices a GEMM call may write) whose tiles,
    M x N as the kernel's name states them (either way round), make its grid's x * y blocks (z
    splits K): a backward's input and weight gradients of one shape are one output, its bias
    gradient not a tiled one. All of them, distinct, where the name states no tile or the grid is
    not 3 ints."""
    distinct = list(dict.fromkeys(outputs))
    tiles = gemm_tiles(kernel, grid)
    if tiles is None:
        return distinct
    a, b, blocks = tiles
    return [(r, c) for r, c in distinct
            if blocks in (-(-r // a) * -(-c // b), -(-r // b) * -(-c // a))]


class CallParts:
    """The parts of one op call not yet taken by a kernel, its tensor lists (an optimizer step's
    multi-tensor launches), if any, and the stages (Cost.stages) its kernels have not run yet."""

    __slots__ = ("left", "lists", "stages")

    def __init__(self, parts: list[Part], lists: Lists | None = None, stages: tuple | None = None) -> None:
        self.left = list(parts)
        self.lists = lists
        self.stages = None if stages is None else list(stages)

    def stage(self, kernel: str | None = None) -> tuple | None:
        """The stage (Cost.stages) this kernel runs: the call's next one, or where the stages are
        named (each led by a piece of its kernel's name), the first left whose name is in
        `kernel`'s; (None, None) when none is (a kernel the op's decomposition does not know);
        None when the op has no stages."""
        if self.stages is None:
            return None
        if self.stages and isinstance(self.stages[0][0], str):
            at = next((i for i, s in enumerate(self.stages) if s[0] in (kernel or "")), None)
            return (None, None) if at is None else self.stages.pop(at)[1:]
        return self.stages.pop(0) if self.stages else (None, None)

    def launch(self, kernel: str, grid: object, sizes: object = None, index: int = 0) -> tuple | None:
        """(FLOPs, bytes) of a multi-tensor launch of the call, the `index`-th under its PyTorch
        range with `sizes` (the range's, whose first `count` entries are the parameters' shapes);
        (None, None) when its share is not known; None when the call has no tensor lists."""
        if self.lists is None:
            return None
        shapes = sizes[:self.lists.count] if isinstance(sizes, list) else []
        numels = [math.prod(s) for s in shapes] if shapes and all(
            isinstance(s, list) and s and all(type(d) is int for d in s) for s in shapes) else None
        work = self.lists.work(kernel, _threads(grid), numels, index)
        return (None, None) if work is None else work

    def take(self, kernel: str | None, grid: object, block: object) -> Part | None:
        """The part this kernel does, removed from the call's; None when none fits."""
        fam = family(kernel)
        if fam is None or not self.left:
            return None
        # Only the element-wise kernels launch by PyTorch's per-thread rule; the bias gradient's
        # sum is one part a call, a layout conversion is told by its grid.
        g, b = (_threads(grid), _threads(block)) if fam in _ELEMENTWISE or fam in _ONE_PER_THREAD else (None, None)
        most = 1 if fam in _ONE_PER_THREAD else _MAX_PER_THREAD
        # PyTorch's legacy elementwise_kernel<threads, k> runs ceil(n / (threads x k)) blocks: exact.
        each = _legacy_per_thread(kernel) if most > 1 else None
        low, high = (each, each) if each else (1, most)
        # A copy in one dtype may be a cast's or a broadcast's; a cast into 16 bits only a cast's;
        # one that casts nothing (CONTIGUOUS) a broadcast's or a strided tensor's, never a cast's.
        fams = (COPY, BROADCAST) if fam == COPY and _DIRECT_COPY.search(kernel or "") else \
            (CONTIGUOUS, BROADCAST) if fam == CONTIGUOUS else (fam,)
        candidates = [p for p in self.left if p.family in fams and (g is None or b is None or
                                                                   (g - 1) * b * low < p.numel <= g * b * high)]
        if fam == LAYOUT:  # kept for the next conversion: a tensor may be converted twice
            fits = {p for p in candidates if isinstance(grid, list) and tuple(grid) == p.grid}
            # Tensors of other sizes on one grid (C 16 and 32 both one tile of channels): not known which.
            return fits.pop() if len({p.numel for p in fits}) == 1 else None
        if not candidates:
            return None
        if g is not None and b is not None:
            k = most if most == 1 else _per_thread(kernel or "")
            guess = g * b * k
            # A part whose launch is this grid exactly first: a 1,728-element weight and a 64-element
            # bias both fit one block of 1,024, but the weight's cast runs two.
            exact = [p for p in candidates if -(-p.numel // (b * k)) == g]
            best = min(exact or candidates, key=lambda p: abs(math.log(p.numel / guess)))
        else:
            best = candidates[0]
        self.left.remove(best)
        size = ITEMSIZE.get(template_dtype(kernel)) if fam == FILL else None
        # A fill writes in the element type its name states (cross_entropy's float dLogProb of
        # bf16 logits under autocast), whatever the argument's dtype.
        return best if size is None else best._replace(bytes=best.numel * size)



def _threads(dims: object) -> int | None:
    """grid or block dimensions as one count; None when the record's value is not a list of
    positive ints (parse writes 3: that case is unpacked, not iterated, as it runs per kernel)."""
    if type(dims) is list and len(dims) == 3:
        x, y, z = dims
        return x * y * z if type(x) is int and type(y) is int and type(z) is int and x > 0 and y > 0 and z > 0 \
            else None
    if not isinstance(dims, list) or not dims or not all(type(d) is int and d > 0 for d in dims):
        return None
    return math.prod(dims)


def grid_z(grid: object) -> int | None:
    """A launch grid's z (a split-K GEMM's split count), None where the record's grid is not 3 ints."""
    return grid[2] if isinstance(grid, list) and len(grid) == 3 and type(grid[2]) is int else None
