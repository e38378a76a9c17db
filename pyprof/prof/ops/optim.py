"""Optimizer steps (SGD, Adam, AdamW; for-loop, foreach and fused kernels alike).

The marker carries `kwargs.params = {"count", "numel", "dtype"}` over all parameter groups
(docs/markers.md). Per parameter element, FLOPs and state tensors touched:
- SGD: 2 (p -= lr*g); momentum: +2 and one momentum buffer; weight_decay: +2.
- Adam: 12 (two moment updates 3+4, sqrt, eps, divide, update 2); weight_decay: +2 (L2 into g);
  amsgrad: +1 and one more state tensor. AdamW: decoupled decay, +1 when weight_decay is set.
Bytes: parameter and gradient read, parameter written, every state tensor read and written.
The hyperparameters that change the work (momentum, weight_decay, amsgrad) are read from the
marker's kwargs; when a marker lacks one, the cost is na rather than a default guessed, and the
summary says which were missing.
"""
from __future__ import annotations


from ..registry import SIMT, Call, Cost, Unknowable, fmt_params, register
from ..values import ITEMSIZE

_MISSING = object()


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
    if any(v is _MISSING for v in values):
        raise Unknowable(f"optimizer {'/'.join(names)} not in the marker")
    if any(isinstance(v, list) for v in values):
        raise Unknowable(f"optimizer {'/'.join(names)} differ between parameter groups")
    return values


@register("torch.optim.SGD.step")
def sgd(c: Call) -> Cost | None:
    momentum, wd = _knobs(c, "momentum", "weight_decay")
    numel, count, dtype = _params(c)
    flops = 2 + (2 if momentum else 0) + (2 if wd else 0)
    return _step_cost(c, flops, 1 if momentum else 0, dtype, numel, count, "aten::_fused_sgd_")


def _adam(decoupled: bool):
    def formula(c: Call) -> Cost | None:
        amsgrad, wd = _knobs(c, "amsgrad", "weight_decay")
        numel, count, dtype = _params(c)
        flops = 12 + (1 if amsgrad else 0) + ((1 if decoupled else 2) if wd else 0)
        return _step_cost(c, flops, 3 if amsgrad else 2, dtype, numel, count,
                          "aten::_fused_adamw_" if decoupled else "aten::_fused_adam_")
    return formula


register("torch.optim.Adam.step")(_adam(False))
register("torch.optim.AdamW.step")(_adam(True))
