"""Backward calls (Tensor.backward, torch.autograd.backward and torch.autograd.grad) and the
storing of a leaf's gradient (AccumulateGrad).

The gradient kernels a backward call causes belong to the forward ops whose autograd nodes
launch them (analysis.py prices them from the forward op's marker). The call itself launches
one thing on the caller's thread: the seed gradient, `ones_like(output)` for every output whose
gradient is not given (a scalar loss: one element filled). That fill is this family's cost.

A compiled program's leaves have markers of their own (pyprof.nvtx.leaf_grads): a bwd range of
node AccumulateGrad around the storing of each leaf's gradient.
"""
from __future__ import annotations

from typing import Any, Optional

from ..registry import SIMT, Call, Cost, dims, fmt_params, register
from ..values import ITEMSIZE, Tensor

# What PyTorch's copy between tensors of one dtype runs (a clone into the leaf's layout).
_LAYOUT_COPY = "direct_copy_kernel_cuda"


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


@register("torch._C._functions.AccumulateGrad")
def accumulate_grad(c: Call) -> Optional[Cost]:
    """A leaf's gradient stored by the autograd engine; the leaf is the one argument. It never
    runs forward (FLOPs and bytes na), and its backward runs one kernel or none: none where the
    engine keeps the gradient as it came; a copy into the leaf's layout (a stage, the gradient
    read and written in the leaf's dtype); an add to the gradient an earlier pass left (every
    backward's accumulation part, parts.py: both read, the sum written, a FLOP an element)."""
    t = c.tensor(0, "variable")
    size = None if t is None else ITEMSIZE.get(t.dtype)
    if size is None:
        return None
    return Cost(None, None, fmt_params(t.dtype, shape=dims(t.shape)), t.dtype, SIMT,
                bwd_stages=((_LAYOUT_COPY, 0, 2 * t.numel * size),))
