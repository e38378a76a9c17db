"""Formulas over PyTorch's op ranges (the aten level, pyprof/prof/pricing/op_ranges.py): one per leaf aten op,
from the range's input shapes and the dtype the kernel ran in, reusing the families' formulas.

What the sizes cannot tell is decided as documented in docs/prof.md ("The aten level"): scalar
arguments (alpha, dims, `is_causal`, `reduction`) are not in the range, so add/sub count 1 FLOP
per element, attention counts the full L x S score matrix (as FlopCounterMode does), a reduction
over unknown dims has unknown bytes (its output size is unknown), and a `reduce` loss or a
training-mode batch norm is told by its kernel's name. Composite ops (matmul, linear, the math
attention path, clone) are not registered: their inner ops are.
"""
from __future__ import annotations

import re
from dataclasses import replace
from math import prod
from typing import Any

from ..multitensor import launch, launch_elements
from ..reduce_launch import launch_fits
from ..registry import ATTN, CAUSAL_UNKNOWN, SIMT, Cost, deferring, dims, fmt_params, register_aten
from ..values import FLOATING, ITEMSIZE, Tensor, as_2d, broadcast, reduce_adds, reduces_to
from .attention import sdpa_cost
from .batch_norm import batch_norm_kernels
from .elementwise import FLOPS_PER_ELEMENT, UNARY, nonzero_cost, pointwise_cost, reduce_cost
from .gemm import ATEN_GEMMS, aten_gemm, gemm_cost
from .loss import SMOOTH_L1_FLOPS, loss_cost
from .memory import (copy_cost, index_add_cost, index_copy_cost, index_elements, index_rows, index_select_cost, repeats_cost,
                     scatter_cost, take_along_cost)
from .nn import (embedding_backward_stages, embedding_bag_cost, group_norm_cost, interpolate_cost, norm_cost, pool_cost, row_norm_cost,
                 softmax_backward_stages, softmax_cost)
from .optim import UNSCALE_FLOPS, adam_flops, update_scale_cost
from .order import scan_cost, sort_cost, topk_cost
from .scatter_reduce import reduction_stage

A = Any  # an AtenCall (pyprof/prof/pricing/op_ranges.py); not imported: aten.py imports this package


# -- matrix products ------------------------------------------------------------------------------

@register_aten(*ATEN_GEMMS)
def gemm(a: A) -> Cost | None:
    """mm, addmm, _addmm_activation, bmm, baddbmm by their argument positions (ATEN_GEMMS)."""
    sizes = aten_gemm(a.name, a.sizes)
    if sizes is None:
        return None
    b, m, n, k, extra = sizes
    return gemm_cost(b, m, n, k, a.dtype, extra_elems=extra)


# -- attention: (B, H, L, E) query, key, value; the mask position per backend -----------------------

_SDPA_FWD_MASK = {"aten::_scaled_dot_product_flash_attention": None,
                  "aten::_scaled_dot_product_efficient_attention": 3,
                  "aten::_scaled_dot_product_cudnn_attention": 3}
_SDPA_BWD_MASK = {"aten::_scaled_dot_product_flash_attention_backward": None,
                  "aten::_scaled_dot_product_efficient_attention_backward": 4,
                  "aten::_scaled_dot_product_cudnn_attention_backward": 8}


@register_aten(*_SDPA_FWD_MASK)
def sdpa_forward(a: A) -> Cost:
    pos = _SDPA_FWD_MASK[a.name]
    c = sdpa_cost(a.tensor(0), a.tensor(1), a.tensor(2), None if pos is None else a.tensor(pos), False)
    return replace(c, upper_bound=CAUSAL_UNKNOWN)


@register_aten(*_SDPA_BWD_MASK)
def sdpa_backward(a: A) -> Cost:
    """The backward op's own work: the forward formula's backward (grad_out is input 0), in the
    query's dtype where its producer's kernel told it (cuDNN's helpers take `void *` tensors: a
    `float` in their names is a scale), else the kernel's."""
    pos = _SDPA_BWD_MASK[a.name]
    dtype = a.input_dtype(1) or a.dtype
    c = sdpa_cost(a.tensor(1, dtype), a.tensor(2, dtype), a.tensor(3, dtype),
                  None if pos is None else a.tensor(pos), False)
    return Cost(c.bwd_flops, c.bwd_bytes, c.params, c.dtype, ATTN, upper_bound=CAUSAL_UNKNOWN)


@register_aten("aten::_transform_bias_rescale_qkv")
def transform_bias_rescale_qkv(a: A) -> Cost | None:
    """The eval fast path's split of the packed QKV projection into heads: the bias added to
    every element, the query third scaled; QKV and the bias read, Q, K, V written."""
    qkv, bias = a.tensor(0), a.tensor(1)
    if qkv is None or qkv.nbytes is None:
        return None
    n = qkv.numel
    return Cost(n + n // 3, 2 * qkv.nbytes + (bias.nbytes if bias else 0), fmt_params(a.dtype, shape=dims(qkv.shape)),
                a.dtype, SIMT)


# -- element-wise -----------------------------------------------------------------------------------

# The marker level's unary ops (aten::sgn: AbsBackward0's sign) and ATen's own activations.
_UNARY = UNARY + ["gelu", "silu", "mish", "hardswish", "hardsigmoid", "hardtanh", "leaky_relu", "elu", "celu",
                  "selu", "softplus", "log_sigmoid_forward", "threshold", "pow", "isneginf", "isposinf"]
_BINARY = ["add", "sub", "rsub", "mul", "div", "maximum", "minimum", "fmax", "fmin", "remainder", "fmod",
           "atan2", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
           "bitwise_and", "bitwise_or", "bitwise_xor", "lerp", "addcmul", "addcdiv", "copysign", "xlogy",
           "hypot", "floor_divide"]
# grad_output and one saved tensor in, the gradient out: 1 FLOP per element (the unary convention).
_UNARY_BACKWARD = ["threshold_backward", "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
                   "hardswish_backward", "hardsigmoid_backward", "hardtanh_backward", "leaky_relu_backward",
                   "elu_backward", "softplus_backward", "mish_backward", "log_sigmoid_backward"]
# Operands that are bool whatever the kernel computes in: (op, position).
_BOOL_OPERAND = {"where": 0, "masked_fill": 1, "masked_fill_": 1}


def _pointwise(a: A) -> Cost:
    op = a.name.partition("::")[2]
    if op == "where" and len(a.sizes) == 1:  # where(condition) alone: nonzero's indices
        return nonzero_cost(a.tensor(0, "bool") or Tensor((), "bool"))
    operands = []
    # An out= overload's result tensor, passed empty for the kernel to resize (aten::abs(self,
    # out) inside aten::abs: [[8, 3, 288, 288], [0]]), is no operand: a kernel ran, so an empty
    # input it is not.
    given = len(a.sizes) - (len(a.sizes) > 1 and a.sizes[-1] == [0])
    for i in range(given):
        t = a.tensor(i, "bool" if _BOOL_OPERAND.get(op) == i else None)
        if t is not None:
            operands.append(t)
    if not operands:  # 0-dim operands only (an optimizer's step counter): one element
        operands = [Tensor((), a.dtype)]
    return pointwise_cost(op, operands)


register_aten(*[f"aten::{o}{s}" for o in _UNARY + _BINARY for s in ("", "_")],
              "aten::where", "aten::masked_fill", "aten::masked_fill_",
              *[f"aten::{o}" for o in _UNARY_BACKWARD])(_pointwise)


@register_aten("aten::scatter", "aten::scatter_", "aten::scatter_add", "aten::scatter_add_")
def scatter(a: A) -> Cost | None:
    """memory.scatter_cost of (self, dim, index, src or value): the scatter kernel's; an
    out-of-place scatter's copy of self runs under a range of its own (aten::copy_), priced there.
    The values' dtype is what self's or src's producer wrote: the kernel names its index type, and
    copies the values as opaque bytes; a scalar value, no source read, its kernel names
    (_cuda_scatter_fill_internal_kernel: one_hot's 1s). Where no producer told it, the floating
    type the kernel names (an add's), else the size of the opaque elements it or its output's
    reader moves (_opaque_size: the identity scatter_reduce fills in without include_self). The
    index read once, a broadcast's as the elements it holds (AtenCall.stored)."""
    dtype = a.input_dtype(0) or a.input_dtype(3) or (a.dtype if a.dtype in FLOATING else None)
    elem = None if dtype else _opaque_size(a)
    shape, index = a.shape(0), a.tensor(2, "int64")
    if not shape or index is None or dtype is None and elem is None:
        return None
    return scatter_cost(Tensor(tuple(shape), dtype), index, "_add" in a.name, False, "scatter_fill" in a.kernel, elem,
                        a.stored(2))


# Tensor.scatter_reduce's reduction as its kernel's functor names it.
_SCATTER_REDUCTION = re.compile(r"<at::native::reduce(add|multiply|mean|maximum|minimum)>")
_REDUCTION_NAMES = {"add": "sum", "multiply": "prod", "mean": "mean", "maximum": "amax", "minimum": "amin"}


@register_aten("aten::scatter_reduce", "aten::scatter_reduce_")
def scatter_reduce(a: A) -> Cost | None:
    """(self, dim, index, src, reduce, include_self): the kernel launched in the op's own range,
    the scatter reduce (scatter_reduce.reduction_stage: the same whatever the reduction, which
    its functor names); the identity's fill without include_self and mean's counts run under
    ranges of their own (aten::scatter_, aten::scatter_add_, ...), priced there. The index read
    once, a broadcast's as the elements it holds (AtenCall.stored). The dtype src's or self's producer
    wrote, else the kernel's (its element type)."""
    m = _SCATTER_REDUCTION.search(a.kernel)
    dtype = a.input_dtype(3) or a.input_dtype(0) or a.dtype
    x, index, src = a.tensor(0, dtype), a.tensor(2, "int64"), a.tensor(3, dtype)
    if m is None or x is None or index is None or src is None or x.itemsize is None or index.numel != src.numel:
        return None
    _, flops, nbytes = reduction_stage(x.numel, src.numel, x.itemsize, a.stored(2))
    return Cost(flops, nbytes, fmt_params(dtype, out=x.numel, src=src.numel, reduce=_REDUCTION_NAMES[m.group(1)]),
                dtype, SIMT)


@register_aten("aten::cumsum", "aten::cumprod")
def cumulative(a: A) -> Cost | None:
    """order.scan_cost of (self, dim, dtype): the dim, a scalar no range carries, changes nothing
    counted; self in the dtype its producer wrote (else the kernel's), the output in the kernel's
    (a cast's `dtype` makes it so: cub's scan of an int64 cumsum names it)."""
    x = a.tensor(0, a.input_dtype(0) or a.dtype)
    return None if x is None else scan_cost(a.name.partition("::")[2], x, a.dtype, None)


@register_aten("aten::sort", "aten::argsort")
def sort(a: A) -> Cost | None:
    """order.sort_cost of self along its one dim longer than 1 (the dim, a scalar, is in no range),
    else, at the in-place sort kernel, the one whose rows its launch sorts (one block a row: na
    where several dims fit), in the dtype its producer wrote (else the sort kernel's keys'); the
    values are sorted whether returned or not. Its indices' arange runs under a range of its own
    that no formula prices: this one's stage."""
    # else the sort kernel's keys (in place, or cub's passes): arange's type is its indices'
    in_place = "sortkvinplace" in a.kernel
    dtype = a.input_dtype(0) or (a.dtype if in_place or "radixsort" in a.kernel else None)
    x = a.tensor(0, dtype) if dtype else None
    long = [d for d, size in enumerate(x.shape) if size > 1] if x is not None else []
    if len(long) > 1 and in_place and a.grid:
        long = [d for d in long if x.numel // x.shape[d] == prod(a.grid)]
    return sort_cost(x, long[0] if long else 0, True) if x is not None and len(long) <= 1 else None


@register_aten("aten::topk")
def topk(a: A) -> Cost | None:
    """order.topk_cost, its k and dim (scalars, in no range) from the values' shape as a consumer's
    range gives it: the one dim where it is shorter than the input (none: k is the whole dim, and
    any dim costs the same). Sorted, the default: a call that is not runs no sort kernel, so
    only its total counts one."""
    x = a.tensor(0)
    out = None if x is None else a.output_shape(lambda s: len(s) == len(x.shape))
    if out is None or len(out) != len(x.shape):
        return None
    shorter = [d for d, (i, o) in enumerate(zip(x.shape, out)) if o != i]
    if len(shorter) > 1 or shorter and out[shorter[0]] > x.shape[shorter[0]]:
        return None
    dim = shorter[0] if shorter else len(out) - 1
    return topk_cost(x, out[dim], dim)


@register_aten("aten::nonzero", "aten::nonzero_numpy", "aten::argwhere")
def nonzero(a: A) -> Cost | None:
    """elementwise.nonzero_cost of the input, in the dtype its producer wrote (else the range's);
    its indices ([found, x's dims]) as their first reader's range gives them (a view's, mostly:
    where's unbind; parse/consumers.py), else the count's kernel alone is known."""
    x = a.tensor(0, a.input_dtype(0) or a.dtype)
    if x is None:
        return None
    out = a.output_shape()
    found = [Tensor(out, "int64")] if out is not None and len(out) == 2 and out[1] == len(x.shape) else None
    return nonzero_cost(x, found)


@register_aten("aten::fill_", "aten::zero_")
def fill(a: A) -> Cost | None:
    """The tensor written once (a 0-dim one: one element)."""
    shape = a.shape(0) or ()
    size = ITEMSIZE.get(a.dtype)
    return None if size is None else Cost(0, prod(shape) * size, fmt_params(a.dtype, shape=dims(shape)), a.dtype, SIMT)


@register_aten("aten::uniform_", "aten::normal_", "aten::bernoulli_", "aten::exponential_", "aten::random_")
def random_fill(a: A) -> Cost | None:
    """A random fill (memory._fill's at the marker level): the tensor written once (a 0-dim one:
    one element), in the type it is (op_ranges.written_dtype: the kernel's first type is the
    accumulate type); no FLOPs; a probability tensor (bernoulli_'s) read too."""
    shape, size = a.shape(0), ITEMSIZE.get(a.written)
    if shape is None or size is None:
        return None
    p = a.tensor(1, a.input_dtype(1) or a.written)
    return Cost(0, prod(shape) * size + (p.nbytes if p is not None and p.nbytes else 0),
                fmt_params(a.written, shape=dims(shape)), a.written, SIMT)


_CAST_KERNEL = re.compile(r"withcast|(?<!direct)_copy_kernel_cuda")


@register_aten("aten::copy_")
def copy_(a: A) -> Cost | None:
    """dst.copy_(src): src read, dst written. The destination's dtype is the one the kernel
    writes; the source's the kernel's element type, but for a casting kernel its producer's
    (tensor_flow.py), else for autocast's cast of an op's argument up to float32 autocast's
    16-bit dtype (AtenCall.autocast_source: a layer norm's input made by a view, which launches
    no kernel to tell its dtype): na when not known."""
    dst = a.shape(0)
    if dst is None:
        return None
    src_dtype = a.dtype
    if a.written == a.dtype and _CAST_KERNEL.search(a.kernel):
        src_dtype = a.input_dtype(1) or a.autocast_source()
        if src_dtype == a.dtype:  # a cast between equal dtypes: one of the two is wrong
            return None
    return copy_cost(Tensor(dst, src_dtype), a.written)


_OPAQUE = re.compile(r"opaquetype<\((?:unsigned )?int\)(\d+)>")
# PyTorch's element-wise copy kernels (direct_copy_kernel_cuda, bfloat16_copy_kernel_cuda, ...).
_COPY = re.compile(r"_copy_kernel_cuda")


@register_aten("aten::cat", "aten::roll")
def movement(a: A) -> Cost | None:
    """Every input tensor read once and its elements written once. A copy kernel moving opaque
    N-byte elements (`OpaqueType<N>`) says their size, not their type. A cat PyTorch runs as one
    copy per non-empty input (inputs of other dtypes or layouts than its batched kernel takes: an
    element-wise copy kernel, `direct_copy_kernel_cuda`) runs them in turn (Cost.stages), each its
    input read in its producer's dtype (tensor_flow.py; else the kernel's) and written in the
    output's, the copy's element type."""
    ts = a.tensors()
    opaque = _OPAQUE.search(a.kernel)
    size = int(opaque.group(1)) if opaque else ITEMSIZE.get(a.dtype)
    if not ts or size is None:
        return None
    n = sum(t.numel for t in ts)
    cost = Cost(0, 2 * n * size, fmt_params(a.dtype, n=len(ts), numel=n, elem=size), a.dtype, SIMT)
    if a.name != "aten::cat" or opaque or not _COPY.search(a.kernel):
        return cost
    sizes = [ITEMSIZE.get(a.input_dtype(i) or a.dtype) for i in range(len(a.sizes)) if a.tensor(i)]
    stages = tuple((0, t.numel * (s + size)) for t, s in zip(ts, sizes) if t.numel)
    return replace(cost, stages=stages) if len(sizes) == len(ts) and None not in sizes else cost


# -- reductions: the output size is known without dims (input 0 and at most a dtype), else from a
# consumer's range (tensor_flow.py) ------------------------------------------------------------

_REDUCE = {"sum": "sum", "mean": "mean", "prod": "prod", "amax": "amax", "amin": "amin", "max": "max", "min": "min",
           "norm": "norm", "linalg_vector_norm": "norm", "var": "var", "std": "std", "logsumexp": "logsumexp",
           "any": "any", "all": "all", "argmax": "argmax", "argmin": "argmin"}


def _reduce(a: A) -> Cost | None:
    """elementwise.reduce_cost: over every element (input 0 and at most a dtype: one output
    element; or an overload called by one that takes no dims: AtenCall.redispatched), else over
    dims the range does not carry: the output's size from an out= overload's last input
    (multinomial's argmax), from a consumer, or
    inside an autograd node (a bias's gradient) the one input shape of its forward op that the
    input reduces to (values.reduces_to; of several, the one the kernel's launch can write), or
    where the kernel's launch tells it (reduce_launch.launch_fits: one output size)."""
    x = a.tensor(0)
    if x is None:
        return None
    op = _REDUCE[a.name.partition("::")[2]]
    whole = any(len(s) <= 2 for s in [a.sizes] + a.redispatched())

    def launched() -> frozenset:  # the output sizes the kernel's launch can write; asked only where needed
        return (launch_fits(a.kernel, x.shape, tuple(a.grid), tuple(a.block)) if a.grid and a.block else None) \
            or frozenset()
    given = a.shape(len(a.sizes) - 1) if len(a.sizes) > 2 else None  # an out= overload's result
    if not whole and given and reduces_to(x.shape, given):
        out = given
    else:
        out = () if whole else a.output_shape(lambda s: reduces_to(x.shape, s),
                                              prefer=lambda s: not launched() or prod(s) in launched())
    n_out = None if out is None else prod(out)
    if n_out is None and len(launched()) == 1:
        n_out = next(iter(launched()))
    return reduce_cost(op, x, n_out, None, "all" if whole else "?", not whole)


register_aten(*[f"aten::{o}" for o in _REDUCE])(_reduce)


# -- interpolation: the output size is an int list (no sizes): from a consumer's range -----------

_UPSAMPLE = re.compile(r"aten::(_?upsample_(nearest_exact|nearest|bilinear|bicubic|linear|trilinear)\dd)(_backward)?$")


@register_aten(*[f"aten::{u}{m}{d}d{b}" for u in ("upsample_", "_upsample_") for m in
                 ("nearest", "nearest_exact", "bilinear", "bicubic", "linear", "trilinear") for d in (1, 2, 3)
                 for b in ("", "_backward")])
def upsample(a: A) -> Cost | None:
    """nn.interpolate's formula: forward (input, output_size, ...), its output from a consumer;
    backward (grad_output, output_size, input_size, ...) the forward's backward, the gradient's
    shape (the forward's input) from a consumer."""
    m = _UPSAMPLE.match(a.name)
    y = a.tensor(0)
    other = a.output_shape(lambda s: len(s) == len(y.shape) and s[:2] == y.shape[:2]) if y else None
    if m is None or y is None or other is None or len(other) != len(y.shape):
        return None
    mode = m.group(2).replace("_", "-")
    if not m.group(3):
        return interpolate_cost(y, other[2:], mode)
    c = interpolate_cost(Tensor(other, a.dtype), y.shape[2:], mode)
    return Cost(c.bwd_flops, c.bwd_bytes, c.params, c.dtype, SIMT)


# -- pooling: kernel_size, stride and padding are scalars the range does not carry ------------------

@register_aten("aten::max_pool2d_with_indices_backward", "aten::max_pool3d_with_indices_backward")
def max_pool_backward(a: A) -> Cost | None:
    """(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices): nn.pool_cost's
    backward, which the window does not change: one add per dY element, dY and the int64 indices
    read, dX written. (The forward's FLOPs, one comparison per tap, need the window: na.)"""
    dy, x = a.tensor(0), a.tensor(1)
    if dy is None or x is None:
        return None
    params = fmt_params(a.dtype, shape=dims(x.shape), out=dims(dy.shape))
    return _backward(pool_cost(x, "max", dy.numel, None, params))


@register_aten("aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices", "aten::avg_pool2d", "aten::avg_pool3d")
def pool_forward(a: A) -> Cost | None:
    """(input, kernel_size, stride, ...): nn.pool_cost's bytes, the input read and the output, from
    a consumer's range (of max_pool1d's output where it runs as 2-D: values.as_2d), written (max:
    its int64 indices too); its FLOPs, one comparison or add a window tap, na: the window is not
    in the range."""
    x = a.tensor(0)
    out = as_2d(a.output_shape(copied=True), x.shape) if x is not None else None
    if x is None or out is None or len(out) != len(x.shape):
        return None
    kind = "max" if "max_pool" in a.name else "avg"
    return pool_cost(x, kind, prod(out), None, fmt_params(a.dtype, shape=dims(x.shape), out=dims(out)))


@register_aten("aten::avg_pool2d_backward", "aten::avg_pool3d_backward")
def avg_pool_backward(a: A) -> Cost | None:
    """(grad_output, self, kernel_size, ...): nn.pool_cost's backward bytes, dY read and dX
    written; its FLOPs (dY over the window, added into each tap) na: the window is not in the range."""
    dy, x = a.tensor(0), a.tensor(1)
    if dy is None or x is None:
        return None
    return _backward(pool_cost(x, "avg", dy.numel, None, fmt_params(a.dtype, shape=dims(x.shape), out=dims(dy.shape))))


# -- normalization, softmax -------------------------------------------------------------------------

def _backward(c: Cost) -> Cost:
    """The backward of a family formula's Cost as the Cost of a backward op's own range."""
    return Cost(c.bwd_flops, c.bwd_bytes, c.params, c.dtype, SIMT, stages=c.bwd_stages)


def _row_norm(x_pos: int, w_pos: int, b_pos: int | None, per_elem: int, backward: bool):
    """nn.row_norm_cost over the range's tensors (a backward op's: its output_mask is a scalar
    the range does not carry: every gradient counted)."""
    def formula(a: A) -> Cost:
        c = row_norm_cost(a.tensor(x_pos), per_elem, a.tensor(w_pos), None if b_pos is None else a.tensor(b_pos))
        return _backward(c) if backward else c
    return formula


# Backward schemas carry the weight but not the bias, whose gradient is written too when the
# norm is affine: the weight stands in for it (same shape).
register_aten("aten::native_layer_norm")(_row_norm(0, 2, 3, 6, False))
register_aten("aten::native_layer_norm_backward")(_row_norm(1, 5, 6, 6, True))
register_aten("aten::_fused_rms_norm")(_row_norm(0, 2, None, 3, False))
register_aten("aten::_fused_rms_norm_backward")(_row_norm(1, 4, None, 3, True))


@register_aten("aten::native_group_norm")
def native_group_norm(a: A) -> Cost:
    """nn.group_norm_cost over (input, weight, bias, N, C, HxW, group, eps): the group count is a
    scalar the range does not carry; its first kernel, the moments', runs one block per sample
    and group (N·G: its grid tells G). Its stages go on from the range's first kernel."""
    x, w, b = a.tensor(0), a.tensor(1), a.tensor(2)
    grid = a.grid[0] if a.grid else None
    n, ch = (x.shape[0], x.shape[1]) if x is not None and len(x.shape) >= 2 else (0, 0)
    groups = grid // n if type(grid) is int and n and grid % n == 0 and ch % (grid // n) == 0 else None
    return group_norm_cost(x, w, b, groups)


@register_aten("aten::native_group_norm_backward")
def native_group_norm_backward(a: A) -> Cost:
    """(grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask): the group count from
    mean's (N, G); the weight stands in for the bias (same shape)."""
    mean, w = a.shape(2), a.tensor(4)
    return _backward(group_norm_cost(a.tensor(1), w, w, mean[1] if mean and len(mean) == 2 else None))


# Batch norm: the weight stands in for the bias likewise.
register_aten("aten::cudnn_batch_norm_backward")(lambda a: _backward(norm_cost(a.tensor(0), 6, a.tensor(2), a.tensor(2))))


@register_aten("aten::native_batch_norm_backward", "aten::batch_norm_backward")
def native_batch_norm_backward(a: A) -> Cost:
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, ...):
    training's backward kernels, each its stage (batch_norm.py); the running statistics are not
    read."""
    x, w = a.tensor(1), a.tensor(2)
    cost = norm_cost(x, 6, w, w)
    return _backward(cost if x is None else batch_norm_kernels(cost, x, w, w, None, None, True))


# A range's first kernel: the statistics (and the running ones' update) run in training only;
# the running variance's inverse (after the running mean's copy, a range of its own) leads in
# eval (in training it follows the statistics: a later stage of the range, Cost.stages of its
# first kernel's cost).
_BN_TRAINING = re.compile(r"fw_?tr|collect_statistics|update_stats")
_BN_EVAL = re.compile(r"fw_?inf|calc_invstd|batch_norm_transform_input")


@register_aten("aten::cudnn_batch_norm", "aten::native_batch_norm", "aten::_batch_norm_with_update",
               "aten::_batch_norm_no_update")
def batch_norm(a: A) -> Cost | None:
    """(input, weight, bias, running_mean, running_var, ...): training or not is in the op's name
    (with/no_update) or its kernel's (cuDNN's `bn_fw_tr`/`bn_fw_inf`, the native statistics kernel);
    else na. Training reads and writes the running statistics; the native kernels each their
    stage (batch_norm.py)."""
    if a.name.endswith(("with_update", "no_update")):
        training = a.name.endswith("with_update")
    elif _BN_TRAINING.search(a.kernel):
        training = True
    elif _BN_EVAL.search(a.kernel):
        training = False
    else:
        return None
    rm, rv = a.tensor(3), a.tensor(4)
    stats = tuple(s for s in (rm, rv) if s is not None) * (2 if training else 1)
    x, w, b = a.tensor(0), a.tensor(1), a.tensor(2)
    cost = norm_cost(x, 6 if training else 2, w, b, stats, training=int(training))
    return cost if x is None else batch_norm_kernels(cost, x, w, b, rm, rv, training)


@register_aten("aten::_softmax", "aten::_log_softmax")
def softmax(a: A) -> Cost | None:
    """nn.softmax_cost over (self, dim, half_to_float), in the kernel's dtype."""
    x = a.tensor(0)
    return None if x is None else softmax_cost(x, a.dtype)


@register_aten("aten::_log_softmax_backward_data")
def log_softmax_backward(a: A) -> Cost | None:
    """nn.softmax_cost's backward over (grad_output, output, dim, input_dtype)."""
    y = a.tensor(1)
    return None if y is None else _backward(softmax_cost(y, a.dtype))


@register_aten("aten::_softmax_backward_data")
def softmax_backward(a: A) -> Cost | None:
    """The kernel of softmax's backward after T = dY·Y (which runs first, in an aten::mul range
    of its own): nn.softmax_backward_stages' second."""
    cost, size = log_softmax_backward(a), ITEMSIZE.get(a.dtype)
    if cost is None or size is None:
        return cost
    flops, nbytes = softmax_backward_stages(a.tensor(1).numel, size)[1]
    return replace(cost, flops=flops, bytes=nbytes)


@register_aten("aten::_masked_softmax")
def masked_softmax(a: A) -> Cost | None:
    """nn.softmax_cost, plus the bool mask read."""
    x, mask = a.tensor(0), a.tensor(1, "bool")
    if x is None:
        return None
    c = softmax_cost(x, a.dtype)
    return c if c.bytes is None or mask is None else replace(c, bytes=c.bytes + mask.nbytes)


# -- losses, embeddings -----------------------------------------------------------------------------

@register_aten("aten::nll_loss_forward", "aten::nll_loss2d_forward")
def nll_loss(a: A) -> Cost | None:
    """One log-probability gathered per target: those and the int64 targets read, the loss
    written (one element when the kernel is a `reduce` one, else one per target). Reduced, the 2-D
    op sums in one kernel (n - 1 adds; the sum and the total weight written) and a mean divides
    in another (1: both read, the loss written), named stages as nn.cross_entropy's (its zero
    fills have ranges of their own)."""
    x, target = a.tensor(0), a.tensor(1, "int64")
    if x is None or target is None or x.itemsize is None:
        return None
    n, size = target.numel, x.itemsize
    out = n if "no_reduce" in a.kernel else 1
    stages = None
    if a.name == "aten::nll_loss2d_forward" and out == 1:
        stages = (("nll_loss2d_forward_kernel", reduce_adds(n, 1), (n + 2) * size + target.nbytes),
                  ("nll_loss2d_forward_size_average_kernel", 1, 3 * size))
    return Cost(n, target.nbytes + (n + out) * size, fmt_params(a.dtype, shape=dims(x.shape)), a.dtype, SIMT,
                stages=stages)


@register_aten("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def nll_loss_backward(a: A) -> Cost | None:
    """(grad_output, self, target, ...): one gradient element written per target (dInput was
    zeroed by a fill of its own); the targets and dLoss read."""
    x, target, dy = a.tensor(1), a.tensor(2, "int64"), a.tensor(0)
    if x is None or target is None or x.itemsize is None:
        return None
    n = target.numel
    return Cost(n, target.nbytes + n * x.itemsize + (dy.nbytes if dy else x.itemsize),
                fmt_params(a.dtype, shape=dims(x.shape)), a.dtype, SIMT)


def _gathered_dtype(a: A, readers: bool = True) -> str | None:
    """The dtype of the tensor a gather reads (input 0): what its producer wrote, else the
    floating type the kernel names, else (`readers`) its output's as the first op reading it
    computed it (AtenCall.read_dtype: a parameter table's gather names only its index type)."""
    return a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None) or (a.read_dtype() if readers else None)


@register_aten("aten::embedding")
def embedding(a: A) -> Cost | None:
    """(weight, indices, ...): the indices and the selected rows read, the rows written; the
    weight in the dtype its producer or the kernel states, else the one its output's first
    reader computed in (a parameter table's gather names only its index type)."""
    dtype = _gathered_dtype(a)
    w, idx = a.tensor(0, dtype), a.tensor(1, "int64")
    if w is None or idx is None or w.itemsize is None:
        return None
    out = idx.numel * w.shape[-1]
    return Cost(0, idx.nbytes + 2 * out * w.itemsize, fmt_params(dtype, idx=dims(idx.shape), weight=dims(w.shape)),
                dtype, SIMT)


@register_aten("aten::embedding_dense_backward")
def embedding_backward(a: A) -> Cost | None:
    """(grad_output, indices, num_weights, ...): one add per dOut element into the weight's rows
    (read and written); the indices and dOut read. The zero fill of dWeight is a kernel of its own.
    Of more than 3,072 indices, kernel by kernel (nn.embedding_backward_stages; num_weights, a
    scalar, from dWeight's shape a consumer or the forward's weight gives, else unknown)."""
    # Its first kernel (the positions' arange, cub's sort) is typed by the indices: dY's dtype is
    # its producer's, else a floating one a kernel names.
    dy, idx = a.tensor(0, a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None)), a.tensor(1, "int64")
    if dy is None or idx is None or dy.nbytes is None:
        return None
    d = dy.shape[-1]
    weight = a.output_shape(gradient=lambda s: len(s) == 2 and s[1] == d, prefer=lambda s: s != idx.shape)
    return Cost(dy.numel, idx.nbytes + 3 * dy.nbytes, fmt_params(dy.dtype, shape=dims(dy.shape)), dy.dtype, SIMT,
                stages=embedding_backward_stages(idx, dy, weight[0] if weight else None))


_BAG_MAX = re.compile(r"embeddingbag_updateoutputkernel_max")


@register_aten("aten::_embedding_bag", "aten::_embedding_bag_forward_only")
def embedding_bag(a: A) -> Cost | None:
    """(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, ...):
    nn.embedding_bag_cost; the bags from the output's shape a consumer gives, else one per
    offset; the mode is a scalar: max where the kernel's name says it, else the adds alone."""
    w, idx, offsets, psw = a.tensor(0), a.tensor(1, "int64"), a.tensor(2, "int64"), a.tensor(6)
    if w is None or idx is None:
        return None
    out = a.output_shape()
    bags = out[0] if out and len(out) == 2 else (offsets.numel if offsets else None)
    return embedding_bag_cost(idx, w, offsets, psw, bags, "max" if _BAG_MAX.search(a.kernel) else None)


@register_aten("aten::_embedding_bag_dense_backward")
def embedding_bag_dense_backward(a: A) -> Cost | None:
    """(grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq,
    mode, per_sample_weights, ...): nn.embedding_bag_cost's dense backward, kernel by kernel
    (its named stages); the bags and features from grad's shape. The mode is a scalar: max where
    maximum_indices has elements (PyTorch's max kernel, no stages), else the adds alone, a mean's
    scaling not counted (as the forward's aten formula); num_weights (dWeight's rows) is a scalar
    too, but only its zero fill, a kernel of its own range, reads it."""
    dy, idx, most = a.tensor(0), a.tensor(1, "int64"), a.tensor(4, "int64")
    if dy is None or idx is None or len(dy.shape) != 2:
        return None
    # Its first kernel (arange's, cub's) may be typed by the indices: dWeight's dtype is dY's.
    dtype = a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None)
    w = Tensor((0, dy.shape[1]), dtype)
    bags = dy.shape[0]
    maximum = most is not None and most.numel > 0
    c = embedding_bag_cost(idx, w, None, a.tensor(8), bags, "max" if maximum else None, dense=not maximum)
    return None if c is None else _backward(c)


def _index_shapes(a: A, put: bool) -> tuple | None:
    """(x's shape, the integer index tensors' shapes) of an advanced index's range: aten::index
    (self, indices...) or, with `put`, aten::_index_put_impl_ (self, indices..., values,
    accumulate, unsafe); None where an index is no tensor (a None in the list, x[:, i]: its sizes
    read `[]`). The sizes carry no dtype, so one index shaped as x's leading dims may be a boolean
    mask: then the gathered shape, [found] + x's other dims (the output as its first reader gives
    it; index_put's values), says how many positions nonzero found, each dim's read as int64 (an
    integer index of that shape gathers that same shape)."""
    x = a.shape(0)
    idx = [a.shape(i) for i in range(1, len(a.sizes) - (3 if put else 0))]
    if not x or not idx or any(not s for s in idx) or len(idx) > len(x):
        return None
    if len(idx) == 1 and idx[0] == x[:len(idx[0])]:
        k = len(idx[0])
        out = a.shape(len(a.sizes) - 3) if put else a.output_shape()
        if out is None or len(out) != len(x) - k + 1 or tuple(out[1:]) != x[k:]:
            return None
        idx = [(out[0],)] * k
    return x, idx


def _index_cost(a: A, backward: bool = False) -> Cost | None:
    """_gather through _index_shapes' indices, or with `backward` its backward (an index_put's
    range)."""
    got = _index_shapes(a, backward)
    return None if got is None else _gather(a, *got, backward)


def _gather(a: A, x: tuple, idx: list, backward: bool = False) -> Cost | None:
    """The gather of x (a shape) through integer index tensors of shapes `idx`: memory.index_rows
    for one index on the first dim, else index_elements (with `backward`, their backward), x in
    the dtype its producer wrote or the kernel ran in, or the forward's output's as its first
    reader computed it (AtenCall.read_dtype); where none is known (a parameter: no producer, no
    reader ahead), the forward's _opaque_gather."""
    dtype = _gathered_dtype(a, readers=not backward)
    if dtype is not None:
        index = [Tensor(s, "int64") for s in idx]
        c = index_rows(Tensor(x, dtype), index[0]) if len(idx) == 1 and len(idx[0]) == 1 \
            else index_elements(Tensor(x, dtype), index)
        return None if c is None else _backward(c) if backward else c
    return None if backward else _opaque_gather(a, x, idx, prod(broadcast(*idx)) * prod(x[len(idx):]))


def _opaque_size(a: A) -> int | None:
    """N where the op's kernel moves opaque N-byte elements (`OpaqueType<N>`), else where the
    first op reading its output does (a cat's copy of a gather's rows: the same elements)."""
    opaque = _OPAQUE.search(a.kernel) or _OPAQUE.search((a.reader_kernel() or "").lower())
    return None if opaque is None else int(opaque.group(1))


def _opaque_gather(a: A, x: tuple, idx: list, elements: int) -> Cost | None:
    """A gather of x (a shape) through int64 index tensors of shapes `idx` moving opaque N-byte
    elements (_opaque_size): the indices read, `elements` written and read at N bytes each, no
    more of x read than it holds (memory._indexed's `source`; a copy's work needs the size alone);
    None where neither kernel names a size."""
    size = _opaque_size(a)
    if size is None:
        return None
    return Cost(0, sum(prod(s) for s in idx) * ITEMSIZE["int64"] + (elements + min(elements, prod(x))) * size,
                fmt_params(None, shape=dims(x), idx=",".join(dims(s) for s in idx), elem=size), None, SIMT)


@register_aten("aten::index")
def index(a: A) -> Cost | None:
    """x[indices]: _index_cost's gather (integer tensors, or a boolean mask whose found positions
    nonzero wrote: its own kernels are priced under its range)."""
    return _index_cost(a)


@register_aten("aten::index_select")
@deferring
def index_select(a: A) -> Cost | None:
    """memory.index_select_cost of (self, dim, index), in the dtype self's producer wrote (else
    the kernel's, else its output's reader's: AtenCall.read_dtype; else _opaque_gather). The dim is a scalar no range carries: self's one dim for
    a 1-D self, else the one where the output (as its first reader gives it) differs from self;
    where none does, every dim costs the same (the index is as long as the dim it picks from).
    Where it cannot, it defers to the range around (an embedding's, whose weight no producer
    types)."""
    x, index = a.shape(0), a.shape(2)
    dtype = _gathered_dtype(a)
    if not x or not index or len(index) != 1:
        return None
    dim = 0
    if len(x) > 1:
        out = a.output_shape()
        if out is None or len(out) != len(x):
            return None
        differ = [d for d in range(len(x)) if out[d] != x[d]]
        if len(differ) > 1 or differ and out[differ[0]] != index[0]:
            return None
        dim = differ[0] if differ else 0
    if dtype is not None:
        return index_select_cost(Tensor(x, dtype), dim, Tensor(index, "int64"))
    return _opaque_gather(a, x, [index], prod(x) // max(x[dim], 1) * index[0])


@register_aten("aten::repeat_interleave")
def repeat_interleave(a: A) -> Cost | None:
    """repeat_interleave(repeats, output_size), the indices of a tensor of repeats (the form
    the others run inside: x's own picks from them run under index_select): memory.repeats_cost's
    last kernel, compute_cuda_kernel; the cumsum and the check run under ranges of their own.
    How many indices, from the output's first reader."""
    repeats, out = a.tensor(0, a.input_dtype(0) or "int64"), a.output_shape()
    if repeats is None or len(a.sizes) != 2 or out is None or len(out) != 1 or "compute_cuda_kernel" not in a.kernel:
        return None
    c = repeats_cost(repeats, out[0])
    stage = None if c is None else c.stages[-1]
    return None if stage is None else Cost(0, stage[3], c.params, c.dtype, SIMT)


@register_aten("aten::masked_select")
def masked_select(a: A) -> Cost | None:
    """masked_select(x, mask), x[mask] of the two broadcast together, as PyTorch runs it: nonzero
    of the mask (under its own range), then _gather of the found positions, one int64 index a
    dim (memory.index_elements); how many were found, from the output's first reader."""
    x, mask = a.shape(0), a.shape(1)
    shape = broadcast(x, mask) if x and mask else None
    out = a.output_shape() if shape else None
    return None if out is None or len(out) != 1 else _gather(a, shape, [out] * len(shape))


@register_aten("aten::gather")
@deferring
def gather(a: A) -> Cost | None:
    """gather(self, dim, index[, sparse_grad, out]) as PyTorch's row gather runs it
    (vectorized_gather_kernel: index_select's, its index expanded over the rows, which the kernel
    reads once a row): memory.index_rows of self's rows along its first dim, in the dtype self's
    producer wrote (the gradient, in index_add_'s backward), else its output's reader's
    (AtenCall.read_dtype); as its element-wise kernel runs it (_scatter_gather_elementwise_kernel),
    memory.take_along_cost, the index read once (a broadcast's elements: AtenCall.stored), x
    in that dtype or as the opaque elements the kernel moves (_opaque_size). Others defer to the
    range around (an embedding's): the range does not say whether the index is expanded, nor a
    parameter's dtype."""
    x, index = a.shape(0), a.shape(2)
    if not x or not index or len(x) != len(index):
        return None
    if "scatter_gather_elementwise" in a.kernel:
        dtype = _gathered_dtype(a)
        elem = None if dtype else _opaque_size(a)
        return None if dtype is None and elem is None else \
            take_along_cost(Tensor(tuple(x), dtype), Tensor(tuple(index), "int64"), elem, a.stored(2))
    dtype = _gathered_dtype(a)
    if "vectorized_gather_kernel" not in a.kernel or dtype is None or list(x[1:]) != list(index[1:]):
        return None
    return index_rows(Tensor(tuple(x), dtype), Tensor((index[0],), "int64"))


@register_aten("aten::index_add_", "aten::index_add")
def index_add(a: A) -> Cost | None:
    """index_add(self, dim, index, source, alpha): memory.index_add_cost. The dim is a scalar no
    range carries: it is the one dim where source's size is the index's length and every other
    size self's (na where none or several fit); the dtype source's producer wrote, else self's,
    else the kernel's."""
    x, index, src = a.shape(0), a.shape(2), a.shape(3)
    if not x or not index or not src or len(x) != len(src) or len(index) != 1:
        return None
    fits = [d for d in range(len(x)) if src[d] == index[0] and all(src[j] == x[j] for j in range(len(x)) if j != d)]
    dtype = a.input_dtype(3) or a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None)
    if len(fits) != 1 or dtype is None:
        return None
    return index_add_cost(Tensor(tuple(x), dtype), Tensor(tuple(index), "int64"), Tensor(tuple(src), dtype),
                          a.name.endswith("_"))


@register_aten("aten::arange")
@deferring
def arange(a: A) -> Cost | None:
    """(start, end, step, ...): all scalars the range does not carry; the values written as
    memory.arange counts them, their number from a consumer's range, of the type the kernel
    names. Where no consumer tells, the range around is asked (unique's positions)."""
    out, size = a.output_shape(), ITEMSIZE.get(a.dtype)
    if out is None or size is None:
        return None
    return Cost(0, prod(out) * size, fmt_params(a.dtype, n=prod(out)), a.dtype, SIMT)


@register_aten("aten::_assert_async")
def assert_async(a: A) -> Cost | None:
    """(self, msg): a device-side check (multinomial's) reads its 0-dim condition, one element of
    the type the kernel names; no FLOPs."""
    size = ITEMSIZE.get(a.dtype)
    return None if size is None else Cost(0, size, fmt_params(a.dtype), a.dtype, SIMT)


@register_aten("aten::index_copy_", "aten::index_copy")
def index_copy(a: A) -> Cost | None:
    """index_copy(self, dim, index, source): memory.index_copy_cost, in the dtype source's or
    self's producer wrote, else of the size the kernel's OpaqueType names."""
    x, index, src = a.shape(0), a.shape(2), a.shape(3)
    dtype = a.input_dtype(3) or a.input_dtype(0) or (a.dtype if a.dtype in FLOATING else None)
    elem = None if dtype else _opaque_size(a)
    if not x or not index or not src or dtype is None and elem is None:
        return None
    return index_copy_cost(Tensor(tuple(x), dtype), Tensor(tuple(index), "int64"), Tensor(tuple(src), dtype),
                           a.name.endswith("_"), elem)


@register_aten("aten::_index_put_impl_")
def index_put_impl(a: A) -> Cost | None:
    """(self, indices, values, accumulate, unsafe) in an advanced index's backward (IndexBackward0:
    accumulate; the range's sizes carry no scalar, so elsewhere na): _index_cost's backward,
    kernel by kernel (its named stages; the linear index's arithmetic, arange and the copies run
    under ranges of their own)."""
    return _index_cost(a, backward=True) if a.within("IndexBackward0") else None


# -- multi-tensor (foreach) ops: tensor lists flattened, the list count from the kernel's name ----

_DEPTH = re.compile(r"tensorlist(?:scalarlist)?metadata<(?:[^,<>]+, )?\(int\)(\d+)>")
_FOREACH_FLOPS = {**FLOPS_PER_ELEMENT, "zero": 0, "copy": 0, "norm": 2,
                  "amp_foreach_non_finite_check_and_unscale": UNSCALE_FLOPS}


# Foreach ops whose only operands are the tensor lists; the others take one scalar besides (copy_:
# non_blocking).
_FOREACH_UNARY = frozenset(("sqrt", "neg", "abs", "exp", "reciprocal", "sign", "sigmoid", "tanh", "log", "rsqrt",
                            "zero"))
# Foreach ops that write their destination list without reading it.
_OVERWRITES = frozenset(("copy", "zero"))


def _zero_dim_lists(a: A, op: str, m: re.Match | None) -> list:
    """Lists of 0-dim tensors (a capturable optimizer's step counters): their sizes are `[]`,
    as a scalar's are, so the one scalar operand the op takes besides its lists (none for a unary
    op, one per tensor for a scalar list) is told from the op, not the sizes."""
    if m is None or not a.sizes or any(s != [] for s in a.sizes):
        return []
    scalars = 0 if op in _FOREACH_UNARY else 1
    if "scalarlistmetadata" in m.group(0):
        return []  # one scalar per tensor: the split between lists and scalars is not in the sizes
    return [Tensor((), a.dtype)] * (len(a.sizes) - scalars)


def _foreach(a: A) -> Cost | None:
    """`TensorListMetadata<D>` in the kernel's name: the kernel walks D lists of the same length,
    the output list among them for an out-of-place op. Reads every input list, writes one list;
    FLOPs per element of one list from the element-wise table (norm: 2, one output per tensor).
    A list passed twice (every tensor's producer the same as an earlier list's: an optimizer's
    exp_avg_sq.addcmul_(grad, grad)) is read once."""
    m = _DEPTH.search(a.kernel)
    op = a.name.partition("::")[2].strip("_").removeprefix("foreach_")
    ts = a.tensors() or _zero_dim_lists(a, op, m)
    size = ITEMSIZE.get(a.dtype)
    if m is None or not ts or size is None:
        return None
    inplace = a.name.endswith("_")
    depth = int(m.group(1))
    lists = depth if inplace else depth - 1
    # Read: every list but the destination of an op that only writes it (copy_, zero_).
    unread = 1 if inplace and op in _OVERWRITES else 0
    if op == "norm":
        lists = 1
    if lists < 1 or len(ts) % lists:
        return None
    first = ts[:len(ts) // lists]
    n = sum(t.numel for t in first)
    written = len(first) if op == "norm" else n
    spec = launch(a.kernel)
    return Cost(n * _FOREACH_FLOPS.get(op, 1), ((lists - unread - _repeated_lists(a, lists, len(first))) * n + written) * size,
                fmt_params(a.dtype, tensors=len(first), numel=n), a.dtype, SIMT,
                launches=None if spec is None else tuple(launch_elements([t.numel for t in first], spec.max_tensors)))


def _repeated_lists(a: A, lists: int, count: int) -> int:
    """How many of the range's first `lists` tensor lists of `count` tensors repeat an earlier one
    (each tensor's producer named, and the same)."""
    ids = a.producers()
    chunks = [tuple(ids[i * count:(i + 1) * count]) for i in range(lists)]
    named = [c for c in chunks if len(c) == count and None not in c]
    return len(named) - len(set(named))


_FOREACH = ["add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "neg", "abs", "exp", "reciprocal",
            "maximum", "minimum", "pow", "sign", "clamp_min", "clamp_max", "zero", "copy", "norm", "addcmul",
            "sigmoid", "tanh", "log", "rsqrt"]
register_aten(*sorted({f"aten::_foreach_{o}{s}" for o in _FOREACH for s in ("", "_") if o != "zero" or s}),
              "aten::_amp_foreach_non_finite_check_and_unscale_")(_foreach)


_FUSED_ADAM = re.compile(r"fusedadammathfunctor<[^,]+, \(int\)(\d+), \(at::native::adam_mode\)(\d), \(bool\)([01])")


@register_aten("aten::_fused_adam_", "aten::_fused_adamw_")
def fused_adam(a: A) -> Cost | None:
    """The fused step (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
    scalars...): the kernel's `FusedAdamMathFunctor<T, D, mode, amsgrad>` says the D lists it walks
    (the parameters first; the 0-dim step counters are not among the sizes' tensors), AdamW or
    Adam and amsgrad; optim.adam_flops per element, the launch's 2D - 1 lists moved
    (multitensor.launch). Weight decay is a scalar the range does not carry: counted for AdamW,
    not for Adam (their defaults, 1e-2 and 0); maximize too: not counted (its default)."""
    spec, m = launch(a.kernel), _FUSED_ADAM.search(a.kernel)
    ts = a.tensors()
    if spec is None or not spec.fused or m is None or not ts or len(ts) % int(m.group(1)):
        return None
    params = ts[:len(ts) // int(m.group(1))]
    numels = [t.numel for t in params]
    n = sum(numels)
    adamw = m.group(2) == "1"
    return Cost(n * adam_flops(m.group(3) == "1", adamw, adamw), n * spec.lists * spec.size,
                fmt_params(a.dtype, tensors=len(params), numel=n), a.dtype, SIMT,
                launches=tuple(launch_elements(numels, spec.max_tensors)))


@register_aten("aten::_amp_update_scale_")
def amp_update_scale(a: A) -> Cost:
    """GradScaler's one-thread update (ops/optim.py)."""
    return update_scale_cost()


# -- dropout, mse_loss ------------------------------------------------------------------------------

@register_aten("aten::native_dropout", "aten::native_dropout_backward")
def native_dropout(a: A) -> Cost | None:
    """Forward (x, p, train) and backward (grad, mask, scale): one multiply per element; the
    input read, the output written, the bool mask written (forward) or read (backward)."""
    x = a.tensor(0)
    if x is None or x.nbytes is None:
        return None
    return Cost(x.numel, 2 * x.nbytes + x.numel, fmt_params(a.dtype, shape=dims(x.shape)), a.dtype, SIMT)


@register_aten(*[f"aten::{m}_pad{d}d" for m in ("reflection", "replication") for d in (1, 2, 3)])
def edge_pad(a: A) -> Cost | None:
    """F.pad's reflect and replicate modes (input, padding): each output element a copy of one input
    element (no FLOPs); the input read and the output, its shape from a consumer's range
    (tensor_flow.py), written."""
    x, out = a.tensor(0), a.output_shape()
    if x is None or x.itemsize is None or not out or len(out) != len(x.shape):
        return None
    return Cost(0, (x.numel + prod(out)) * x.itemsize, fmt_params(a.dtype, shape=dims(x.shape), out=dims(out)),
                a.dtype, SIMT)


@register_aten("aten::mse_loss")
def mse_loss(a: A) -> Cost | None:
    """The element-wise kernel of mse_loss (self, target, reduction): a difference and a square
    per element, both inputs read, the squares written; a mean or sum after it runs in its own
    aten::mean/sum range and is priced there."""
    x = a.tensor(0)
    if x is None or x.nbytes is None:
        return None
    return Cost(2 * x.numel, 3 * x.nbytes, fmt_params(a.dtype, shape=dims(x.shape)), a.dtype, SIMT)


@register_aten("aten::mse_loss_backward")
def mse_loss_backward(a: A) -> Cost | None:
    """(grad_output, self, target, reduction): dX = 2·(x - t)·dY (/N): 2 per element (as the
    marker level's)."""
    return _loss_backward(a, 2)


def _loss_backward(a: A, per_elem: int) -> Cost | None:
    """An element-wise loss's backward (grad_output, self, target, ...): `per_elem` FLOPs an
    element; dY (a scalar after a reduction), x and t read, dX written."""
    x, grad = a.tensor(1), a.tensor(0)
    if x is None or x.nbytes is None:
        return None
    return Cost(per_elem * x.numel, 3 * x.nbytes + (grad.nbytes if grad is not None else x.itemsize),
                fmt_params(a.dtype, shape=dims(x.shape)), a.dtype, SIMT)


@register_aten("aten::smooth_l1_loss", "aten::huber_loss")
def smooth_l1_loss(a: A) -> Cost | None:
    """The element-wise kernel of smooth_l1_loss / huber_loss (self, target, reduction, beta or
    delta): loss.loss_cost unreduced (its mean or sum runs in an aten::mean/sum range of its own
    and is priced there)."""
    x, t = a.tensor(0), a.tensor(1)
    c = None if x is None or t is None else loss_cost(x, t, "none", *SMOOTH_L1_FLOPS)
    return None if c is None else replace(c, params=fmt_params(a.dtype, shape=dims(x.shape)), bwd_flops=None,
                                          bwd_bytes=None)


@register_aten("aten::smooth_l1_loss_backward", "aten::huber_loss_backward")
def smooth_l1_loss_backward(a: A) -> Cost | None:
    """(grad_output, self, target, reduction, beta or delta): loss.py's FLOPs an element."""
    return _loss_backward(a, SMOOTH_L1_FLOPS[1])
