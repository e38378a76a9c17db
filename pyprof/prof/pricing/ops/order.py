"""Scans and orderings: cumsum/cumprod, sort/argsort, topk, multinomial's draw.

Conventions (docs/prof.md): a scan does 1 FLOP per element (its add or product); a sort of
rows of n elements counts n·ceil(log2 n) comparisons per row, topk n·ceil(log2 k) (a heap of k)
to find the k, and, sorted (the default), k·ceil(log2 k) per row to sort them; comparisons count
as FLOPs, as max pooling's do. Bytes: the input read, the values (in the
input's dtype, or `dtype`) and the int64 indices written. Backward: cumsum's is a reversed
cumsum of dY (1 per element; dY read, dX written); sort and topk scatter dY through the indices
(no FLOPs; dY and the indices read, dX written, topk's zero fill included).
"""
from __future__ import annotations

from dataclasses import replace
from math import ceil, log2

from ..cub_sort import radix_sort_pairs
from ..registry import SIMT, Call, Cost, dims, fmt_params, names, register, stage_totals
from ..values import ITEMSIZE, Tensor, reduce_adds


def cumprod_backward_stages(n: int, size: int) -> tuple:
    """The kernels of cumprod's backward where its input holds no zero (FunctionsManual's
    cumprod_backward: reversed_cumsum(dY * output).div(input)), in launch order: the product
    (dY and the output read), the zero test (input == 0, bools written) and its any() (a sum of
    bools: read, one written), the flip, the cumsum's scan, the flip back, the division by the
    input; n elements of `size` bytes each. An input with zeros runs other kernels: theirs na."""
    return (("MulFunctor", n, 3 * n * size), ("CompareEq", n, n * (size + 1)), ("reduce_kernel", n - 1, n + 1),
            ("flip_kernel", 0, 2 * n * size), ("scan", n, 2 * n * size), ("flip_kernel", 0, 2 * n * size),
            ("DivFunctor", n, 3 * n * size))


def scan_cost(op: str, x: Tensor, dtype: str | None, dim: int | None) -> Cost | None:
    """cumsum/cumprod of x along `dim` into `dtype` (None: x's): one add or product an element;
    x read, the output written. Backward: cumsum's a reversed cumsum of dY; cumprod's
    cumprod_backward_stages (the call's bytes: dY, x and the output read once, dX written)."""
    size = ITEMSIZE.get(dtype or x.dtype)
    if x.nbytes is None or size is None:
        return None
    n = x.numel
    stages = None
    if op == "cumsum":
        bwd = (n, n * size + x.nbytes)
    elif x.dtype == (dtype or x.dtype) and n:
        stages = cumprod_backward_stages(n, size)
        bwd = (sum(s[1] for s in stages), 4 * n * size)
    else:
        bwd = (None, None)
    return Cost(n, x.nbytes + n * size, fmt_params(x.dtype, shape=dims(x.shape), dim=dim), x.dtype,
                SIMT, bwd_flops=bwd[0], bwd_bytes=bwd[1], bwd_stages=stages)


def _scan(op: str):
    def formula(c: Call) -> Cost | None:
        return scan_cost(op, c.get(0, "input"), c.get(None, "dtype"), c.get(1, "dim"))
    return formula


for _op in ("cumsum", "cumprod"):
    register(*names([_op, f"{_op}_"]))(_scan(_op))


def _steps(n: int) -> int:
    return ceil(log2(n)) if n > 1 else 0


def _order_cost(x, dim: int, k: int | None, values: bool) -> Cost | None:
    """Rows along `dim` sorted (k None) or their top k found; values and/or int64 indices written."""
    if x.nbytes is None or not x.shape:
        return None
    length = x.shape[dim]
    rows = x.numel // max(length, 1)
    kept = length if k is None else k
    flops = x.numel * _steps(kept if k is not None else length)
    out = rows * kept
    written = out * 8 + (out * x.itemsize if values else 0)
    bwd_bytes = out * x.itemsize + out * 8 + x.nbytes
    return Cost(flops, x.nbytes + written, fmt_params(x.dtype, shape=dims(x.shape), dim=dim, k=kept), x.dtype, SIMT,
                bwd_flops=0 if values else None, bwd_bytes=bwd_bytes if values else None)


# The longest rows PyTorch sorts in place, one block a row (its sortKeyValueInplace); longer ones
# go through cub (sort_cost).
IN_PLACE_SORT = 4096


def sort_cost(x: Tensor, dim: int, values: bool) -> Cost | None:
    """_order_cost of a sort, kernel by kernel as PyTorch runs it: rows of at most IN_PLACE_SORT
    elements get their indices from arange (fillSliceWithIndex: one row's, broadcast into the
    others by a copy kernel; a single row's copy is a device-to-device memcpy, no kernel), then
    the rows' values and indices are sorted in place (radixSortKVInPlace, bitonicSortKVInPlace
    and kin: read and written; the values were copied into the output by a memcpy, no kernel);
    one longer row gets its indices from
    fill_reverse_indices_kernel, then cub's radix sort of the values with them on every key bit
    (cub_sort.radix_sort_pairs; the comparisons the convention counts shared among its onesweep
    passes). Several longer rows (cub's segmented sort): the total, on the call's first kernel."""
    cost = _order_cost(x, dim, None, values)
    if cost is None:
        return cost
    n, size = x.numel, x.itemsize
    if x.shape[dim] <= IN_PLACE_SORT:
        row = x.shape[dim]
        fill = (("arange_cuda_out", 0, 0, row * 8),) + ((("copy_kernel_cuda", 0, 0, (row + n) * 8),) if n > row else ())
        stages = fill + (("SortKVInPlace", cost.flops, 0, 2 * n * (size + 8)),)
    elif n == x.shape[dim]:
        passes = radix_sort_pairs(n, size, 8, 8 * size)
        sweeps = sum(1 for s in passes if s[0] == "DeviceRadixSortOnesweepKernel")
        each, left = divmod(cost.flops, sweeps)
        shared = tuple((s[0], each + (left if i == sweeps - 1 else 0), *s[2:]) for i, s in enumerate(passes[-sweeps:]))
        stages = (("fill_reverse_indices_kernel", 0, 0, n * 8),) + passes[:-sweeps] + shared
        # the call's total takes the multi-pass path: a row too long for one block is too long for one tile
        return replace(cost, bytes=sum(s[3] for s in stages if s[0] != "DeviceRadixSortSingleTileKernel"),
                       stages=stages)
    else:
        return cost
    return replace(cost, bytes=sum(s[3] for s in stages), stages=stages)


@register(*names(["sort", "msort"]))
def sort(c: Call) -> Cost | None:
    return sort_cost(c.get(0, "input"), c.get(1, "dim", -1), True)


@register(*names(["argsort"]))
def argsort(c: Call) -> Cost | None:
    return sort_cost(c.get(0, "input"), c.get(1, "dim", -1), False)


@register(*names(["topk"]))
def topk(c: Call) -> Cost | None:
    """topk_cost of the call's input, k, dim and sorted."""
    return topk_cost(c.get(0, "input"), c.get(1, "k"), c.get(2, "dim", -1), c.get(4, "sorted", True))


def topk_cost(x: Tensor, k: int | None, dim: int, in_order: bool = True) -> Cost | None:
    """PyTorch's kernels in turn: gatherTopK finds each row's k (the input read, k values and
    int64 indices a row written); sorted (the default) and k > 1, a sort of each row's k in place
    (bitonicSortKVInPlace and its kin for small k: values and indices read and written). Rows
    longer than one block's search run radix-select kernels first: na."""
    cost = _order_cost(x, dim, k, True)
    if cost is None or not isinstance(k, int):
        return cost
    rows = x.numel // max(x.shape[dim], 1)
    out = rows * k
    stages = (("gatherTopK", cost.flops, 0, cost.bytes),)
    if in_order and k > 1:
        stages += (("SortKVInPlace", out * _steps(k), 0, 2 * out * (x.itemsize + 8)),)
    return replace(cost, flops=sum(s[1] for s in stages), bytes=sum(s[3] for s in stages), stages=stages)


@register(*names(["multinomial"]))
def multinomial(c: Call) -> Cost | None:
    """torch.multinomial(input, 1) (one draw per row, as a sampler's next token), kernel by
    kernel as PyTorch runs it (its Gumbel-max path): the checks that the probabilities are
    finite and not negative (min and max of all: each reads the input, writes one element;
    their two comparisons, an and, an assert), that no row sums to zero (the rows' sums, == 0,
    any() of a 2-D input's, its not, an assert), the exponential noise q written, p / q, and its
    argmax per row (int64 written). More draws (topk, or the replacement kernel): na."""
    p = c.get(0, "input")
    size = p.itemsize if isinstance(p, Tensor) else None
    if size is None or c.get(1, "num_samples") != 1 or len(p.shape) not in (1, 2):
        return None
    n = p.numel
    r = p.shape[0] if len(p.shape) == 2 else 1
    whole = ("reduce_kernel", reduce_adds(n, 1), n * size + size)
    stages = (("MinNanFunctor",) + whole[1:], ("MaxNanFunctor",) + whole[1:],
              ("compare_scalar_kernel", 1, size, 1), ("compare_scalar_kernel", 1, size, 1),
              ("BitwiseAndFunctor", 1, 0, 3), ("_assert_async_cuda_kernel", 0, 0, 1),
              ("sum_functor", reduce_adds(n, r), n * size + r * size), ("CompareEqFunctor", r, r * size, r)) \
        + ((("or_kernel_cuda", reduce_adds(r, 1), 0, r + 1),) if len(p.shape) == 2 else ()) \
        + (("bitwise_not_kernel_cuda", 1, 0, 2), ("_assert_async_cuda_kernel", 0, 0, 1),
           ("distribution_elementwise", 0, n * size), ("DivFunctor", n, 3 * n * size),
           ("ArgMaxOps", reduce_adds(n, r), n * size, 8 * r))
    return Cost(*stage_totals(stages), fmt_params(p.dtype, shape=dims(p.shape)), p.dtype, SIMT, stages=stages)
