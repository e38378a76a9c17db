"""CTC loss (F.ctc_loss, torch.ctc_loss) as PyTorch's CUDA kernels run it (LossCTC.cu), kernel by
kernel (Cost.stages, in launch order), over log-probabilities [T, B, C] and padded targets
[B, S]: L = 2·S + 1 states a sample and time step, its blank between and around its labels.

Forward: ctc_loss_log_alpha_gpu_kernel fills the log-alphas [B, T, L] (written once; up to three
predecessors' log-sum-exp and the state's log-probability added: _STATE_FLOPS an element; the
log-probabilities of a sample's labels and the blank read, S + 1 a sample and step; the targets
and both length lists read; the B losses written). Then the reduction: zero_infinity's where of
the infinite losses (a zero scalar filled, the compare, the select: B each), and for a mean the
target lengths clamped to 1 (int64), the losses divided by them and averaged; for a sum, summed.

Backward: the mean's and the division's gradients (B each), zero_infinity's where (a fill and the
select), the log-betas and the gradient filled with -inf, ctc_loss_backward_log_beta_gpu_kernel
(as the alphas), ctc_loss_backward_collect_gpu_kernel (per state and step the alpha and beta
summed into their label's log-sum-exp, _COLLECT_STATE_FLOPS; per gradient element two exps, the
log-likelihood and log-probability subtracted, dLoss multiplied, _COLLECT_GRAD_FLOPS; the alphas,
betas and log-probabilities read, the gradient written), then ctc_loss_zero_padded_gradients,
which zeroes each sample's steps past its input length: which ones the data say (the lengths'
values are not in the marker), so its bytes are na. Not checked against Nsight Compute.

From PyTorch's ranges alone: aten::_ctc_loss holds the recursion's kernel, aten::_ctc_loss_backward
the backward's three (its fills run under aten::fill_ ranges, the reductions under their ops').
"""
from __future__ import annotations

from typing import Any

from ..registry import SIMT, Call, Cost, dims, fmt_params, register, register_aten
from ..values import ITEMSIZE, Tensor, reduce_adds

# Log-sum-exp of three predecessors: 2 compares for the max, 3 subtractions, 3 exps, 2 adds, a
# log, the max added back, the log-probability added.
_STATE_FLOPS = 13
# Alpha + beta, and its incremental log-sum-exp into its label's sum (compare, subtract, exp,
# log1p, add).
_COLLECT_STATE_FLOPS = 6
# exp(lp) - exp(lcab + nll - lp), times dLoss.
_COLLECT_GRAD_FLOPS = 6
_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction_stages(b: int, f: int, mean: bool, zero_infinity: bool, reduced: bool) -> tuple:
    """(forward, backward) named stages of the loss's reduction over B losses of f bytes."""
    select = (("FillFunctor", 0, f), ("where_kernel", b, 2 * b * f + b + f)) if zero_infinity else ()
    fwd = select[:1] + (("CompareEqFunctor", b, b * f + b),) + select[1:] if zero_infinity else ()
    bwd: tuple = ()
    if mean:
        fwd += (("clamp", b, 0, 2 * b * 8), ("DivFunctor", b, 2 * b * f, b * 8), ("MeanOps", b, b * f + f))
        bwd = (("MulFunctor", b, f + b * f), ("DivFunctor", b, 2 * b * f, b * 8))
    elif reduced:
        fwd += (("sum_functor", reduce_adds(b, 1), b * f + f),)
    return fwd, bwd + select


def ctc_cost(log_probs: Tensor, targets: Tensor, reduction: str, zero_infinity: bool) -> Cost | None:
    """The module docstring's stages for padded targets [B, S] (concatenated 1-D targets: na)."""
    f = ITEMSIZE.get(log_probs.dtype)
    if f is None or len(log_probs.shape) != 3 or len(targets.shape) != 2 or targets.itemsize is None:
        return None
    t, b, c = log_probs.shape
    s = targets.shape[1]
    states = b * t * (2 * s + 1)
    lengths = 2 * b * 8
    recursion = (_STATE_FLOPS * states, b * t * (s + 1) * f + states * f + b * f, targets.nbytes + lengths)
    red_fwd, red_bwd = _reduction_stages(b, f, reduction == "mean", zero_infinity, reduction != "none")
    grads = t * b * c
    collect = (_COLLECT_STATE_FLOPS * states + _COLLECT_GRAD_FLOPS * grads, (2 * states + 2 * grads) * f + 2 * b * f,
               targets.nbytes + lengths)
    # Named by their kernels: the fills, one name, are taken in this order.
    fwd = (("ctc_loss_log_alpha", *recursion),) + red_fwd
    bwd = red_bwd + (("FillFunctor", 0, states * f), ("FillFunctor", 0, grads * f),
                     ("ctc_loss_backward_log_beta", *recursion), ("ctc_loss_backward_collect", *collect),
                     ("ctc_loss_zero_padded", 0, None, b * 8))
    return Cost(sum(x[1] for x in fwd), recursion[1] + recursion[2], fmt_params(log_probs.dtype, shape=dims(log_probs.shape),
                targets=dims(targets.shape), reduction=reduction), log_probs.dtype, SIMT,
                bwd_flops=sum(x[1] for x in bwd), bwd_bytes=collect[1] + collect[2], stages=fwd, bwd_stages=bwd)


@register("torch.ctc_loss", "torch.nn.functional.ctc_loss")
def ctc_loss(c: Call) -> Cost | None:
    """(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity):
    torch.ctc_loss's reduction an int (0 none, 1 mean, 2 sum), F.ctc_loss's a name."""
    log_probs, targets = c.get(0, "log_probs"), c.get(1, "targets")
    reduction = c.get(5, "reduction", "mean")
    reduction = _REDUCTIONS.get(reduction, reduction) if isinstance(reduction, int) else reduction
    if not isinstance(log_probs, Tensor) or not isinstance(targets, Tensor) or reduction not in ("none", "mean", "sum"):
        return None
    return ctc_cost(log_probs, targets, reduction, bool(c.get(6, "zero_infinity", False)))


@register_aten("aten::_ctc_loss")
def ctc_forward_range(a: Any) -> Cost | None:
    """(log_probs, targets, input_lengths, target_lengths, blank, zero_infinity): the recursion."""
    lp, targets = a.tensor(0), a.tensor(1, "int64")
    cost = None if lp is None or targets is None else ctc_cost(lp, targets, "none", False)
    return None if cost is None else Cost(cost.flops, cost.bytes, cost.params, cost.dtype, SIMT)


@register_aten("aten::_ctc_loss_backward")
def ctc_backward_range(a: Any) -> Cost | None:
    """(grad, log_probs, targets, input_lengths, target_lengths, neg_log_likelihood, log_alpha,
    blank, zero_infinity): the log-beta recursion, the collect kernel, the padded steps zeroed."""
    lp, targets = a.tensor(1), a.tensor(2, "int64")
    cost = None if lp is None or targets is None else ctc_cost(lp, targets, "none", False)
    if cost is None:
        return None
    stages = tuple(s for s in cost.bwd_stages if s[0] != "FillFunctor")
    return Cost(sum(s[1] for s in stages), cost.bwd_bytes, cost.params, cost.dtype, SIMT, stages=stages)
