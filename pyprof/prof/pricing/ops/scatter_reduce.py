"""Tensor.scatter_reduce (torch.scatter_reduce) as PyTorch's CUDA path runs it, kernel by kernel
(Cost.stages, taken in order), for S source elements reduced into an output of O elements
through an index of S positions (its storage read: an expanded index, stride 0, is read once).

Forward (out-of-place: self copied into the output by a device-to-device memcpy, no kernel):
without include_self, the reduction's identity scattered to the S positions first (a scatter
fill: the index read, S elements stored); the scatter reduce (the index and the source read,
the output read and written once: atomic in L2; one operation an element); for "mean" the
counts: ones_like(src) (S written), the count tensor filled (O written), the ones scatter-added
into it (as the reduce), count == 0 (O read, O bools written; a comparison an element),
masked_fill_ of it with 1 (the bools read, the counts read and written), the output divided by
them (2 O read, O written; one an element).

Each stage is named by what its kernel's name holds (FillFunctor, scatter_fill, scatter_gather,
gather, CompareEq, masked_fill, DivFunctor, MulFunctor, copy), taken in order.

Backward (ScatterReduceBackward0, torch/csrc/autograd/FunctionsManual.cpp scatter_reduce_backward):
"sum" gathers dY at the index for src (the index read, S written, dY read once);
"mean" fills N (O), then ones_like(src) (S), scatter-adds them into N (as the forward's
counts), N == 0 and masked_fill_ (as the forward), dSelf = dY / N (O), N and dY gathered at the index
(S each), dSrc their quotient (S); "amax"/"amin" gathers the result at the index (S), compares
self with the result and casts the bools to the dtype (O), the same for src and the gathered
values (S), scatter-adds those into the former (N_to_distribute), divides dY by it (O),
compares self with the result again and multiplies (O), gathers the quotient (S), compares src
again and multiplies (S). Without include_self, dSelf's scattered positions are then zeroed (a
scatter fill after a memcpy). "prod": na (its backward branches on zeros in the data).
Nsight Compute on an H200 (a GNN's "amax" over 200,000 scores into 20,000 nodes, include_self,
and "mean" of 200,000 x 64 messages, expanded index, without): every kernel's bytes within 3%
(the scatter fills' stores as ncu counts them, one an element stored).
"""
from __future__ import annotations

from math import prod

from ..registry import SIMT, Call, Cost, fmt_params, register
from ..values import ITEMSIZE, Tensor

_REDUCES = ("sum", "mean", "amax", "amin")
_BOOL = 1  # bytes of a comparison's result


def _index_elements(c: Call, index: Tensor) -> int:
    """The elements the index's storage holds: an expanded index (stride 0) is read once."""
    strides = c.strides(2, "index")
    if strides is None or len(strides) != len(index.shape):
        return index.numel
    return prod(d for d, s in zip(index.shape, strides) if s != 0)


def reduction_stage(o: int, s: int, size: int, index_elements: int) -> tuple:
    """The scatter reduce's stage (also the counts' scatter add): S source elements of `size`
    bytes combined into O through an index whose storage holds `index_elements`: the index and
    the source read, the output read and written once (atomic in L2), one operation an element."""
    return "scatter_gather", s, index_elements * ITEMSIZE["int64"] + s * size + 2 * o * size


def scatter_reduce_cost(self_: Tensor, index: Tensor, src: Tensor, reduce: str, include_self: bool,
                        index_elements: int) -> Cost | None:
    """The module docstring's stages for self (O elements), an index and src of S elements."""
    size = ITEMSIZE.get(self_.dtype)
    if size is None or reduce not in _REDUCES or not index.numel or index.numel != src.numel:
        return None
    o, s = self_.numel, src.numel
    idx = index_elements * ITEMSIZE["int64"]
    # Named by what their kernels' names hold (CallParts.stage): a fill is then no gradient's.
    fill_at_index = ("scatter_fill", 0, idx + s * size)
    scatter_add = reduction_stage(o, s, size, index_elements)
    gather = ("gather", 0, idx + (min(o, s) + s) * size)  # O read once, S written
    fwd = ((fill_at_index,) if not include_self else ()) + (scatter_add,)
    compare_o, compare_s = ("CompareEq", o, 2 * o * size + o * _BOOL), ("CompareEq", s, 2 * s * size + s * _BOOL)
    no_count = (("CompareEq", o, o * (size + _BOOL)), ("masked_fill", 0, o * _BOOL + 2 * o * size))
    fill_o, fill_s = ("FillFunctor", 0, o * size), ("FillFunctor", 0, s * size)
    divide_o, divide_s = ("DivFunctor", o, 3 * o * size), ("DivFunctor", s, 3 * s * size)
    if reduce == "mean":
        fwd += (fill_s, fill_o, scatter_add) + no_count + (divide_o,)
    cast_o, cast_s = ("copy", 0, o * (_BOOL + size)), ("copy", 0, s * (_BOOL + size))
    product_o, product_s = ("MulFunctor", o, o * (_BOOL + 2 * size)), ("MulFunctor", s, s * (_BOOL + 2 * size))
    if reduce == "sum":
        bwd: tuple = (gather,)
    elif reduce == "mean":
        bwd = (fill_o, fill_s, scatter_add) + no_count + (divide_o, gather, gather, divide_s)
    else:
        bwd = (gather, compare_o, cast_o, compare_s, cast_s, scatter_add, divide_o, compare_o, product_o, gather,
               compare_s, product_s)
    if not include_self:
        bwd += (fill_at_index,)
    return Cost(sum(f for _, f, _ in fwd), sum(b for _, _, b in fwd),
                fmt_params(self_.dtype, out=o, src=s, reduce=reduce, include_self=int(include_self)), self_.dtype,
                SIMT, bwd_flops=sum(f for _, f, _ in bwd), bwd_bytes=sum(b for _, _, b in bwd), stages=fwd,
                bwd_stages=bwd, stages_in_order=True)


@register("Tensor.scatter_reduce", "torch.scatter_reduce", "Tensor.scatter_reduce_")
def scatter_reduce(c: Call) -> Cost | None:
    """(self, dim, index, src, reduce, *, include_self=True): module docstring (in place the
    same kernels: out of place self's copy is a memcpy, no kernel)."""
    self_, index, src = c.tensor(0, "input"), c.tensor(2, "index"), c.tensor(3, "src")
    if self_ is None or index is None or src is None:
        return None
    return scatter_reduce_cost(self_, index, src, c.get(4, "reduce"), bool(c.get(5, "include_self", True)),
                               _index_elements(c, index))
