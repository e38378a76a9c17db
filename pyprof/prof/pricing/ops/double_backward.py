"""The backward of a backward op: the nodes a backward run with create_graph=True made (a
gradient penalty's ConvolutionBackwardBackward0), priced from the op that made them.

With pyprof's markers such a node names no marker (its op ran inside the first backward, where
no torch function is called), and its own range carries no shapes; pyprof.profiled() turns
PyTorch's op ranges with shapes on for a backward run with create_graph=True
(pyprof/nvtx/node_ranges.py graphing), so the op that made the node is a range of the node's
seq (op_ranges.price asks tensor_flow.forward_op). Each entry prices the node's kernels from
that op's range: the same shapes, as derivatives.yaml runs them.
"""
from __future__ import annotations

from typing import Any, Callable

from ..registry import SIMT, Cost, dims, fmt_params
from ..values import ITEMSIZE
from .conv import convolution_backward

# The making op's range name -> the formula of its node's kernels, over that range.
DOUBLE: dict[str, Callable[[Any], Cost | None]] = {}


def made_by(*names: str) -> Callable:
    """Register the formula of the double-backward node that ops `names` make."""
    def register(fn: Callable) -> Callable:
        for name in names:
            DOUBLE[name] = fn
        return fn
    return register


# _convolution_double_backward: each convolution it runs (ggI with the weight, ggI with dY for the
# weight's gradient, ...) is one forward on the three shapes of convolution_backward's range, as
# each gradient of convolution_backward is: that formula, its matrix kernels one each.
made_by("aten::convolution_backward")(convolution_backward)


@made_by("aten::leaky_relu_backward")
def leaky_relu_backward_backward(a: Any) -> Cost | None:
    """(grad_output, self, negative_slope, self_is_result): dY's gradient is leaky_relu_backward
    of the incoming gradient (it and self read, one written, 1 FLOP an element), self's a zero
    fill (zeros_like: written), two kernels (a WGAN-GP critic's, H200)."""
    dy = a.tensor(0)
    size = ITEMSIZE.get(a.dtype)
    if dy is None or size is None:
        return None
    n = dy.numel
    stages = (("leaky_relu_backward_kernel", n, 3 * n * size), ("FillFunctor", 0, n * size))
    return Cost(n, 4 * n * size, fmt_params(a.dtype, shape=dims(dy.shape)), a.dtype, SIMT, stages=stages)
