"""Neural-network layers that are not matrix products: normalization, softmax, losses,
pooling, interpolation, embeddings.

FLOPs per element (a convention, documented in docs/prof.md):
- layer/group/batch norm (training statistics): 6 (mean 1, variance 3, normalize 2), +1 each for
  the affine weight and bias; batch norm in eval mode: 2 (+1 +1).
- rms_norm: 3 (square 1, sum 1, scale 1), +1 for the weight.
- softmax / log_softmax: 5 (max, subtract, exp, sum, divide or log-subtract); backward 4.
- pooling: one comparison or add per window tap per output; interpolation: 2 per tap.
Backward (the whole autograd node, on its first kernel, or split into the kernels PyTorch runs:
group_norm, and layer/rms norm with a weight, Cost.stages): norms 2x the forward's FLOPs, bytes dY,
X and the weight read, dX, dWeight and dBias written (per-row or per-channel statistics, O(rows),
not counted), each gradient only where its tensor required grad (the marker's `"grad":true`):
dX 2 FLOPs per forward normalizing FLOP (dY, X and the weight read, dX written), dWeight and dBias
2 per element each (dY and X read, the gradient written); losses: below. Pooling and interpolation backward: dY read, dX written (max
pooling: the int64 indices read too), so the forward's bytes; FLOPs: max pooling one add per dY
element (scattered through the indices; overlapping windows add into one dX element), average
pooling the forward's (dY / window, one add per tap; a global average one multiply per dX element), interpolation the forward's (weight times
dY added into each tap) and for nearest one add per dY element. embedding_bag backward: its
formula's docstring, kernel by kernel (sorted_backward_stages), and embedding's of many indices.
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil, floor, prod
from typing import Any

from ..cub_sort import radix_sort_pairs
from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register
from ..values import ITEMSIZE, Tensor, acc_size, ntuple, promote, reduce_adds
from .batch_norm import batch_norm_kernels, batch_norm_stages, cudnn_stages
from .loss import reduced_loss, reduction_arg


def _io(x: Tensor, out_numel: int, *params: Tensor | None, out_dtype: str | None = None) -> int | None:
    """Bytes: `x` and the parameter tensors read once, an output of `out_numel` elements written."""
    size = ITEMSIZE.get(out_dtype or x.dtype)
    parts = [x.nbytes] + [p.nbytes for p in params if p is not None]
    return None if size is None or None in parts else sum(parts) + out_numel * size


def norm_cost(x: Tensor, per_elem: int, weight: Tensor | None, bias: Tensor | None,
              extra: tuple = (), **fields) -> Cost:
    """A normalization over `x`: `per_elem` FLOPs per element plus one each for the affine weight
    and bias; `extra` tensors read too (running statistics). Backward: the module docstring."""
    n = x.numel
    flops = n * (per_elem + (weight is not None) + (bias is not None))
    size = x.itemsize
    dx = x.grad is not False
    dw, db = (p is not None and p.grad is not False for p in (weight, bias))
    # W read for dX; dW and dB written
    params = [p.nbytes for p, needed in ((weight, dx), (weight, dw), (bias, db)) if p is not None and needed]
    elems = 1 + (dx or dw) + dx  # dY read; X read; dX written
    bwd_bytes = None if size is None or None in params else elems * n * size + sum(params)
    return Cost(flops, _io(x, n, weight, bias, *extra), fmt_params(x.dtype, shape=dims(x.shape), **fields),
                x.dtype, SIMT, bwd_flops=2 * n * (per_elem * dx + dw + db), bwd_bytes=bwd_bytes)


def _row_norm_backward(cost: Cost, x: Tensor, w: Tensor | None, b: Tensor | None, per_elem: int) -> Cost:
    """A layer or RMS norm's backward as PyTorch's CUDA kernels run it when it computes dX and
    dWeight or dBias (Cost.bwd_stages): dX (norm_cost's 2·per_elem per element; dY, X, the
    weight and each row's statistics read, dX written), then dWeight and dBias (2 per element
    each; dY, X and the statistics read, the sums written)."""
    size = x.itemsize
    dw, db = (p is not None and p.grad is not False for p in (w, b))
    if w is None or not w.numel or size is None or x.grad is False or not (dw or db) or x.numel % w.numel:
        return cost
    e, d = x.numel, w.numel
    stats = 2 * (e // d) * size
    return replace(cost, bwd_stages=((2 * e * per_elem, (3 * e + d) * size + stats),
                                     (2 * e * (dw + db), 2 * e * size + stats + d * size * (dw + db))))


def row_norm_cost(x: Tensor, per_elem: int, w: Tensor | None, b: Tensor | None) -> Cost:
    """A layer norm (`per_elem` 6) or RMS norm (3) over the last dims of `x`: norm_cost's;
    backward _row_norm_backward's."""
    return _row_norm_backward(norm_cost(x, per_elem, w, b), x, w, b, per_elem)


@register("torch.nn.functional.layer_norm", "torch.layer_norm")
def layer_norm(c: Call) -> Cost:
    """row_norm_cost's."""
    return row_norm_cost(c.get(0, "input"), 6, c.tensor(2, "weight"), c.tensor(3, "bias"))


@register("torch.nn.functional.group_norm", "torch.group_norm")
def group_norm(c: Call) -> Cost:
    """norm_cost's; with an affine weight and bias, the kernels PyTorch's CUDA group norm runs
    (Cost.stages), over E elements of N samples, C channels, G groups, all in the op's dtype:
    forward the moments (X read, mean and rstd written per group), the fused parameters (a =
    rstd·w, b = bias - mean·a: 3 per sample and channel; mean, rstd, w, bias read, a and b
    written) and Y = a·X + b (2 per element; X, a, b read, Y written); backward the sums of dY·X
    and dY per sample and channel (dY, X read), c1 = rstd·w (1 each), the fused parameters c2,
    c3 (4 per sample and channel), dX = c1·dY + c2·X + c3 (4 per element; dY, X, c1, c2, c3 read,
    dX written) and dWeight, dBias (4 per sample and channel), when all three gradients are
    computed. The kernel that reads every element first (the moments; the sums) carries the rest
    of the formula's FLOPs."""
    return group_norm_cost(c.get(0, "input"), c.tensor(2, "weight"), c.tensor(3, "bias"), c.get(1, "num_groups"))


def group_norm_cost(x: Tensor, w: Tensor | None, b: Tensor | None, groups: Any) -> Cost:
    """group_norm's formula over input `x`, affine `w` and `b`, `groups` groups."""
    cost = norm_cost(x, 6, w, b, g=groups)
    size = x.itemsize
    if w is None or b is None or size is None or type(groups) is not int or groups <= 0 or len(x.shape) < 2 \
            or cost.flops is None:
        return cost
    e, nc, ch = x.numel, x.shape[0] * x.shape[1], x.shape[1]
    ng = x.shape[0] * groups
    params, apply = (3 * nc, (2 * ng + 2 * ch + 2 * nc) * size), (2 * e, (2 * e + 2 * nc) * size)
    moments = (cost.flops - params[0] - apply[0], (e + 2 * ng) * size)
    sums = (2 * e + 2 * nc) * size
    c1, fused = (nc, (ng + ch + nc) * size), (4 * nc, (2 * nc + 2 * ng + ch + 2 * ng) * size)
    dx, dwb = (4 * e, (3 * e + nc + 2 * ng) * size), (4 * nc, (2 * nc + 2 * ng + 2 * ch) * size)
    rest = cost.bwd_flops - c1[0] - fused[0] - dx[0] - dwb[0]
    every = all(t.grad is not False for t in (x, w, b))
    return replace(cost, stages=(moments, params, apply),
                   bwd_stages=((rest, sums), c1, fused, dx, dwb) if every else None)


@register("torch.nn.functional.rms_norm", "torch.rms_norm")
def rms_norm(c: Call) -> Cost:
    """row_norm_cost's."""
    return row_norm_cost(c.get(0, "input"), 3, c.tensor(2, "weight"), None)


@register("torch.nn.functional.batch_norm")
def batch_norm(c: Call) -> Cost:
    """Training also reads and writes the running statistics (when given); the kernels PyTorch
    runs it as, each its stage (batch_norm.py)."""
    return _batch_norm(c, (1, 2, 3, 4))


@register("torch.batch_norm")
def torch_batch_norm(c: Call) -> Cost:
    """batch_norm's, with torch.batch_norm's order: input, weight, bias, running_mean, running_var."""
    return _batch_norm(c, (3, 4, 1, 2))


def _batch_norm(c: Call, at: tuple[int, int, int, int]) -> Cost:
    """F.batch_norm's cost with running_mean, running_var, weight and bias at positions `at`."""
    x = c.get(0, "input")
    rm, rv = c.tensor(at[0], "running_mean"), c.tensor(at[1], "running_var")
    w, b = c.tensor(at[2], "weight"), c.tensor(at[3], "bias")
    training = bool(c.get(5, "training", False))
    stats = (rm, rv, rm, rv) if training else (rm, rv)
    return batch_norm_kernels(norm_cost(x, 6 if training else 2, w, b, stats, training=int(training)),
                              x, w, b, rm, rv, training)


@register("torch.nn.functional.log_softmax", *names(["log_softmax"]))
def log_softmax(c: Call) -> Cost:
    """softmax's count: 5 FLOPs per element, backward 4 (module docstring)."""
    x = c.get(0, "input")
    return softmax_cost(x, _out_dtype(c, x), dim=c.get(1, "dim"))


def _out_dtype(c: Call, x: Tensor) -> str | None:
    # dtype is positional 2 in torch.softmax but keyword-only in F.softmax (after _stacklevel)
    return c.get(None, "dtype") or next((a for a in c.args[2:] if isinstance(a, str) and a in ITEMSIZE), x.dtype)


@register("torch.nn.functional.softmax", *names(["softmax", "_softmax"]))
def softmax(c: Call) -> Cost:
    """log_softmax's count; backward as PyTorch's CUDA softmax runs it, where the gradient is in
    the input's dtype (softmax_backward_stages)."""
    cost = log_softmax(c)
    x = c.get(0, "input")
    size = ITEMSIZE.get(x.dtype)
    if size is None or _out_dtype(c, x) != x.dtype:
        return cost
    return replace(cost, bwd_stages=softmax_backward_stages(x.numel, size))


def softmax_backward_stages(n: int, size: int) -> tuple:
    """softmax's backward over `n` elements of `size` bytes as PyTorch's CUDA kernels run it:
    T = dY·Y (1 per element; dY and Y read, T written), then dX = T - Y·sum(T) (the other 3; T
    and Y read, dX written)."""
    return (n, 3 * n * size), (3 * n, 3 * n * size)


def softmax_cost(x: Tensor, out_dtype: str | None, **fields: Any) -> Cost:
    """softmax or log_softmax of `x` into `out_dtype`: 5 FLOPs per element, x read and the result
    written; backward 4 per element, dY and Y read, dX written."""
    n = x.numel
    size = ITEMSIZE.get(out_dtype)
    return Cost(5 * n, _io(x, n, out_dtype=out_dtype), fmt_params(x.dtype, shape=dims(x.shape), **fields),
                x.dtype, SIMT, bwd_flops=4 * n, bwd_bytes=None if size is None else 3 * n * size)


def _loss_out(c: Call, pos: int, n: int) -> int:
    return n if c.get(pos, "reduction", "mean") == "none" else 1


@register("torch.nn.functional.cross_entropy")
def cross_entropy(c: Call) -> Cost | None:
    """log_softmax over the class dim (5 per element) then nll_loss (1 per sample). Probability
    targets (same shape as the input) read the full target instead.

    With class-index targets and no label smoothing PyTorch runs the two as kernels of their own
    (Cost.stages): log_softmax (the logits read, the log-probabilities written), nll_loss (the
    targets and one log-probability per sample read, the loss written); backward nll_loss's
    (the targets and dLoss read, one gradient per sample scattered into dLogProb: 1 per sample)
    then log_softmax's (the log-probabilities and dLogProb read, dInput written: 4 per element).
    Reduced over an input of 3 or more dims, PyTorch's nll_loss2d runs nll_loss as four kernels:
    the loss and the total weight zeroed (one element written each), the sum over the samples
    (samples - 1 adds; the targets and one log-probability per sample read, the two sums
    written), and for a mean the division (1: both read, the loss written). With label smoothing
    (class-index targets, no weight, a mean), _smoothing_stages."""
    x, t = c.get(0, "input"), c.get(1, "target")
    classes = x.shape[1] if len(x.shape) > 1 else x.shape[0]
    samples = x.numel // classes
    size, tb = x.itemsize, t.nbytes
    if size is None or tb is None:
        return None
    out = _loss_out(c, 6, samples)
    softmax, nll = 2 * x.numel * size, samples * size + out * size
    # Backward: the saved log-probabilities, the targets and dLoss read, dInput written; 4 FLOPs
    # per element (log_softmax backward) plus one per sample (nll backward).
    staged = t.dtype in ("int64", "int32") and not c.get(7, "label_smoothing", 0.0)
    reduction = c.get(6, "reduction", "mean")
    if len(x.shape) > 2 and reduction in ("mean", "sum"):
        mean = reduction == "mean"
        nll_stages = ((0, size), (0, size), (reduce_adds(samples, 1), (samples + 2) * size, tb)) + ((1, 3 * size),) * mean
    else:
        nll_stages = ((samples, nll, tb),)
    cost = Cost(5 * x.numel + samples, softmax + nll + tb,
                fmt_params(x.dtype, shape=dims(x.shape), target=dims(t.shape)), x.dtype, SIMT,
                bwd_flops=4 * x.numel + samples, bwd_bytes=2 * x.numel * size + tb + out * size,
                stages=((5 * x.numel, softmax),) + nll_stages if staged else None,
                bwd_stages=(_nll_backward(samples, out, size, tb), (4 * x.numel, 3 * x.numel * size))
                if staged else None)
    smoothed = t.dtype in ("int64", "int32") and c.get(7, "label_smoothing", 0.0) and len(x.shape) == 2 \
        and c.get(2, "weight") is None and reduction == "mean"
    return replace(cost, **_smoothing_stages(x.numel, samples, size, t.itemsize, nll_stages[0])) if smoothed else cost


def _smoothing_stages(e: int, n: int, size: int, tsize: int, nll: tuple) -> dict:
    """cross_entropy with label smoothing over n samples of e / n classes, reduced by a mean, as
    PyTorch's cross_entropy_loss_label_smoothing runs it, kernel by kernel (1 FLOP an element,
    the reductions' values.reduce_adds; the targets' and masks' bytes apart): log_softmax, nll_loss
    (`nll`), the log-probabilities summed over the classes, negated, the ignored targets found
    (targets read, n bools written), zeroed there (masked_fill_), the mask inverted and cast to
    int64 to be counted, the count's and the smoothed losses' sums, their division, the two terms
    scaled and added (one element each). Backward: the scalings' and the division's (one element
    each), the expanded gradient made whole and zeroed where ignored, negated, nll_loss's,
    log_softmax's (nll_loss's zero fill of dInput and the engine's add of the two gradients of
    the log-probabilities are parts of their own, parts.py)."""
    f = size
    fwd = ((5 * e, 2 * e * f), nll, (reduce_adds(e, n), (e + n) * f), (n, 2 * n * f), (n, 0, n * tsize + n),
           (n, 2 * n * f, n), (n, 0, 2 * n), (0, 0, n + 8 * n), (reduce_adds(n, 1), 0, 8 * n + 8),
           (reduce_adds(n, 1), n * f + f), (1, 2 * f, 8), (1, 2 * f), (1, 2 * f), (1, 3 * f))
    bwd = ((1, 2 * f), (1, 2 * f), (1, 2 * f, 8), (0, f + n * f), (n, 2 * n * f, n), (n, 2 * n * f),
           _nll_backward(n, 1, f, n * tsize), (4 * e, 3 * e * f))
    return {"flops": sum(s[0] for s in fwd), "stages": fwd, "bwd_flops": sum(s[0] for s in bwd), "bwd_stages": bwd}


@register("torch.nn.functional.nll_loss")
def nll_loss(c: Call) -> Cost | None:
    """Gathers one log-probability per sample: reads those and the targets, writes the loss.
    Backward: _nll_backward."""
    x, t = c.get(0, "input"), c.get(1, "target")
    if x.itemsize is None or t.nbytes is None:
        return None
    samples = t.numel
    out = _loss_out(c, 6, samples)
    bwd = _nll_backward(samples, out, x.itemsize, t.nbytes)
    return Cost(samples, samples * x.itemsize + t.nbytes + out * x.itemsize,
                fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT, bwd_flops=bwd[0], bwd_bytes=bwd[1] + bwd[2])


def _nll_backward(samples: int, out: int, size: int, target_bytes: int) -> tuple:
    """(FLOPs, bytes in the loss's dtype, the targets' bytes) of nll_loss's backward kernel: dLoss
    (`out` elements) and the targets read, one gradient per sample written into the zero-filled
    dInput (the fill a part of its own, parts.py)."""
    return samples, (out + samples) * size, target_bytes


@register("torch.nn.functional.mse_loss", "torch.nn.functional.l1_loss")
def mse_loss(c: Call) -> Cost | None:
    """Subtract and square (or abs): 2 per element, then the reduction's n - 1 adds (and its
    divide for a mean). mse_loss runs the first two in one kernel and reduces in one of its own
    (Cost.stages); l1_loss runs three (_l1_stages). Backward: input, target and dLoss read,
    dInput written, 2 per element (subtract, scale)."""
    x, t = c.get(0, "input"), c.get(1, "target")
    n = x.numel
    size = ITEMSIZE.get(promote([x.dtype, t.dtype]))
    if size is None or x.nbytes is None or t.nbytes is None:
        return None
    reduction = reduction_arg(c, 4)
    mse = c.marker.get("op") == "mse_loss"
    flops, nbytes, stages = reduced_loss(n, 2, x.nbytes + t.nbytes, reduction, size, mse)
    cost = Cost(flops, nbytes, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT,
                bwd_flops=2 * n, bwd_bytes=nbytes + n * size, stages=stages)
    return cost if mse else replace(cost, **_l1_stages(n, x.nbytes + t.nbytes, size, reduction))


def _l1_stages(n: int, read: int, size: int, reduction: str) -> dict:
    """l1_loss's kernels over n elements of `size` bytes, `read` bytes of input and target: the
    difference (1 an element: both read, n written), its abs (read, written), then the
    reduction's (reduced_loss). Backward: a mean's dLoss / N spread over the n elements (written),
    sign(difference) (read, written), their product (read, written; dLoss one element read when
    reduced by a sum): 2 FLOPs an element, 3 for a mean."""
    _, _, reduced = reduced_loss(n, 1, read, reduction, size, True)
    fwd = ((n, read + n * size), (n, 2 * n * size)) + (reduced[1:] if reduced else ())
    spread = ((n, (n + 1) * size),) if reduction == "mean" else ()
    product = 2 * n * size + (size if reduction == "sum" else n * size)
    bwd = spread + ((n, 2 * n * size), (n, product))
    return {"flops": sum(s[0] for s in fwd), "stages": fwd, "bwd_flops": sum(s[0] for s in bwd), "bwd_stages": bwd}


def _pool_out(i: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = i + 2 * p - d * (k - 1) - 1
    o = (ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= i + p:  # PyTorch: the last window must start inside the input
        o -= 1
    return o


def _pool(nd: int, kind: str):
    def formula(c: Call) -> Cost:
        """max: one comparison per tap, int64 indices written too (CUDA max pooling always
        computes them); avg: one add per tap plus one divide per output."""
        x = c.get(0, "input")
        k = ntuple(c.get(1, "kernel_size"), nd)
        s = c.get(2, "stride")
        s = k if s is None or s == [] else ntuple(s, nd)
        p = ntuple(c.get(3, "padding", 0), nd)
        d = ntuple(c.get(4, "dilation", 1), nd) if kind == "max" else (1,) * nd
        ceil_mode = bool(c.get(5 if kind == "max" else 4, "ceil_mode", False))
        out_sp = tuple(_pool_out(*a, ceil_mode) for a in zip(x.shape[-nd:], k, s, p, d))
        out = prod(x.shape[:-nd]) * prod(out_sp)
        flops = out * prod(k) + (out if kind == "avg" else 0)
        return pool_cost(x, kind, out, flops, fmt_params(x.dtype, shape=dims(x.shape), k=k, s=s, p=p))
    return formula


def pool_cost(x: Tensor, kind: str, out: int, flops: int | None, params: str) -> Cost:
    """Forward and backward of a pooling op with `out` outputs (module docstring): the backward
    moves the forward's bytes (dY and the indices read, dX written); max: one add per dY element."""
    nbytes = _io(x, out)
    if kind == "max" and nbytes is not None:
        nbytes += 8 * out
    return Cost(flops, nbytes, params, x.dtype, SIMT, bwd_flops=out if kind == "max" else flops, bwd_bytes=nbytes)


def _windows(i: int, o: int) -> int:
    """Total window length of adaptive pooling along one dim: windows [floor(j*i/o), ceil((j+1)*i/o))."""
    return sum(ceil((j + 1) * i / o) - floor(j * i / o) for j in range(o))


def adaptive_cost(x: Tensor, out_sp: tuple, kind: str) -> Cost:
    """Adaptive max/avg pooling of `x`'s last len(out_sp) dims to `out_sp` (None: kept)."""
    nd = len(out_sp)
    out_sp = tuple(i if o is None else o for i, o in zip(x.shape[-nd:], out_sp))
    lead = prod(x.shape[:-nd])
    out = lead * prod(out_sp)
    taps = lead * prod(_windows(i, o) for i, o in zip(x.shape[-nd:], out_sp))
    cost = pool_cost(x, kind, out, taps + (out if kind == "avg" else 0),
                      fmt_params(x.dtype, shape=dims(x.shape), out=out_sp))
    if kind == "avg" and out == lead:
        # A global average: PyTorch takes the mean, whose backward is dY expanded and divided by
        # the window (one multiply per dX element, dY read, dX written); on a channels_last input
        # the mean's output is restrided in place (as_strided_), whose backward zero-fills a
        # buffer of the output's elements first (its own kernel).
        return replace(cost, bwd_flops=x.numel, grad_fill=out)
    return cost


def _adaptive(nd: int, kind: str):
    def formula(c: Call) -> Cost:
        return adaptive_cost(c.get(0, "input"), ntuple(c.get(1, "output_size"), nd), kind)
    return formula


for _nd in (1, 2, 3):
    for _kind in ("max", "avg"):
        register(f"torch.nn.functional.{_kind}_pool{_nd}d", f"torch.{_kind}_pool{_nd}d")(_pool(_nd, _kind))
        register(f"torch.nn.functional.adaptive_{_kind}_pool{_nd}d",
                 f"torch.adaptive_{_kind}_pool{_nd}d")(_adaptive(_nd, _kind))

_TAPS = {"nearest": 0, "nearest-exact": 0, "linear": 2, "bilinear": 4, "bicubic": 16, "trilinear": 8}


@register("torch.nn.functional.interpolate", "torch.nn.functional.upsample")
def interpolate(c: Call) -> Cost | None:
    """2 FLOPs (multiply-add) per interpolation tap per output element; nearest copies (0).
    `area` mode is adaptive average pooling (its formula); antialiasing widens the taps by a
    scale-dependent amount: na. Backward: the same taps (dY times each weight added into dX;
    nearest: one add per dY element), dY read and dX written, after dX's zero fill (a part); as
    named stages: dY made contiguous where it is strided (a copy: read and written), then the
    upsample backward kernel carrying the node."""
    x = c.get(0, "input")
    mode = c.get(3, "mode", "nearest")
    if mode not in _TAPS and mode != "area" or c.get(None, "antialias", False):
        return None
    nd = len(x.shape) - 2
    size, scale = c.get(1, "size"), c.get(2, "scale_factor")
    if size is not None:
        out_sp = ntuple(size, nd)
    else:
        out_sp = tuple(floor(i * f) for i, f in zip(x.shape[2:], ntuple(scale, nd)))
    return interpolate_cost(x, out_sp, mode)


def interpolate_cost(x: Tensor, out_sp: tuple, mode: str) -> Cost:
    """`x` (N, C, *spatial) interpolated to spatial size `out_sp` in `mode` (_TAPS, or area).
    Its kernels named (Cost.stages): where PyTorch zeroes the output first (linear 1-D on an
    H200: a FillFunctor of the output's elements before upsample_linear1d_out_frame), that fill
    (the output written), then the interpolation; backward dY made contiguous, then its kernel."""
    out = x.shape[0] * x.shape[1] * prod(out_sp)
    params = fmt_params(x.dtype, shape=dims(x.shape), out=out_sp, mode=mode)
    if mode == "area":
        return replace(adaptive_cost(x, out_sp, "avg"), params=params)
    flops, nbytes = 2 * _TAPS[mode] * out, _io(x, out)
    stages = None if nbytes is None else (("direct_copy_kernel_cuda", 0, 2 * out * x.itemsize),
                                          ("upsample", flops or out, nbytes))
    forward = None if nbytes is None else (("FillFunctor", 0, out * x.itemsize), ("upsample", flops, nbytes))
    return Cost(flops, nbytes, params, x.dtype, SIMT, bwd_flops=flops or out, bwd_bytes=nbytes, stages=forward,
                bwd_stages=stages)


@register("torch.nn.functional.embedding", "torch.embedding")
def embedding(c: Call) -> Cost | None:
    """A gather: the indices and the selected rows are read, the rows written. No FLOPs.
    Backward (dense): dWeight zero-filled (a kernel of its own: `grad_fill`), then one add per
    dOut element scattered into it: the indices and dOut read, the rows added into read and
    written (as aten::embedding_dense_backward counts); of more than 3,072 indices, the kernels
    PyTorch sorts them with (embedding_backward_stages)."""
    idx, w = c.get(0, "input"), c.get(1, "weight")
    if c.get(3, "max_norm") is not None:  # renormalises the rows in place first: not modelled
        return None
    out = idx.numel * w.shape[-1]
    if idx.nbytes is None or w.nbytes is None:
        return None
    sorted_ = None if c.get(5, "scale_grad_by_freq", False) or c.get(6, "sparse", False) \
        else embedding_backward_stages(idx, Tensor((idx.numel, w.shape[-1]), w.dtype), w.shape[0],
                                       c.strides(0, "input") is not None)
    return Cost(0, idx.nbytes + 2 * out * w.itemsize, fmt_params(w.dtype, idx=dims(idx.shape), weight=dims(w.shape)),
                w.dtype, SIMT, bwd_flops=out, bwd_bytes=idx.nbytes + 3 * out * w.itemsize, grad_fill=w.numel,
                bwd_stages=sorted_)


@register("torch.nn.functional.embedding_bag")
def embedding_bag(c: Call) -> Cost | None:
    """Rows gathered and reduced per bag: one add per gathered element (mean: plus one divide per
    output element; max: one comparison per gathered element). Backward (dense): each bag's
    gradient added into the rows it gathered, one add per gathered element (and one scale each
    for mean or per-sample weights; max: into the winning rows, one per output element); the
    indices, offsets, weights and dOut read, the rows added into read and written, after dWeight's
    zero fill (a kernel of its own: `grad_fill`). Sum and mean run as named stages
    (_bag_backward_stages)."""
    idx, w, offsets = c.get(0, "input"), c.get(1, "weight"), c.tensor(2, "offsets")
    mode = c.get(6, "mode", "mean")
    last = offsets is not None and c.get(9, "include_last_offset", False)
    bags = idx.shape[0] if len(idx.shape) == 2 else (offsets.numel - last if offsets else None)
    dense = mode != "max" and not c.get(5, "scale_grad_by_freq", False) and not c.get(7, "sparse", False)
    return embedding_bag_cost(idx, w, offsets, c.tensor(8, "per_sample_weights"), bags, mode, dense)


def embedding_bag_cost(idx: Tensor, w: Tensor, offsets: Tensor | None, psw: Tensor | None, bags: int | None,
                       mode: str | None, dense: bool = False) -> Cost | None:
    """embedding_bag's formula: `bags` bags of rows of `w` gathered by `idx`; `mode` None where
    it is not known to be max (the aten level: a scalar): the adds alone, a mean's divides not
    counted; `dense`: the backward's named stages."""
    dim = w.shape[-1]
    if bags is None or w.itemsize is None or idx.nbytes is None:
        return None
    gathered = idx.numel * dim
    out = bags * dim
    flops = gathered + (out if mode == "mean" else 0) + (gathered if psw else 0)
    meta = idx.nbytes + (offsets.nbytes if offsets else 0) + (psw.nbytes if psw else 0)
    nbytes = meta + gathered * w.itemsize + out * w.itemsize
    scaled = mode == "mean" or psw is not None
    bwd_flops = out if mode == "max" else gathered * (2 if scaled else 1)
    return Cost(flops, nbytes, fmt_params(w.dtype, idx=dims(idx.shape), weight=dims(w.shape), mode=mode), w.dtype, SIMT,
                bwd_flops=bwd_flops,
                bwd_bytes=meta + out * w.itemsize + 2 * (out if mode == "max" else gathered) * w.itemsize,
                grad_fill=w.numel,
                bwd_stages=_bag_backward_stages(idx, w, bags, bwd_flops, mode, psw) if dense else None)


def _bag_backward_stages(idx: Tensor, w: Tensor, bags: int, flops: int, mode: str | None,
                         psw: Tensor | None) -> tuple:
    """embedding_bag's dense sum/mean backward (sorted_backward_stages): dOut's rows are the
    bags'; compute_grad_weight_bags reads dOut once, the bag and position of every index (mean: its
    bag's size too) and the per-sample weights."""
    n, d, size, i = idx.numel, w.shape[-1], w.itemsize, idx.itemsize
    ints = (3 + (mode == "mean")) * n * i
    return sorted_backward_stages(n, d, w.shape[0] or None, size, i, acc_size(w.dtype), bags,
                                  ("compute_grad_weight_bags", flops, bags * d * size + (psw.nbytes if psw else 0), ints))


# PyTorch's embedding backward sums at most this many dOut rows into one partial segment
# (EmbeddingBackwardKernel.cu NROWS_PER_THREAD); and sorts the indices above this many
# (embedding_dense_backward_cuda; fewer go to one scatter-add kernel).
_NROWS_PER_THREAD = 10
_SORTED_ABOVE = 3072


def sorted_backward_stages(n: int, d: int, rows: int | None, size: int, i: int, acc: int, dout_rows: int,
                           summing: tuple) -> tuple:
    """The kernels of PyTorch's sorted embedding backward (embedding_backward_cuda_kernel, which
    embedding's dense backward of many indices and embedding_bag's sum/mean backward run), each
    named, over n indices of i bytes into a `rows` x d table (None: unknown): dOut made contiguous
    where it is strided (a copy of its `dout_rows` rows), the indices' positions (arange: n
    written), the indices sorted with them (cub_sort.radix_sort_pairs, on every bit of the index
    type: PyTorch passes no bit count), the sorted indices' segments (cub's unique-by-key: n read,
    starts and keys written), each segment's partials and their offsets (a count per segment,
    cub's scan, one thread's total, the offsets), then `summing` (kernel name, FLOPs, dOut bytes
    read, index bytes read) sums each partial segment's dOut rows into partials of `acc` bytes an
    element and sum_and_scatter adds the partials into dWeight's rows. Segments and partials
    depend on the data: counted at their most, a segment a distinct index (no more than the
    table's rows) and a partial a segment's run of up to 10 rows (no more than n)."""
    segments = min(n, rows) if rows else n
    partials = min(n, n // _NROWS_PER_THREAD + segments) * d * acc
    name, flops, rows_read, ints_read = summing
    return (("direct_copy_kernel_cuda", 0, 2 * dout_rows * d * size), ("arange_cuda_out", 0, 0, n * i)) \
        + radix_sort_pairs(n, i, i, 8 * i) \
        + (("DeviceUniqueByKeySweepKernel", 0, 0, 3 * n * i),
           ("krn_partials_per_segment", 0, 0, 2 * n * i), ("DeviceScanKernel", 0, 0, 2 * n * i),
           ("compute_num_of_partial_segments", 0, 0, 3 * i), ("krn_partial_segment_offset", 0, 0, 4 * n * i),
           (name, flops, rows_read, partials + ints_read),
           ("sum_and_scatter", 0, segments * d * size, partials + 2 * n * i))


def embedding_backward_stages(idx: Tensor, dout: Tensor, rows: int | None, strided: bool = False) -> tuple | None:
    """embedding's dense backward kernel by kernel: where PyTorch sorts (more than 3,072
    indices) sorted_backward_stages, compute_grad_weight reading each index's dOut row, its
    position and its partial's offset; for fewer, after the zero fill (a part), the indices
    made contiguous where they are `strided` (a slice of a token batch), then
    embedding_backward_feature_kernel adding each index's dOut row into its row (the indices and
    dOut read, the rows read and written)."""
    n, d, i = idx.numel, dout.shape[-1], idx.itemsize
    if dout.itemsize is None or i is None:
        return None
    if n <= _SORTED_ABOVE:
        copy = (("direct_copy_kernel", 0, 0, 2 * n * i),) if strided else ()
        return copy + (("embedding_backward_feature_kernel", n * d, 3 * n * d * dout.itemsize, n * i),)
    return sorted_backward_stages(n, d, rows, dout.itemsize, i, acc_size(dout.dtype), n,
                                  ("compute_grad_weight", n * d, n * d * dout.itemsize, 2 * n * i))


@register("torch.nn.functional.instance_norm")
def instance_norm(c: Call) -> Cost:
    """F.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, ...):
    statistics per sample and channel, as layer_norm's; running statistics (when given and
    updated) read and written. Without running statistics, as the kernels PyTorch runs it as
    (_instance_norm_stages)."""
    rm, rv = c.tensor(1, "running_mean"), c.tensor(2, "running_var")
    use_stats = c.get(5, "use_input_stats", True)
    stats = tuple(s for s in (rm, rv) if s is not None) * 2 if use_stats else ()
    x, w, b = c.get(0, "input"), c.tensor(3, "weight"), c.tensor(4, "bias")
    cost = norm_cost(x, 6, w, b, stats)
    return _instance_norm_stages(cost, x, w, b) if use_stats and rm is None and rv is None else cost


def _instance_norm_stages(cost: Cost, x: Tensor, w: Tensor | None, b: Tensor | None) -> Cost:
    """instance_norm as PyTorch runs it, batch norm over the N·C planes of one sample, its kernels
    named (Cost.stages), statistics in fp32: the weight and bias repeated N times (a copy each:
    C read, N·C written), the planes' statistics (X read, mean and variance written: 4 FLOPs an
    element less one a plane), their inverse standard deviations (1 a plane), then the normalized
    output (2 an element, +1 each for the weight and bias; X, the statistics and the repeated
    parameters read, the output written). Backward: batch_norm_backward_kernel (dX and each
    plane's dWeight and dBias: the node's FLOPs less the sums after it; dY, X, the statistics and
    the repeated weight read, dX and the planes' gradients written), then the repeats' gradients
    summed over the N samples (a reduction each: N·C read, C written). Where cuDNN runs the batch
    norm (a contiguous fp32 3-D U-Net's, H200: bn_fw_tr_1C11_kernel_NCHW, bn_bw_1C11_kernel_new),
    its one kernel each way does the batch norm's work: forward X read once (Nsight Compute: 1.00
    of its bytes), the statistics written, the repeated parameters read, Y written."""
    size = x.itemsize
    if size is None or len(x.shape) < 3 or cost.bwd_flops is None:
        return cost
    e, planes, c = x.numel, x.shape[0] * x.shape[1], x.shape[1]
    affine = [p for p in (w, b) if p is not None]
    psize = [ITEMSIZE.get(p.dtype) or 4 for p in affine]
    repeats = tuple(("direct_copy_kernel_cuda", 0, 0, (c + planes) * ps) for ps in psize)
    repeated = sum(planes * ps for ps in psize)
    fwd = repeats + batch_norm_stages(e, planes, size, len(affine), repeated) \
        + cudnn_stages(False, cost.flops, 2 * e * size, 2 * planes * 4 + repeated)
    sums = tuple(("reduce_kernel", reduce_adds(planes, c), 0, (planes + c) * ps) for ps in psize)
    fused = (cost.bwd_flops - sum(s[1] for s in sums), 3 * e * size, (3 + len(affine)) * planes * 4)
    bwd = (("batch_norm_backward_kernel", *fused),) + cudnn_stages(True, *fused) + sums
    return replace(cost, stages=fwd, bwd_stages=bwd)


@register("torch.instance_norm")
def torch_instance_norm(c: Call) -> Cost:
    """torch.instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, ...)."""
    rm, rv = c.tensor(3, "running_mean"), c.tensor(4, "running_var")
    stats = tuple(s for s in (rm, rv) if s is not None) * 2 if c.get(5, "use_input_stats", True) else ()
    return norm_cost(c.get(0, "input"), 6, c.tensor(1, "weight"), c.tensor(2, "bias"), stats)


@register("torch.nn.functional.glu", "torch.glu")
def glu(c: Call) -> Cost | None:
    """a·sigmoid(b) over the two halves along `dim`: 2 per output element; the input read, the
    half-size output written. Backward: dA = dY·sigmoid(b) (1), dB = dA·a·(1 - sigmoid(b)) (4);
    the input and dY read, dInput written."""
    x = c.get(0, "input")
    out = x.numel // 2
    size = x.itemsize
    if size is None:
        return None
    return Cost(2 * out, x.nbytes + out * size, fmt_params(x.dtype, shape=dims(x.shape), dim=c.get(1, "dim", -1)),
                x.dtype, SIMT, bwd_flops=5 * out, bwd_bytes=2 * x.nbytes + out * size)


@register("torch.nn.functional.softmin")
def softmin(c: Call) -> Cost:
    """softmax(-x): softmax's 5 per element and the negation; backward softmax's 4."""
    cost = softmax(c)
    return replace(cost, flops=cost.flops + c.get(0, "input").numel)


@register("torch.nn.functional.prelu", "torch.prelu")
def prelu(c: Call) -> Cost | None:
    """max(0, x) + w·min(0, x), w per channel: 2 per element (compare, product); x and w read,
    the output written. Backward: dX = dY·(x > 0 ? 1 : w) (2) and dW = the sum of dY·x where x < 0
    (2), per element; x, w and dY read, dX and dW written."""
    x, w = c.get(0, "input"), c.get(1, "weight")
    if x.nbytes is None or w.nbytes is None:
        return None
    n = x.numel
    return Cost(2 * n, 2 * x.nbytes + w.nbytes, fmt_params(x.dtype, shape=dims(x.shape)), x.dtype, SIMT,
                bwd_flops=4 * n, bwd_bytes=3 * x.nbytes + 2 * w.nbytes)
