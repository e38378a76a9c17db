"""Ops that count their input's values, whose output size the data decide: one_hot (its classes
from the largest value), bincount, unique and unique_consecutive. The marker level prices a call
kernel by kernel, its size from the call's out mark (pyprof's `out`); the aten level the kernels
launched in the op's own range, its size from the output's first reader (parse/consumers.py);
the ops' other kernels run under ranges of their own (aten::max, aten::zeros, aten::scatter_)
and are priced there."""
from __future__ import annotations

from typing import Any

from ..cub_sort import radix_sort_pairs
from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, register_aten
from ..values import ITEMSIZE, Tensor
from .elementwise import reduce_cost

_INT64 = ITEMSIZE["int64"]
A = Any  # an AtenCall (op_ranges.py): not imported, as in aten.py


def _extreme(functor: str, x: Tensor) -> tuple:
    """The stage of a full min or max of x (elementwise.reduce_cost to one element), PyTorch's
    reduce_kernel named by its functor (MinNanFunctor, MaxNanFunctor)."""
    c = reduce_cost("max", x, 1, None, "all", False)
    return functor, c.flops, 0, c.bytes


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


def unique_cost(x: Tensor, found: int, inverse: bool, counts: bool | None, consecutive: bool,
                keys_only: bool | None = None) -> Cost | None:
    """torch.unique / unique_consecutive (flattened, no dim) on CUDA, kernel by kernel, `found`
    distinct values: unique first sorts (cub's radix sort on every key bit, with, for the
    inverse, the positions arange wrote: cub_sort.py; `keys_only` where the caller knows the
    sort's kind from its kernel's name); for the inverse, neighbours compared (one comparison an
    element: the keys read, int32 flags written), the flags' inclusive sum into int64 positions
    (one add each) and, after a sort, their scatter back to the input's order; then cub's
    run-length encoding for the counts (the keys read; the values, their int64 counts and the
    run count written) or, without counts, cub's unique select (the values and their count
    written); `counts` None where the caller cannot tell: both, each taken by its kernel's name
    (the call's total counts the select). cub's tile inits are priced by their launch
    (cub_init.py); the count is read back by a memcpy."""
    n, size = x.numel, x.itemsize
    if size is None:
        return None
    head: tuple = ()
    sort: tuple = ()
    if not consecutive:
        pairs = inverse if keys_only is None else not keys_only
        head = (("arange_cuda_out", 0, 0, n * _INT64),) if pairs else ()
        sort = radix_sort_pairs(n, size, _INT64 if pairs else 0, 8 * size)
    tail: tuple = ()
    if inverse:
        tail += (("adjacent_difference_kernel", n, 0, n * (size + 4)), ("DeviceScanKernel", n, 0, n * (4 + _INT64)))
        tail += () if consecutive else (("scatter_kernel", 0, 0, 3 * n * _INT64),)
    encode = ("DeviceReduceByKeyKernel", n, 0, n * size + found * (size + _INT64) + _INT64)
    select = ("DeviceSelectSweepKernel", n, 0, n * size + found * size + _INT64)
    tail += (encode,) if counts else (select,) if counts is False else (select, encode)
    # The call's total takes the one-tile sort: which of cub's paths runs is its kernels' to say.
    whole = head + sort[:1] + (tail[:-1] if counts is None else tail)
    return Cost(sum(s[1] for s in whole), sum(s[3] for s in whole),
                fmt_params(x.dtype, shape=dims(x.shape), found=found), x.dtype, SIMT, stages=head + sort + tail)


def _unique(consecutive: bool):
    """unique_cost of a call, its flags from its arguments, the distinct values from its out mark
    (the first output); with a dim (unique_dim's rows), not modelled: na."""
    at = 1 if consecutive else 2  # unique(input, sorted, return_inverse, ...), unique_consecutive(input, return_inverse, ...)

    def formula(c: Call) -> Cost | None:
        x, found = c.get(0, "input"), c.outputs()
        inverse, counts = c.get(at, "return_inverse", False), c.get(at + 1, "return_counts", False)
        if not isinstance(x, Tensor) or c.get(at + 2, "dim") is not None or not found or len(found[0].shape) != 1:
            return None
        return unique_cost(x, found[0].shape[0], inverse is True, counts is True, consecutive)
    return formula


register(*names(["unique"]))(_unique(False))
register(*names(["unique_consecutive"]))(_unique(True))


@register_aten("aten::_unique2", "aten::unique_consecutive")
def aten_unique(a: A) -> Cost | None:
    """unique_cost from the op's range, whose flags are scalars it does not carry: the inverse
    was asked where the first kernel is the positions' arange, or the sort's name has values
    (not cub's NullType), or (unique_consecutive) it compares neighbours; counts and the unique
    select both offered, each its kernel's. The distinct values from the first output's first
    reader, x in its producer's dtype (else, at the sort, its keys': the other kernels' types are
    their indices' or flags')."""
    kernel = a.kernel
    dtype = a.input_dtype(0) or (a.dtype if "radixsort" in kernel else None)
    x, out = (a.tensor(0, dtype) if dtype else None), a.output_shape()
    if x is None or out is None or len(out) != 1:
        return None
    consecutive = a.name == "aten::unique_consecutive"
    if consecutive:
        inverse, keys_only = "adjacent_difference" in kernel, None
    else:
        keys_only = "nulltype" in kernel if "radixsort" in kernel else None
        inverse = "arange_cuda_out" in kernel or keys_only is False
    return unique_cost(x, out[0], inverse, None, consecutive, keys_only)
