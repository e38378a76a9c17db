"""Backward calls: Tensor.backward, torch.autograd.backward and torch.autograd.grad.

The gradient kernels a backward call causes belong to the forward ops whose autograd nodes
launch them (analysis.py prices them from the forward op's marker). The call itself launches
one thing on the caller's thread: the seed gradient, `ones_like(output)` for every output whose
gradient is not given (a scalar loss: one element filled). That fill is this family's cost.
"""
from __future__ import annotations

from typing import Any, Optional

from ..registry import SIMT, Call, Cost, dims, fmt_params, register
from ..values import Tensor


def _seeded(outputs: Any, grads: Any) -> Optional[list]:
    """The outputs whose seed gradient the call fills in: those without a given gradient.
    None when the marker cut a list short (the outputs cannot all be known)."""
    outs = outputs if isinstance(outputs, list) else [outputs]
    given = grads if isinstance(grads, list) else [grads] * len(outs)
    if len(given) != len(outs) or not all(isinstance(t, Tensor) for t in outs):
        return None
    return [t for t, g in zip(outs, given) if g is None]


def _seed_cost(seeded: Optional[list]) -> Optional[Cost]:
    """0 FLOPs; each seed written once in its output's dtype."""
    if seeded is None or any(t.nbytes is None for t in seeded):
        return None
    dtypes = {t.dtype for t in seeded}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    shapes = ",".join(dims(t.shape) for t in seeded) or "-"
    return Cost(0, sum(t.nbytes for t in seeded), fmt_params(dtype, shape=shapes), dtype, SIMT)


@register("Tensor.backward")
def tensor_backward(c: Call) -> Optional[Cost]:
    """loss.backward(gradient=None): the seed is ones_like(loss) unless `gradient` is given."""
    return _seed_cost(_seeded(c.get(0, "self"), c.get(1, "gradient")))


@register("torch.autograd.backward")
def autograd_backward(c: Call) -> Optional[Cost]:
    """torch.autograd.backward(tensors, grad_tensors=None)."""
    return _seed_cost(_seeded(c.get(0, "tensors"), c.get(1, "grad_tensors")))


@register("torch.autograd.grad")
def autograd_grad(c: Call) -> Optional[Cost]:
    """torch.autograd.grad(outputs, inputs, grad_outputs=None)."""
    return _seed_cost(_seeded(c.get(0, "outputs"), c.get(2, "grad_outputs")))
