"""Tensor.scatter_reduce kernel by kernel (ops/scatter_reduce.py): the stages of each reduction
and the real capture of a message-passing GNN against Nsight Compute (kty_h200)."""
from __future__ import annotations

import os
import sys

import pytest

from pyprof.prof.pricing.ops import Call, lookup

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402

OUT, SRC = 20000 * 64, 200000 * 64  # output and source elements of the GNN's mean aggregation


def marker(self_shape: list, index: dict, src_shape: list, reduce: str, include_self: bool) -> dict:
    return {"v": 1, "kind": "op", "mod": "Tensor", "op": "scatter_reduce",
            "args": [{"shape": self_shape, "dtype": "float32"}, 0, index,
                     {"shape": src_shape, "dtype": "float32", "grad": True}],
            "kwargs": {"reduce": reduce, "include_self": include_self}}


def test_mean_without_self_through_an_expanded_index():
    """mean of 200,000 x 64 fp32 into 20,000 x 64, the index [200,000] expanded to the source's
    shape (strides [1, 0]: its 1.6 MB read, not 102 MB), include_self=False: the identity
    scattered first, the reduce, then the counts (ones, zeros, their scatter-add, == 0,
    masked_fill_) and the division."""
    index = {"shape": [200000, 64], "dtype": "int64", "strides": [1, 0]}
    cost = lookup("Tensor", "scatter_reduce")(Call(marker([20000, 64], index, [200000, 64], "mean", False)))
    idx = 200000 * 8
    add = ("scatter_gather", SRC, idx + SRC * 4 + 2 * OUT * 4)
    counts = (("FillFunctor", 0, SRC * 4), ("FillFunctor", 0, OUT * 4), add, ("CompareEq", OUT, OUT * 5),
              ("masked_fill", 0, OUT * 9))
    assert cost.stages == (("scatter_fill", 0, idx + SRC * 4), add) + counts + (("DivFunctor", OUT, 3 * OUT * 4),)
    gather = ("gather", 0, idx + (OUT + SRC) * 4)
    assert cost.bwd_stages == (("FillFunctor", 0, OUT * 4), ("FillFunctor", 0, SRC * 4), add, ("CompareEq", OUT, OUT * 5),
                               ("masked_fill", 0, OUT * 9), ("DivFunctor", OUT, 3 * OUT * 4), gather, gather,
                               ("DivFunctor", SRC, 3 * SRC * 4), ("scatter_fill", 0, idx + SRC * 4))
    assert (cost.flops, cost.bytes) == (sum(s[1] for s in cost.stages), sum(s[2] for s in cost.stages))


def test_amax_with_self_and_the_reductions_not_modelled():
    """amax of 200,000 scores into 20,000 (include_self): one scatter reduce; its backward the
    value-aware distribution of dY over the ties (twelve kernels). sum's backward a gather; prod
    and an index not as long as src: na."""
    index = {"shape": [200000], "dtype": "int64"}
    cost = lookup("Tensor", "scatter_reduce")(Call(marker([20000], index, [200000], "amax", True)))
    o, s = 20000, 200000
    assert cost.stages == (("scatter_gather", s, s * 8 + s * 4 + 2 * o * 4),)
    assert [st[0] for st in cost.bwd_stages] == ["gather", "CompareEq", "copy", "CompareEq", "copy", "scatter_gather",
                                                 "DivFunctor", "CompareEq", "MulFunctor", "gather", "CompareEq",
                                                 "MulFunctor"]
    summed = lookup("Tensor", "scatter_reduce")(Call(marker([20000], index, [200000], "sum", True)))
    assert summed.bwd_stages == (("gather", 0, s * 8 + (o + s) * 4),)
    assert lookup("Tensor", "scatter_reduce_")(Call(marker([20000], index, [200000], "amax", True))) == cost
    assert lookup("Tensor", "scatter_reduce")(Call(marker([20000], index, [200000], "prod", True))) is None
    assert lookup("Tensor", "scatter_reduce")(Call(marker([20000], {"shape": [100], "dtype": "int64"}, [200000],
                                                          "sum", True))) is None


def test_gnn_scatter_reduce_and_gathers_against_ncu():
    """The message-passing GNN on an H200 (kty_h200_default, benchmarks/pricing_coverage.py gnn): its
    scatter_reduce kernels (27% of its GPU time, all na before) within 0.95-1.1 of what Nsight
    Compute counted where they moved 1 MB or more (the reduces' and the counts' atomic adds 1.09:
    ncu counts no write of an atomic), the small ones within 0.75, index_select's gathers of 200,000 rows from 20,000 at 0.99-1.0 (each source
    row read once: 1.78 before), index_add_'s at 1.03-1.09 (2.68 before); every kernel ncu measured
    known but cuBLAS's split-K reductions of the small head GEMM. The segment softmax's division
    by a clamped sum (w / norm.clamp_min(1e-9), both requiring grad) kernel by kernel: dW's four
    (X / W, that / W, -dY, the product), dX's one, clamp_min's three (a 0-dim zero, the compare,
    the select), each within 0.95-1.0 of ncu (the zero's 4 bytes: ncu's 4,128)."""
    rows = [(r["op"], r["kShortName"], f, moved) for r, f, moved, _ in measured("gnn", "default", "kty_h200")]
    assert len(rows) == 271
    ratios = [(f.bytes / moved, moved) for op, _, f, moved in rows if op == "scatter_reduce"]
    assert len(ratios) == 83 and all(0.75 <= x <= 1.1 for x, _ in ratios)
    assert all(0.95 <= x <= 1.1 for x, moved in ratios if moved >= 1 << 20)
    gathers = [f.bytes / moved for op, k, f, moved in rows if op == "index_select" and k == "vectorized_gather_kernel"]
    assert len(gathers) == 6 and all(0.99 <= x <= 1.0 for x in gathers)
    adds = [f.bytes / moved for op, k, f, moved in rows if op == "index_add_" and k == "indexFuncLargeIndex"]
    assert len(adds) == 6 and all(1.03 <= x <= 1.09 for x in adds)
    assert {op for op, _, f, _ in rows if f.flops is None or not f.bytes} == {"linear"}
    kernels = measured("gnn", "default", "kty_h200")
    at = next(i for i, (r, *_) in enumerate(kernels) if r["op"] == "__truediv__" and r["dir"] == "bprop")
    n = 200000
    division = [(f.flops, f.bytes) for _, f, _, _ in kernels[at:at + 8]]
    assert division == [(n, 12 * n), (n, 12 * n), (n, 8 * n), (n, 12 * n), (n, 12 * n), (0, 4), (n, 5 * n),
                        (n, 9 * n + 4)]
    assert all(0.95 <= f.bytes / moved <= 1.0 for _, f, moved, _ in kernels[at:at + 8] if f.bytes > 4)


@pytest.mark.parametrize("mode", ["plain", "nsyspt"])
def test_gnn_scatter_kernels_from_pytorchs_ranges_against_ncu(mode):
    """The same GNN captured without pyprof's markers (kty_h200_plain: emit_nvtx; kty_h200_nsyspt:
    nsys --pytorch): aten::scatter_reduce's own kernel, whose reduction its functor names
    (ReduceMaximum for amax over 200,000 fp32 scores into 20,000 nodes: the index and the scores
    read, the output read and written once, 2,560,000 bytes), the identity's scatter fill and the
    gathers of its backward whose values no producer types (the kernels' OpaqueType<4>), the first
    layer's index_select of the input (made before the capture; typed by the opaque copy of the cat
    that reads it): every kernel Nsight Compute measured now priced but cuBLAS's split-K reductions
    of the small head GEMM. mean's index `dst.unsqueeze(1).expand(-1, 64)` (stride 0) read once:
    the expand's range, which launched nothing, is carried in the next record's `consumers`
    (2.8-2.9x ncu before). Outside 0.5-2x only nll_loss's forward, as with markers (0.2)."""
    kernels = measured("gnn", mode, "kty_h200")
    rows = [(r["op"], r["kShortName"], f, moved) for r, f, moved, _ in kernels]
    amax = [(f.flops, f.bytes, round(f.bytes / moved, 2)) for r, f, moved, _ in kernels
            if "ReduceMaximum" in r["kLongName"]]
    assert amax == [(200000, 200000 * 8 + 200000 * 4 + 2 * 20000 * 4, 1.01)] * 3
    leaf = [round(f.bytes / moved, 3) for op, k, f, moved in rows[:2]]
    assert [r[1] for r in rows[:2]] == ["vectorized_gather_kernel"] * 2 and leaf == [0.995, 0.995]
    assert rows[0][2].bytes == 200000 * 8 + (200000 * 64 + 20000 * 64) * 4
    assert {k for op, k, f, _ in rows if f.flops is None or not f.bytes} == {"splitKreduce_kernel"}
    off = sorted({(k, round(f.bytes / moved, 1)) for _, k, f, moved in rows if moved >= 1 << 20
                  and not 0.5 <= f.bytes / moved <= 2})
    assert off == [("nll_loss_forward_reduce_cuda_kernel_2d", 0.2)]
    mean = [round(f.bytes / moved, 2) for r, f, moved, _ in kernels if "ReduceMean" in r["kLongName"]]
    assert mean == [1.09] * 3
