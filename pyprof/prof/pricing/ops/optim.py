"""Optimizer steps (SGD, Adam, AdamW; for-loop, foreach and fused kernels alike), and GradScaler's
unscale and update around them.

The marker carries `kwargs.params = {"count", "numel", "dtype"}` over all parameter groups
(docs/markers.md). Per parameter element, FLOPs and state tensors touched:
- SGD: 2 (p -= lr*g); momentum: +2 (buf = momentum*buf + g) and one momentum buffer, +1 more
  with dampening (g scaled by 1 - dampening); nesterov: +2 (g + momentum*buf); weight_decay: +2.
- Adam: the element-wise ops of PyTorch's multi-tensor step (_ADAM), each priced by the
  element-wise table: 12 (the for-loop step 11: _adam_loop); weight_decay: +2 (L2 into g, an add
  with alpha); amsgrad: +1 (maximum) and one more state tensor. AdamW: decoupled decay, +1 (a
  multiply) when weight_decay is set.
- maximize (both): +1, the gradient negated (its own kernel in the for-loop and foreach steps).
  The same table prices the step's aten kernels and a compiled step's FX nodes, so the three
  levels agree.
Bytes: parameter and gradient read, parameter written, every state tensor read and written.
The hyperparameters that change the work (optimizer_knobs of nvtx/marker.py: momentum, dampening,
nesterov, weight_decay, amsgrad, maximize; one marker version wrote them all) are read from the
marker's kwargs; when a marker lacks one, the cost is na rather than a default guessed, and the
summary says which were missing.
"""
from __future__ import annotations

from dataclasses import replace

from ..registry import SIMT, Call, Cost, Unknowable, fmt_params, register
from ..values import ITEMSIZE
from .elementwise import FLOPS_PER_ELEMENT

_MISSING = object()
# torch/optim/adam.py's _multi_tensor_adam per parameter element, the capturable path (which a
# compiled or CUDA-graph-captured step runs): exp_avg.lerp_(grad), exp_avg_sq.mul_(beta2) and
# .addcmul_(grad, grad), sqrt, the division by sqrt(bias_correction2), + eps, the division by the
# step size, param.addcdiv_(exp_avg, denominator).
_ADAM = ("lerp", "mul", "addcmul", "sqrt", "div", "add", "div", "addcdiv")


def per_element(ops: tuple) -> int:
    """FLOPs per element of a sequence of element-wise ops (the element-wise table's counts)."""
    return sum(FLOPS_PER_ELEMENT.get(op, 1) for op in ops)


def _step_cost(c: Call, flops: int, states: int, dtype: str | None, numel: int, count: int,
               fused_op: str) -> Cost | None:
    size = ITEMSIZE.get(dtype) if isinstance(dtype, str) else None  # a list: mixed dtypes
    if size is None:
        return None
    nbytes = numel * size * (3 + 2 * states)
    impl = _impl(c)
    # A fused step first bumps its step counters (a _foreach_add_ kernel); the math is the one
    # kernel under the fused op's range.
    return Cost(flops * numel, nbytes, fmt_params(dtype, count=count, numel=numel, impl=impl), dtype, SIMT,
                main_op=(fused_op,) if impl == "fused" else None, composite=impl != "fused")


def _impl(c: Call) -> str:
    if c.get(None, "fused"):
        return "fused"
    return "foreach" if c.get(None, "foreach") else "loop"


def _params(c: Call) -> tuple:
    p = c.get(None, "params")
    return p["numel"], p["count"], p["dtype"]


def _knobs(c: Call, *names: str) -> tuple:
    """The hyperparameters `names`; Unknowable when one is missing, or differs between parameter
    groups (the marker then holds a list, and the elements per group are not known)."""
    values = tuple(c.get(None, n, _MISSING) for n in names)
    missing = [n for n, v in zip(names, values) if v is _MISSING]
    if missing:
        raise Unknowable(f"optimizer {'/'.join(missing)} not in the marker")
    varied = [n for n, v in zip(names, values) if isinstance(v, list)]
    if varied:
        raise Unknowable(f"optimizer {'/'.join(varied)} {'differs' if len(varied) == 1 else 'differ'} "
                         "between parameter groups")
    return values


@register("torch.optim.SGD.step")
def sgd(c: Call) -> Cost | None:
    momentum, dampening, nesterov, wd, maximize = _knobs(c, "momentum", "dampening", "nesterov", "weight_decay",
                                                         "maximize")
    numel, count, dtype = _params(c)
    buffer = (2 + (1 if dampening else 0) + (2 if nesterov else 0)) if momentum else 0
    flops = 2 + buffer + (2 if wd else 0) + (1 if maximize else 0)
    cost = _step_cost(c, flops, 1 if momentum else 0, dtype, numel, count, "aten::_fused_sgd_")
    passes = _loop_passes(c, _sgd_loop(momentum, dampening, nesterov, wd, maximize), dtype)
    return cost if cost is None or passes is None else replace(cost, stages=passes, stages_in_order=True)


# The kernels of a for-loop step, by a piece of their names.
_NEG, _ADD, _MUL, _CLONE = "neg_kernel_cuda", "CUDAFunctor_add", "MulFunctor", "direct_copy_kernel_cuda"


def _sgd_loop(momentum: object, dampening: object, nesterov: object, wd: object, maximize: object) -> tuple:
    """torch/optim/sgd.py's _single_tensor_sgd per parameter: -grad (maximize);
    grad.add(param, alpha=weight_decay); then buf.mul_(momentum).add_(grad, alpha=1 - dampening),
    or on the step that creates the buffer grad.clone() instead (both listed:
    Cost.stages_in_order drops the path not taken); grad.add(buf, alpha=momentum) (nesterov);
    param.add_(grad, alpha=-lr). Each (name piece, FLOPs an element, tensors read and written):
    the element-wise table's FLOPs, an add with alpha != 1 a multiply-add."""
    out: list = [(_NEG, 1, 2)] if maximize else []
    if wd:
        out.append((_ADD, 2, 3))
    if momentum:
        out += [(_MUL, 1, 2), (_ADD, 2 if dampening else 1, 3), (_CLONE, 0, 2)]
        if nesterov:
            out.append((_ADD, 2, 3))
    return tuple(out) + ((_ADD, 2, 3),)


def _adam_loop(amsgrad: bool, decoupled: bool, wd: bool, maximize: bool) -> tuple:
    """torch/optim/adam.py's _single_tensor_adam per parameter (not capturable), as _sgd_loop:
    -grad (maximize); param.mul_(1 - lr·wd) (AdamW) or grad.add(param, alpha=wd);
    exp_avg.lerp_(grad); exp_avg_sq.mul_(beta2).addcmul_(grad, grad); torch.maximum into the
    running maximum (amsgrad); the denominator sqrt(exp_avg_sq) / sqrt(bias_correction2) (a
    multiply by the reciprocal, a new tensor) + eps in place; param.addcdiv_(exp_avg, denom,
    value=-step_size). The step size rides in addcdiv's value: one division fewer than the
    multi-tensor table (_ADAM)."""
    decay = ((_MUL, 1, 2) if decoupled else (_ADD, 2, 3),) if wd else ()
    return (((_NEG, 1, 2),) if maximize else ()) + decay + (
        ("lerp", per_element(("lerp",)), 3), (_MUL, 1, 2), ("addcmul", per_element(("addcmul",)), 3)) + (
        (("maximum_kernel", 1, 3),) if amsgrad else ()) + (
        ("sqrt_kernel", 1, 2), (_MUL, 1, 2), ("CUDAFunctorOnSelf_add", 1, 2), ("addcdiv", per_element(("addcdiv",)), 4))


def _loop_passes(c: Call, per_parameter: tuple, dtype: object) -> tuple | None:
    """A for-loop step's kernels, parameter by parameter in the marker's `numels` order, each
    (name piece, FLOPs, bytes) from `per_parameter`'s (piece, FLOPs an element, tensors); None
    where the step is not a for-loop or the parameters' sizes are not in the marker."""
    sizes = c.get(None, "params").get("numels")
    size = ITEMSIZE.get(dtype) if isinstance(dtype, str) else None
    if _impl(c) != "loop" or size is None or not isinstance(sizes, list):
        return None
    return tuple((piece, f * n, t * n * size) for n in sizes for piece, f, t in per_parameter)


def adam_flops(amsgrad: bool, decoupled: bool, weight_decay: bool) -> int:
    """Adam's FLOPs per parameter element (the module docstring)."""
    decay = ("mul",) if decoupled else ("add", "add")  # add(param, alpha=wd): a multiply-add
    return per_element(_ADAM + (("maximum",) if amsgrad else ()) + (decay if weight_decay else ()))


def _adam(decoupled: bool):
    def formula(c: Call) -> Cost | None:
        amsgrad, wd, maximize = _knobs(c, "amsgrad", "weight_decay", "maximize")
        numel, count, dtype = _params(c)
        loop = _adam_loop(bool(amsgrad), decoupled, bool(wd), bool(maximize))
        flops = sum(f for _, f, _ in loop) if _impl(c) == "loop" else \
            adam_flops(bool(amsgrad), decoupled, bool(wd)) + (1 if maximize else 0)
        cost = _step_cost(c, flops, 3 if amsgrad else 2, dtype, numel, count,
                          "aten::_fused_adamw_" if decoupled else "aten::_fused_adam_")
        passes = _loop_passes(c, loop, dtype)
        return cost if cost is None or passes is None else replace(cost, stages=passes, stages_in_order=True)
    return formula


register("torch.optim.Adam.step")(_adam(False))
register("torch.optim.AdamW.step")(_adam(True))


# GradScaler.unscale_ before its multi-tensor launches: inv_scale = scale.double().reciprocal().float()
# (a cast, a reciprocal, a cast of one element) and found_inf = torch.full((), 0.0), each a kernel
# (Cost.stages: FLOPs, bytes); _check_inf_per_device (GradScaler.step's, for an optimizer that
# unscales in its own kernels) fills inv_scale = 1 and found_inf instead.
_UNSCALE_STAGES = ((0, 4 + 8), (1, 8 + 8), (0, 8 + 4), (0, 4))
_CHECK_STAGES = ((0, 4), (0, 4))
# The unscale of every gradient element: a multiply by inv_scale and a finiteness test; with
# inv_scale 1 (the check) the multiply is skipped, the element still written back.
UNSCALE_FLOPS = 2


def _unscale(per: int, stages: tuple):
    def formula(c: Call) -> Cost | None:
        """GradScaler's pass over the optimizer's gradients (`kwargs.params`, as a step's): every
        element read and written once; its launches carry their own lists (multitensor.py), the
        one-element kernels before them the stages."""
        numel, count, dtype = _params(c)
        size = ITEMSIZE.get(dtype) if isinstance(dtype, str) else None
        if size is None:
            return None
        return Cost(per * numel + sum(f for f, _ in stages), 2 * numel * size + sum(b for _, b in stages),
                    fmt_params(dtype, count=count, numel=numel), dtype, SIMT, stages=stages)
    return formula


register("torch.amp.GradScaler.unscale_")(_unscale(UNSCALE_FLOPS, _UNSCALE_STAGES))
register("torch.amp.GradScaler._check_inf_per_device")(_unscale(1, _CHECK_STAGES))


def update_scale_cost() -> Cost:
    """GradScaler's one-thread update of its scale: the scale, growth tracker and found_inf read,
    the first two written (4 bytes each)."""
    return Cost(0, 5 * 4, fmt_params("float32"), "float32", SIMT)


@register("torch.amp.GradScaler.update")
def update(c: Call) -> Cost | None:
    """GradScaler.update(): its one update kernel (a new_scale given is a fill or copy instead)."""
    return update_scale_cost() if c.get(0, "new_scale") is None else None
