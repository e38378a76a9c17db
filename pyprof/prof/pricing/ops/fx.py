"""ATen ops as the FX nodes of compiled graphs hold them, where the schema differs from the torch function.

Kernels of torch.compile'd graphs are described by the post-grad FX nodes they compute
(pyprof/nvtx/inductor.py): ATen ops with their arguments in the ATen schema's order. Most share
a torch function's positional arguments (`aten.mm` is `torch.mm`, `aten.add.Tensor` is
`torch.add`) and are priced by that formula directly (prof/pricing/fx_nodes.py looks `torch.<name>` up
when no `aten.<name>` is registered here). The entries below map the others onto the existing
formulas; `*_backward` ops carry their forward formula's backward numbers. The argument
positions are the ATen schemas' (torch/_C/_VariableFunctions / native_functions.yaml).
"""
from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Any

from ..registry import Call, Cost, call, dims, fmt_params, lookup, register
from ..values import ITEMSIZE, Tensor, reduce_adds
from .conv import conv_cost
from .elementwise import pointwise_cost, reduce_cost, reduce_formula
from .memory import copy_cost, gather_cost, reorder
from .nn import embedding_bag_cost


def via(name: str, c: Call) -> Cost | None:
    """The registered formula `name` (`torch.nn.functional.layer_norm`) applied to `c`."""
    mod, _, op = name.rpartition(".")
    formula = lookup(mod, op)
    return None if formula is None else formula(c)


def backward(cost: Cost | None) -> Cost | None:
    """The backward node of an op, as a cost of its own (its kernels' stages the backward's)."""
    if cost is None or cost.bwd_flops is None:
        return None
    return replace(cost, flops=cost.bwd_flops, bytes=cost.bwd_bytes, bwd_flops=None, bwd_bytes=None,
                   stages=cost.bwd_stages, bwd_stages=None)


register("aten.var_mean")(reduce_formula("var"))


@register("prims.convert_element_type")
def convert_element_type(c: Call) -> Cost | None:
    return copy_cost(c.args[0], c.get(1, "dtype"))


@register("aten._to_copy")
def to_copy(c: Call) -> Cost | None:
    x = c.args[0]
    return copy_cost(x, c.get(None, "dtype") or x.dtype)


@register("aten.embedding")
def embedding(c: Call) -> Cost | None:
    """embedding(weight, indices, ...): the operands of F.embedding swapped."""
    return via("torch.nn.functional.embedding", call(c.args[1], c.args[0]))


@register("aten.embedding_dense_backward")
def embedding_backward(c: Call) -> Cost | None:
    """(grad_output, indices, num_weights, ...): the embedding's backward, dWeight rows of dY's width."""
    dy, idx, rows = c.args[0], c.args[1], c.get(2, "num_weights")
    return backward(via("torch.nn.functional.embedding", call(idx, Tensor((rows, dy.shape[-1]), dy.dtype))))


# _embedding_bag's mode, an int in the ATen schema.
_BAG_MODES = {0: "sum", 1: "mean", 2: "max"}


@register("aten._embedding_bag", "aten._embedding_bag_forward_only")
def embedding_bag(c: Call) -> Cost | None:
    """(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
    include_last_offset, ...): nn.embedding_bag_cost, a bag per offset (the last one closing the
    others where include_last_offset)."""
    w, idx, offsets = c.args[0], c.args[1], c.get(2, "offsets")
    if not isinstance(offsets, Tensor) or len(offsets.shape) != 1:
        return None
    bags = offsets.numel - (1 if c.get(7, "include_last_offset", False) else 0)
    return embedding_bag_cost(idx, w, offsets, c.tensor(6, "per_sample_weights"), bags,
                              _BAG_MODES.get(c.get(4, "mode", 0)))


@register("aten._embedding_bag_backward", "aten._embedding_bag_dense_backward")
def embedding_bag_backward(c: Call) -> Cost | None:
    """(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
    scale_grad_by_freq, mode, sparse, per_sample_weights, ...) (the dense one without offsets):
    nn.embedding_bag_cost's dense backward, its kernels' named stages and dWeight's zero fill."""
    dense = c.marker.get("op", "").startswith("aten._embedding_bag_dense_backward")
    dy, idx = c.args[0], c.args[1]
    at = 5 if dense else 6
    rows, mode = c.get(at, "num_weights"), _BAG_MODES.get(c.get(at + 2, "mode", 0))
    if not isinstance(rows, int) or len(dy.shape) != 2 or not dense and c.get(9, "sparse", False) is True:
        return None
    psw = c.tensor(at + 3 if dense else at + 4, "per_sample_weights")
    w = Tensor((rows, dy.shape[1]), dy.dtype)
    return backward(embedding_bag_cost(idx, w, None, psw, dy.shape[0], mode, dense=mode != "max"))


@register("aten.index", "aten._unsafe_index")
def index_gather(c: Call) -> Cost | None:
    """self[indices] (advanced indexing, None for a dimension taken whole): memory.gather_cost of
    the node's output's elements."""
    x, out = c.args[0], c.marker.get("out")
    indices = [t for t in (c.args[1] if isinstance(c.args[1], list) else []) if isinstance(t, Tensor)]
    shape = out.get("shape") if isinstance(out, dict) else None
    if not isinstance(shape, list):
        return None
    return gather_cost(x, indices, prod(shape), out=dims(tuple(shape)))


@register("aten.repeat")
def repeat(c: Call) -> Cost | None:
    """x tiled `repeats` times: x read, the result written; its backward sums the tiles (an add
    per result element beyond x's)."""
    x, times = c.args[0], c.args[1]
    if x.nbytes is None or not isinstance(times, list):
        return None
    n = x.numel * prod(times)
    return Cost(0, x.nbytes + n * x.itemsize, fmt_params(x.dtype, shape=dims(x.shape), repeats=dims(times)), x.dtype,
                bwd_flops=n - x.numel, bwd_bytes=n * x.itemsize + x.nbytes)


@register("aten.copy")
def copy(c: Call) -> Cost | None:
    """copy(self, src): src's values (broadcast) in self's shape and dtype, out of place: src
    read, the result written."""
    x, src = c.args[0], c.args[1]
    if x.itemsize is None or src.nbytes is None:
        return None
    return Cost(0, src.nbytes + x.numel * x.itemsize, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype)


@register("aten.scalar_tensor")
def scalar_tensor(c: Call) -> Cost | None:
    """A 0-dim tensor of a scalar: its one element written."""
    out = c.marker.get("out")
    size = ITEMSIZE.get(out.get("dtype")) if isinstance(out, dict) else None
    return None if size is None else Cost(0, size, "", out.get("dtype"))


@register("prims.iota")
def iota(c: Call) -> Cost | None:
    n, dtype = c.args[0], c.get(None, "dtype")
    size = ITEMSIZE.get(dtype)
    return None if size is None else Cost(0, n * size, fmt_params(dtype, shape=dims((n,))), dtype)


@register("prims.fma")
def fma(c: Call) -> Cost:
    """a·b + c, element-wise."""
    return pointwise_cost("fma", list(c.args[:3]))


register("prims.rev")(reorder)  # flip's decomposition: a permuted copy


@register("prims.prepare_softmax_online")
def prepare_softmax_online(c: Call) -> Cost | None:
    """(input, dim) -> (max, sum of exp(input - max)) along dim in one pass: logsumexp's work but
    its log, per element; the input read, both results written."""
    x, dim = c.args[0], c.args[1]
    axes = {d % len(x.shape) for d in (dim if isinstance(dim, list) else [dim])} if x.shape else set()
    out = prod(n for i, n in enumerate(x.shape) if i not in axes)
    cost = reduce_cost("logsumexp", x, out, None, dims(sorted(axes)), True)
    return None if cost.bytes is None else replace(cost, bytes=cost.bytes + out * x.itemsize, bwd_flops=None,
                                                  bwd_bytes=None)


# Inductor's random numbers (fallback_random off): the seeds drawn once per graph
# (inductor_seeds: `count` int64 written, by one random kernel), each random op's seed looked up
# in them (one element read), and the values generated from it (Philox: integer work, no FLOPs;
# the values written), as eager random fills are priced (aten.py random_fill).
@register("prims.inductor_seeds")
def inductor_seeds(c: Call) -> Cost:
    count = c.args[0]
    return Cost(0, 8 * count, fmt_params("int64", shape=dims((count,))), "int64")


@register("prims.inductor_lookup_seed")
def inductor_lookup_seed(c: Call) -> Cost:
    return Cost(0, 8, fmt_params("int64", shape="-"), "int64")


@register("prims.inductor_random", "prims.inductor_randint")
def inductor_random(c: Call) -> Cost | None:
    """(size, seed, mode) / (low, high, size, seed): the values written, in the node's output
    dtype (float32 or int64)."""
    out = c.marker.get("out")
    dtype = out.get("dtype") if isinstance(out, dict) else None
    shape = next((a for a in c.args if isinstance(a, list)), None)
    size = ITEMSIZE.get(dtype)
    if size is None or shape is None:
        return None
    return Cost(0, prod(shape) * size, fmt_params(dtype, shape=dims(tuple(shape))), dtype)


@register("aten.empty", "aten.empty_strided")
def empty(c: Call) -> Cost:
    """An allocation: no kernel, no work."""
    return Cost(0, 0, "", None)


@register("aten.native_layer_norm")
def native_layer_norm(c: Call) -> Cost | None:
    return via("torch.nn.functional.layer_norm", c)


@register("aten.native_layer_norm_backward")
def native_layer_norm_backward(c: Call) -> Cost | None:
    """(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)."""
    a = c.args
    return backward(via("torch.nn.functional.layer_norm", call(a[1], a[2], a[5], a[6])))


@register("aten._native_batch_norm_legit_functional")
def batch_norm_functional(c: Call) -> Cost | None:
    """(input, weight, bias, running_mean, running_var, training, momentum, eps)."""
    a = c.args
    return via("torch.nn.functional.batch_norm", call(a[0], a[3], a[4], a[1], a[2], a[5]))


@register("aten.native_batch_norm_backward")
def native_batch_norm_backward(c: Call) -> Cost | None:
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, ...)."""
    a = c.args
    return backward(via("torch.nn.functional.batch_norm", call(a[1], a[3], a[4], a[2], None, a[7])))


@register("aten.grid_sampler_2d")
def grid_sampler_2d(c: Call) -> Cost | None:
    """(input, grid, interpolation_mode, padding_mode, align_corners)."""
    return via("torch.grid_sampler", c)


@register("aten.grid_sampler_2d_backward")
def grid_sampler_2d_backward(c: Call) -> Cost | None:
    """(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    dInput where output_mask's first says it is computed."""
    a = c.args
    x, mask = a[1], c.get(6, "output_mask")
    if isinstance(x, Tensor) and isinstance(mask, list) and mask and mask[0] is False:
        x = x._replace(grad=False)
    return backward(via("torch.grid_sampler", call(x, *a[2:4])))


@register("aten._log_softmax")
def log_softmax(c: Call) -> Cost | None:
    return via("torch.nn.functional.log_softmax", call(c.args[0], c.args[1]))


@register("aten._softmax_backward_data", "aten._log_softmax_backward_data")
def softmax_backward(c: Call) -> Cost | None:
    """(grad_output, output, dim, input_dtype)."""
    return backward(via("torch.nn.functional.softmax", call(c.args[1], c.args[2])))


@register("aten.gelu_backward")
def gelu_backward(c: Call) -> Cost | None:
    return backward(via("torch.nn.functional.gelu", call(c.args[1], approximate=c.get(None, "approximate"))))


@register("aten.sigmoid_backward", "aten.tanh_backward", "aten.threshold_backward", "aten.native_dropout_backward")
def pointwise_backward(c: Call) -> Cost:
    """One FLOP per element over the gradient and the saved tensor (output, input or mask)."""
    return pointwise_cost("mul", [c.args[0], c.args[1]])


@register("aten.native_dropout")
def native_dropout(c: Call) -> Cost | None:
    return via("torch.nn.functional.dropout", call(c.args[0], c.args[1], c.get(2, "train", True)))


# SDPA's backends, by schema: positions of (attention mask or bias, dropout_p, is_causal); the
# backward ops take grad_out first, so q, k, v start at 1.
_SDPA: dict[str, tuple] = {
    "_scaled_dot_product_flash_attention": (0, None, 3, 4),
    "_scaled_dot_product_efficient_attention": (0, 3, 5, 6),
    "_scaled_dot_product_cudnn_attention": (0, 3, 5, 6),
    "_scaled_dot_product_fused_attention_overrideable": (0, 3, 4, 5),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "attn_mask", 3, 4),
    "_scaled_dot_product_flash_attention_backward": (1, None, 10, 11),
    "_scaled_dot_product_efficient_attention_backward": (1, 4, 9, 11),
    "_scaled_dot_product_cudnn_attention_backward": (1, 8, 13, 14),
    "_scaled_dot_product_fused_attention_overrideable_backward": (1, 4, 12, 13),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "attn_mask", 6, 7),
}


def _sdpa(name: str, q_at: int, mask_at: Any, dropout_at: int, causal_at: int):
    def formula(c: Call) -> Cost | None:
        q, k, v = c.args[q_at:q_at + 3]
        mask = c.get(None, mask_at) if isinstance(mask_at, str) else (c.get(mask_at, "attn_bias") if mask_at else None)
        causal = c.get(causal_at, "is_causal", False)
        cost = via("torch.nn.functional.scaled_dot_product_attention",
                   call(q, k, v, mask if isinstance(mask, Tensor) else None, c.get(dropout_at, "dropout_p", 0.0),
                        bool(causal)))
        return backward(cost) if name.endswith("_backward") else cost
    return formula


for _name, _at in _SDPA.items():
    register(f"aten.{_name}")(_sdpa(_name, *_at))


def sdpa_arguments(op: str, args: list) -> list | None:
    """A forward SDPA backend node's arguments in F.scaled_dot_product_attention's order (query,
    key, value, attn_mask, dropout_p, is_causal), for the parts an eager call has (parts.py:
    cuDNN's seed unpacking where it drops out); None for another op."""
    name = op.split(".")[1] if "." in op else op
    at = _SDPA.get(name)
    if at is None or name.endswith("_backward"):
        return None
    q_at, *rest = at
    # The mask is a keyword (None here) where its position is a name (the CPU flash backend's).
    return [*args[q_at:q_at + 3], *(args[i] if isinstance(i, int) and i < len(args) else None for i in rest)]


def _conv(c: Call) -> Cost | None:
    """convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
    groups), as torch's conv{N}d / conv_transpose{N}d."""
    x, w, bias, stride, pad, dil, transposed, out_pad, groups = c.args[:9]
    nd = len(w.shape) - 2
    if transposed:
        return conv_cost(call(x, w, bias, stride, pad, out_pad, groups, dil), nd, True)
    return conv_cost(call(x, w, bias, stride, pad, dil, groups), nd, False)


register("aten.convolution")(_conv)


def backward_forward_conv(c: Call) -> Cost | None:
    """The forward convolution a convolution_backward node differentiates: its input, weight and
    the forward's arguments after bias_sizes."""
    a = c.args
    return _conv(call(a[1], a[2], None, *a[4:10]))


@register("aten.convolution_backward")
def convolution_backward(c: Call) -> Cost | None:
    """(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
    output_padding, groups, output_mask): the data and the weight gradient each cost one forward
    on the same three tensors (docs/prof.md), the weight's reading only the input the forward read
    (Cost.unread); the bias gradient is dY summed to its channels (dim 1), read and written as a
    marker's bias gradient part is (parts.backward_parts)."""
    a = c.args
    fwd = backward_forward_conv(c)
    mask = a[10]
    grads = int(bool(mask[0])) + int(bool(mask[1]))
    size = ITEMSIZE.get(fwd.dtype) if fwd is not None else None
    if fwd is None or size is None or fwd.elems is None:
        return None
    dy = a[0]
    channels = dy.shape[1] if mask[2] and len(dy.shape) > 1 else 0
    elems = grads * fwd.elems - (fwd.unread if mask[1] else 0) + (dy.numel + channels if channels else 0)
    return replace(fwd, flops=grads * fwd.flops + reduce_adds(dy.numel, channels), bytes=elems * size,
                   bias_elems=0)


def _pool_backward(kind: str, nd: int):
    def formula(c: Call) -> Cost | None:
        """(grad_output, self, kernel_size, stride, padding, [dilation,] ceil_mode, ...)."""
        a = c.args
        fwd_args = a[1:7] if kind == "max" else a[1:6]
        return backward(via(f"torch.nn.functional.{kind}_pool{nd}d", call(*fwd_args)))
    return formula


for _nd in (1, 2, 3):
    register(f"aten.max_pool{_nd}d_with_indices")(
        lambda c, _nd=_nd: via(f"torch.nn.functional.max_pool{_nd}d", call(*c.args[:6])))
    register(f"aten.max_pool{_nd}d_with_indices_backward")(_pool_backward("max", _nd))
    register(f"aten.avg_pool{_nd}d_backward")(_pool_backward("avg", _nd))


# Inductor's own max pooling, which keeps the argmax as an int8 offset inside the window:
# _low_memory_max_pool_with_offsets(input, kernel_size, stride, padding, dilation, ceil_mode) is
# max_pool's forward; turning the offsets into int64 indices for the backward is integer math.
# (Older torch spells them with `2d`.)
@register("prims._low_memory_max_pool_with_offsets", "prims._low_memory_max_pool2d_with_offsets")
def low_memory_max_pool(c: Call) -> Cost | None:
    nd = len(c.args[1]) if isinstance(c.args[1], list) else 2
    return via(f"torch.nn.functional.max_pool{nd}d", call(*c.args[:6]))


@register("prims._low_memory_max_pool_offsets_to_indices", "prims._low_memory_max_pool2d_offsets_to_indices")
def offsets_to_indices(c: Call) -> Cost | None:
    offsets = c.args[0]
    if offsets.nbytes is None:
        return None
    return Cost(0, offsets.nbytes + 8 * offsets.numel, fmt_params("int64", shape=dims(offsets.shape)), "int64")


@register("aten.nll_loss_forward")
def nll_loss(c: Call) -> Cost | None:
    """(self, target, weight, reduction, ignore_index)."""
    return via("torch.nn.functional.nll_loss", call(c.args[0], c.args[1], c.args[2]))


@register("aten.index_put", "aten.index_put_", "aten._unsafe_index_put", "aten._unsafe_masked_index_put_accumulate")
def index_put(c: Call) -> Cost | None:
    """self[indices] = values (or +=): the indices and values read, the addressed elements read and
    written when accumulating (one add each), else written."""
    x = c.args[0]
    values = next((a for a in reversed(c.args) if isinstance(a, Tensor)), None)
    masked = len(c.args) == 4 and not isinstance(c.args[3], bool)
    accumulate = masked or bool(c.get(3, "accumulate", False))
    index = [t for a in c.args[1:] for t in (a if isinstance(a, list) else [a])
             if isinstance(t, Tensor) and t is not values]
    size = x.itemsize
    if values is None or size is None or values.nbytes is None or any(t.nbytes is None for t in index):
        return None
    n = values.numel
    nbytes = values.nbytes + sum(t.nbytes for t in index) + (2 if accumulate else 1) * n * size
    return Cost(n if accumulate else 0, nbytes, fmt_params(x.dtype, shape=dims(x.shape), values=dims(values.shape)),
                x.dtype)


@register("aten.constant_pad_nd")
def constant_pad_nd(c: Call) -> Cost | None:
    """The input read, the padded result written."""
    x, pad = c.args[0], c.args[1]
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        shape[-1 - i] += pad[2 * i] + pad[2 * i + 1]
    if x.nbytes is None:
        return None
    return Cost(0, x.nbytes + prod(shape) * x.itemsize, fmt_params(x.dtype, shape=dims(x.shape), pad=dims(pad)),
                x.dtype)
