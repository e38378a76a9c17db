"""Ops that count their input's values, whose output size the data decide: one_hot (its classes
from the largest value) and bincount. The marker level prices a call kernel by kernel, its size
from the call's out mark (pyprof's `out`); the aten level the kernel launched in the op's own
range, its size from the output's first reader (parse/consumers.py); the ops' other kernels run
under ranges of their own (aten::max, aten::zeros, aten::scatter_) and are priced there."""
from __future__ import annotations

from typing import Any

from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, register_aten
from ..values import ITEMSIZE, Tensor

_INT64 = ITEMSIZE["int64"]
A = Any  # an AtenCall (op_ranges.py): not imported, as in aten.py


def _extreme(functor: str, x: Tensor) -> tuple:
    """The stage of a full min or max reduction of x (one comparison an element; x read, one
    element written), PyTorch's reduce_kernel named by its functor."""
    return functor, x.numel, 0, (x.numel + 1) * x.itemsize


def one_hot_cost(x: Tensor, classes: int, from_data: bool) -> Cost | None:
    """F.one_hot(x, classes) on CUDA, kernel by kernel: where the classes come from the data
    (num_classes=-1), x's max (then read back to size the output); the [n, classes] int64 output
    zero-filled; a scatter of one 1 a row (x read, n elements written)."""
    size = x.itemsize
    if size is None:
        return None
    n = x.numel
    stages = ((_extreme("MaxNanFunctor", x),) if from_data else ()) + (
        ("FillFunctor", 0, 0, n * classes * _INT64), ("_scatter_gather_elementwise_kernel", 0, 0, n * (size + _INT64)))
    return Cost(sum(s[1] for s in stages), sum(s[3] for s in stages),
                fmt_params("int64", shape=dims(x.shape), classes=classes), "int64", SIMT, stages=stages)


@register("torch.nn.functional.one_hot")
def one_hot(c: Call) -> Cost | None:
    """one_hot_cost; its classes from num_classes, else (-1) from the out mark's last dim."""
    x, classes = c.get(0, "input", c.get(None, "tensor")), c.get(1, "num_classes", -1)
    found = c.outputs()
    if not isinstance(x, Tensor) or type(classes) is not int:
        return None
    if classes < 0:
        if not found or not found[0].shape:
            return None
        return one_hot_cost(x, found[0].shape[-1], True)
    return one_hot_cost(x, classes, False)


def histogram_cost(x: Tensor, bins: int, weights: Tensor | None, out_dtype: str | None) -> Cost | None:
    """PyTorch's histogram kernel of bincount (kernelHistogram1D): one add an element into its
    bin (each block counts in shared memory, then adds its bins into the output); x and the
    weights read, the `bins` counts written once."""
    out, size = ITEMSIZE.get(out_dtype), x.itemsize
    read = 0 if weights is None else weights.nbytes
    if out is None or size is None or read is None:
        return None
    return Cost(x.numel, x.numel * size + read + bins * out, fmt_params(out_dtype, shape=dims(x.shape), bins=bins),
                out_dtype, SIMT)


def bincount_cost(x: Tensor, bins: int, weights: Tensor | None, out_dtype: str | None) -> Cost | None:
    """torch.bincount on CUDA, kernel by kernel: x's min and max (read back: the bins and the
    histogram's range), the `bins` counts zero-filled, then histogram_cost."""
    hist = histogram_cost(x, bins, weights, out_dtype)
    if hist is None:
        return None
    stages = (_extreme("MinNanFunctor", x), _extreme("MaxNanFunctor", x),
              ("FillFunctor", 0, 0, bins * ITEMSIZE[out_dtype]), ("kernelHistogram1D", hist.flops, 0, hist.bytes))
    return Cost(sum(s[1] for s in stages), sum(s[3] for s in stages), hist.params, out_dtype, SIMT, stages=stages)


@register(*names(["bincount"]))
def bincount(c: Call) -> Cost | None:
    """bincount_cost, the bins and their dtype from the call's out mark."""
    x, weights, found = c.get(0, "input"), c.get(1, "weights"), c.outputs()
    if not isinstance(x, Tensor) or not x.numel or not found or len(found[0].shape) != 1:
        return None
    return bincount_cost(x, found[0].shape[0], weights if isinstance(weights, Tensor) else None, found[0].dtype)


@register_aten("aten::bincount")
def aten_bincount(a: A) -> Cost | None:
    """(self, weights, minlength): the histogram kernel launched in the op's own range
    (histogram_cost; the rest run under ranges of their own), the bins from the output's first
    reader, the counts' dtype the kernel's first template type (kernelHistogram1D<output, input,
    ...>), x's its producer's (else int64), the weights' theirs (else the counts')."""
    x, bins = a.tensor(0, a.input_dtype(0) or "int64"), a.output_shape()
    if x is None or bins is None or len(bins) != 1 or "kernelhistogram1d" not in a.kernel:
        return None
    weights = a.tensor(1, a.input_dtype(1) or a.dtype) if a.shape(1) == x.shape else None
    return histogram_cost(x, bins[0], weights, a.dtype)
