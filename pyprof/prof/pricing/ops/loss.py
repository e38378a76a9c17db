"""Element-wise losses beyond nn.py's (cross_entropy, nll, mse, l1): binary cross-entropy (on
probabilities and on logits), smooth L1 and Huber, KL divergence.

FLOPs per element (the element-wise convention: a log or exp is one operation), plus the
reduction's when the loss is reduced (`reduction` mean or sum, the default): n - 1 adds, and one
divide for a mean:
- binary_cross_entropy: -(t·log(x) + (1 - t)·log(1 - x)): 2 logs, 2 subtractions, 2 products,
  1 add, the sign: 8; a `weight`: +1. Backward dY·(x - t) / (x·(1 - x)): 5.
- binary_cross_entropy_with_logits, in PyTorch's stable form (1 - t)·x + log(1 + exp(-x)):
  subtract, product, negate, exp, add, log, add: 7; `pos_weight`: +2, `weight`: +1. Backward
  dY·(sigmoid(x) - t): 3, and for a mean the divide by N: +1. Without weights PyTorch runs it as
  a kernel per step (named stages: _with_logits_stages).
- smooth_l1_loss / huber_loss: the difference, its absolute value, the comparison with beta,
  the square and scale (or the shift): 5. Backward: the difference, the clamp, the scale: 3.
- kl_div: t·(log(t) - x) (log_target: exp(t)·(t - x)): 3. Backward: -t·dY (-exp(t)·dY): 2.
  Without log_target, reduced by sum or batchmean, PyTorch runs it as a kernel per step (named
  stages: _kl_div_stages), as xlogy(t, t) - t·x: 4 an element, the op's totals the formula's.
Bytes: input and target (and the weights) read, the loss written (one element when reduced).
Backward: input, target (and weights) and dLoss read, dInput written.
"""
from __future__ import annotations

from dataclasses import replace

from ..registry import SIMT, Call, Cost, Unknowable, dims, fmt_params, register
from ..values import Tensor, reduce_adds


def reduced_loss(n: int, per_elem: int, read: int, reduction: str, size: int, own_kernel: bool) -> tuple:
    """(FLOPs, bytes, stages) of an element-wise loss over `n` elements, `per_elem` FLOPs each,
    `read` bytes of operands, its `size`-byte result reduced by `reduction`: n - 1 adds into one
    value and a divide for a mean (`batchmean` too). `own_kernel`: PyTorch runs it as one
    element-wise kernel writing the n values, then a reduction kernel reading them (Cost.stages)."""
    if reduction == "none":
        return n * per_elem, read + n * size, None
    red = reduce_adds(n, 1) + (reduction != "sum")
    stages = ((n * per_elem, read + n * size), (red, (n + 1) * size)) if own_kernel else None
    return n * per_elem + red, read + size, stages


def loss_cost(x: Tensor, t: Tensor, reduction: str, per_elem: int, bwd_per_elem: int,
              extra: tuple = (), own_kernel: bool = False) -> Cost | None:
    """An element-wise loss between `x` and `t` (same shape) with `extra` weight tensors.
    `own_kernel`: PyTorch runs it as one element-wise kernel and the reduction's (reduced_loss)."""
    parts = [x.nbytes, t.nbytes] + [w.nbytes for w in extra]
    if x.itemsize is None or None in parts:
        return None
    read = sum(parts)
    flops, nbytes, stages = reduced_loss(x.numel, per_elem, read, reduction, x.itemsize, own_kernel)
    return Cost(flops, nbytes, fmt_params(x.dtype, shape=dims(x.shape), reduction=reduction), x.dtype, SIMT,
                bwd_flops=x.numel * bwd_per_elem, bwd_bytes=nbytes + x.nbytes, stages=stages)


def reduction_arg(c: Call, pos: int) -> str:
    """`reduction`, or what the deprecated size_average/reduce flags (positions pos-2, pos-1) say."""
    if c.get(pos - 1, "reduce") is False:
        return "none"
    return c.get(pos, "reduction", "mean")


@register("torch.nn.functional.binary_cross_entropy")
def binary_cross_entropy(c: Call) -> Cost | None:
    w = c.tensor(2, "weight")
    return loss_cost(c.get(0, "input"), c.get(1, "target"), reduction_arg(c, 5), 8 + (w is not None), 5,
                     (w,) if w is not None else ())


def _with_logits(c: Call, w: Tensor | None, pw: Tensor | None, reduction: str) -> Cost | None:
    extra = tuple(v for v in (w, pw) if v is not None)
    x = c.get(0, "input")
    cost = loss_cost(x, c.get(1, "target"), reduction, 7 + 2 * (pw is not None) + (w is not None),
                     3 + (reduction == "mean"), extra)
    return cost if cost is None or extra else replace(cost, **_with_logits_stages(x.numel, x.itemsize, reduction))


def _with_logits_stages(n: int, size: int, reduction: str) -> dict:
    """The kernels PyTorch runs binary_cross_entropy_with_logits as without weights (named
    stages, Cost.stages), over n elements of `size` bytes: log_sigmoid(x) (4 an element: read,
    written), 1 - t as a fill of ones and a subtraction, its product with x, the log-sigmoid
    subtracted (1 each: two read, one written), then the reduction (reduced_loss's). Backward:
    sigmoid(x) (1: read, written), minus t, times dY (read and written, dY one element when
    reduced, else n), and a mean's divide by N (read and written)."""
    two, three = 2 * n * size, 3 * n * size
    red = reduce_adds(n, 1) + (reduction != "sum")
    reduced = reduction != "none"
    fwd = (("log_sigmoid_forward", 4 * n, two), ("FillFunctor", 0, n * size), ("CUDAFunctor_add", n, three),
           ("MulFunctor", n, three), ("CUDAFunctor_add", n, three)) + (
        (("reduce_kernel", red, (n + 1) * size),) if reduced else ())
    bwd = (("sigmoid", n, two), ("CUDAFunctor_add", n, three), ("MulFunctor", n, two + size if reduced else three)
           ) + ((("MulFunctor", n, two),) if reduction == "mean" else ())
    return {"stages": fwd, "bwd_stages": bwd}


@register("torch.nn.functional.binary_cross_entropy_with_logits")
def bce_with_logits(c: Call) -> Cost | None:
    """(input, target, weight, size_average, reduce, reduction, pos_weight)."""
    return _with_logits(c, c.tensor(2, "weight"), c.tensor(6, "pos_weight"), reduction_arg(c, 5))


@register("torch.binary_cross_entropy_with_logits")
def torch_bce_with_logits(c: Call) -> Cost | None:
    """(input, target, weight, pos_weight, reduction): the reduction as PyTorch's enum, 0 none.
    Its default differs between PyTorch's schema and its Python binding: when the call does not
    pass it, na."""
    reduction = c.get(4, "reduction")
    if reduction is None:
        raise Unknowable("reduction not in the marker")
    return _with_logits(c, c.tensor(2, "weight"), c.tensor(3, "pos_weight"), "none" if reduction == 0 else "mean")


# smooth_l1_loss's and huber_loss's FLOPs an element, forward and backward (module docstring).
SMOOTH_L1_FLOPS = (5, 3)


@register("torch.nn.functional.smooth_l1_loss")
def smooth_l1_loss(c: Call) -> Cost | None:
    return loss_cost(c.get(0, "input"), c.get(1, "target"), reduction_arg(c, 4), *SMOOTH_L1_FLOPS, own_kernel=True)


@register("torch.nn.functional.huber_loss")
def huber_loss(c: Call) -> Cost | None:
    return loss_cost(c.get(0, "input"), c.get(1, "target"), c.get(2, "reduction", "mean"), *SMOOTH_L1_FLOPS,
                     own_kernel=True)


def _kl_div_stages(n: int, size: int, batchmean: bool) -> dict:
    """The kernels of kl_div(x, t) without log_target over n elements of `size` bytes, summed
    (batchmean: then divided by the batch): t·x (1 an element: two read, one written), xlogy(t,
    t) (2: t read once, written), their difference (1: two read, one written), the sum
    (reduce_adds: read, one written), batchmean's divide of it (one element read and written).
    Backward: batchmean's dLoss divided (one element), -dLoss expanded (n written, 1 each), times
    t (1: two read, one written). Nsight Compute on an H200 (a Conformer's distillation loss, 8 x
    200 x 64 fp32): each kernel's stores to the byte, its reads within 15%."""
    two, three = 2 * n * size, 3 * n * size
    fwd = (("MulFunctor", n, three), ("xlogy", 2 * n, two), ("CUDAFunctor_add", n, three),
           ("reduce_kernel", reduce_adds(n, 1), (n + 1) * size)) + ((("MulFunctor", 1, 2 * size),) if batchmean else ())
    bwd = ((("MulFunctor", 1, 2 * size),) if batchmean else ()) + (("neg", n, (n + 1) * size), ("MulFunctor", n, three))
    return {"stages": fwd, "bwd_stages": bwd, "stages_in_order": True}


@register("torch.nn.functional.kl_div")
def kl_div(c: Call) -> Cost | None:
    """(input, target, size_average, reduce, reduction, log_target)."""
    x, reduction = c.get(0, "input"), reduction_arg(c, 4)
    cost = loss_cost(x, c.get(1, "target"), reduction, 3, 2)
    if cost is None or c.get(5, "log_target", False) or reduction not in ("sum", "batchmean"):
        return cost
    return replace(cost, **_kl_div_stages(x.numel, x.itemsize, reduction == "batchmean"))
