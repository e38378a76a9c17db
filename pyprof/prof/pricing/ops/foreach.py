"""Foreach ops (`torch._foreach_<op>`, `aten._foreach_<op>`): `<op>`'s formula at every index of
their tensor lists, one definition for the marker and the compiled levels (the aten level's
ranges carry no arguments but sizes: aten.py prices them from the kernel's name).

A foreach op's multi-tensor launches each carry their own elements' share (multitensor.py, from
the marker's list of the tensors' sizes). `_foreach_norm` (gradient clipping's
`clip_grad_norm_`) runs two kernels besides its launches: the zero fill of the partial norms
(one float per tensor and chunk of the longest tensor) and `lpnorm_cleanup`, which sums each
tensor's partials and takes the root (_norm_stages).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..multitensor import CHUNK
from ..registry import Call, Cost, Formula, call, fmt_params, lookup, register
from ..values import ITEMSIZE, Tensor, reduce_adds

PREFIX = "_foreach_"


def _lists(args: list) -> list:
    """The arguments that are lists walked index by index: tensor lists, and a scalar list of
    their length (one scalar per tensor)."""
    tensors = [a for a in args if isinstance(a, list) and a and all(isinstance(t, Tensor) for t in a)]
    if not tensors:
        return []
    n = len(tensors[0])
    return [a for a in args if isinstance(a, list) and len(a) == n and (any(a is t for t in tensors) or all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in a))]


def foreach(inner: Formula) -> Formula:
    """The formula of `_foreach_<op>` from `<op>`'s: the op applied at every index of its lists
    (_lists; other arguments the same at every index), the costs summed."""
    def formula(c: Call) -> Cost | None:
        lists = _lists(c.args)
        if not lists or any(len(a) != len(lists[0]) for a in lists):
            return None
        flops = nbytes = 0
        dtype = None
        for i in range(len(lists[0])):
            cost = inner(call(*(a[i] if any(a is x for x in lists) else a for a in c.args), **c.kwargs))
            if cost is None or cost.flops is None:
                return None
            flops += cost.flops
            nbytes = None if nbytes is None or cost.bytes is None else nbytes + cost.bytes
            dtype = dtype or cost.dtype
        return Cost(flops, nbytes, fmt_params(dtype, tensors=len(lists[0])), dtype)
    return formula


def _norm_stages(tensors: list, size: int) -> tuple:
    """The named stages of `_foreach_norm` besides its launches: the partials zeroed (tensors x
    chunks of the longest tensor, in the op math type: float32, float64 for doubles; written),
    lpnorm_cleanup (the partials read and summed per tensor, a root each, the norms written in
    the tensors' dtype)."""
    partial = 8 if size == 8 else 4
    partials = len(tensors) * max(-(-t.numel // CHUNK) for t in tensors)
    count = len(tensors)
    return (("FillFunctor", 0, partials * partial),
            ("lpnorm_cleanup", reduce_adds(partials, count) + count, partials * partial + count * size))


def _norm(c: Call) -> Cost | None:
    """`_foreach_norm(tensors, ord=2)`: torch.norm's formula at every index, then _norm_stages."""
    inner = lookup("torch", "norm")
    cost = None if inner is None else foreach(inner)(c)
    tensors = _tensor_list(c.args)
    size = ITEMSIZE.get(cost.dtype) if cost is not None else None
    if cost is None or size is None or not tensors or any(t.numel == 0 for t in tensors):
        return cost
    stages = _norm_stages(tensors, size)
    return replace(cost, flops=cost.flops + stages[1][1], stages=stages)


def _register_marker_level() -> None:
    """`torch._foreach_<op>` and `torch._foreach_<op>_` for every `torch.<op>` with a formula."""
    from .elementwise import BINARY, UNARY  # the ops whose foreach forms PyTorch has
    for op in sorted(set(UNARY) | set(BINARY) | {"addcmul", "addcdiv", "lerp", "clamp_min", "clamp_max"}):
        inner = lookup("torch", op)
        if inner is not None:
            register(f"torch.{PREFIX}{op}", f"torch.{PREFIX}{op}_")(foreach(inner))
    register(f"torch.{PREFIX}norm")(_norm)


def _tensor_list(args: list) -> list:
    return next((a for a in _lists(args) if isinstance(a[0], Tensor)), [])


def first_list(marker: dict) -> list:
    """The first tensor list of a foreach op's marker, decoded; [] where it has none."""
    return _tensor_list(Call(marker).args)


def is_foreach(marker: Any) -> bool:
    """True for a `torch._foreach_<op>` marker."""
    return isinstance(marker, dict) and marker.get("mod") == "torch" and str(marker.get("op")).startswith(PREFIX)


_register_marker_level()
