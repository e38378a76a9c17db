"""Data-sized ops priced per kernel (H200 captures of benchmarks/data_sized.py): from PyTorch's op
ranges alone (emit_nvtx's, and Nsight Systems' --pytorch=autograd-shapes-nvtx), their outputs'
sizes from the ranges that first read them (parse/consumers.py); and from pyprof's markers (the
default mode), their sizes from the calls' out marks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import unpacked
from prof.test_prof_helpers import analyse
from pyprof.parse import Export, Stats, records

DATA = Path(__file__).resolve().parent.parent / "data"
TRUTH = json.loads((DATA / "data_sized_truth.json").read_text())["outputs"]
MODES = ["plain", "nsyspt"]


def _priced(mode: str, folder: Path) -> list:
    path = unpacked(DATA / f"data_sized_{mode}.sqlite.xz", folder)
    with Export(str(path)) as exp:
        recs = list(records(exp, Stats()))
    facts, _ = analyse(recs)
    return [(r["layer"][0], r["kShortName"], f.flops, f.bytes) for r, f in zip(recs, facts)]


@pytest.fixture(scope="module", params=MODES)
def priced(request, tmp_path_factory) -> list:
    return _priced(request.param, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def default(tmp_path_factory) -> list:
    return _priced("default", tmp_path_factory.mktemp("default"))


def _case(rows: list, layer: str) -> list:
    return [(k, flops, nbytes) for case, k, flops, nbytes in rows if case == layer]


def test_nonzero_in_every_form_is_priced_kernel_by_kernel_from_its_indices_reader(priced) -> None:
    """nonzero of a 64x32 bool mask (x > 0.5, its kernel writes bool) that held 613 trues, in each
    form the program called it (nonzero, where, argwhere, and inside x[mask] and masked_select):
    cub's count (mask read at 1 B an element, the count written), its tile states, its flagged
    select (the mask read, 613 int64 positions and the count written) and write_indices (the
    positions read, [613, 2] coordinates written)."""
    n = TRUTH["nonzero"][0][0]
    assert n == 613
    nonzero = [(k, flops, nbytes) for layer, k, flops, nbytes in priced
               if layer in ("nonzero", "where", "argwhere", "bool_index", "masked_select") and
               k in ("DeviceReduceSingleTileKernel", "DeviceSelectSweepKernel", "write_indices")]
    assert nonzero == [("DeviceReduceSingleTileKernel", 2048, 2048 + 4), ("DeviceSelectSweepKernel", 2048, 2048 + 8 * n + 4),
                       ("write_indices", 2 * n, 8 * n * 3)] * 5


def test_gathers_through_found_positions_read_each_dims_indices(priced) -> None:
    """x[idx[:, 0], idx[:, 1]] (two int64 index tensors of 613), x[x > 0.5] and
    masked_select(x, x > 0.5) (a 2-D mask: nonzero's 613 positions, one int64 index a dim) each
    gather 613 of x's fp32 elements in PyTorch's index_elementwise_kernel: the two indices read,
    each element read and written; no FLOPs. (The row gather's opaque element size is in its
    kernel's name: x, made before the capture, has no producer here.)"""
    n = TRUTH["bool_index"][0][0]
    gathers = [(layer, flops, nbytes) for layer, k, flops, nbytes in priced if k == "index_elementwise_kernel"]
    assert gathers == [(layer, 0, 2 * 8 * n + 2 * 4 * n) for layer in ("nonzero", "bool_index", "masked_select")]


def test_the_counting_ops_kernels_from_pytorchs_ranges(priced) -> None:
    """bincount of 1,000 int64 values in 0..49 (50 bins): its min and max (read: 8,000 B, one
    element written), the 50 counts zero-filled, the histogram (1,000 adds; the values read, the
    counts written). one_hot of the same, 50 classes from its max: the [1000, 50] int64 output
    zero-filled, the scatter of its 1,000 ones (a scalar: the index read, the ones written).
    repeat_interleave of arange(96) by 96 repeats adding up to 140: their cumsum (cub's scan:
    96 adds), the check that none is negative (96 bools written, then all()), compute_cuda_kernel
    (repeats and cumsum read, 140 int64 written), then index_select's gather of the 140 (opaque
    8-byte elements: its kernel's name; the indices read, the 140 written, the source's 96 read
    once)."""
    n, bins, total = 1000, TRUTH["bincount"][0][0], TRUTH["repeat_interleave"][0][0]
    assert (bins, total) == (50, 140)
    extreme = ("reduce_kernel", n - 1, 8 * n + 8)
    assert _case(priced, "bincount")[:4] == [extreme, extreme, ("vectorized_elementwise_kernel", 0, 8 * bins),
                                             ("kernelHistogram1D", n, 8 * n + 8 * bins)]
    assert _case(priced, "one_hot")[:3] == [extreme, ("vectorized_elementwise_kernel", 0, 8 * n * bins),
                                            ("_scatter_gather_elementwise_kernel", 0, 16 * n)]
    r = 96
    assert _case(priced, "repeat_interleave")[1:7] == [
        ("DeviceScanInitKernel", 0, 528), ("DeviceScanKernel", r, 16 * r), ("vectorized_elementwise_kernel", r, 9 * r),
        ("reduce_kernel", r - 1, r + 1), ("compute_cuda_kernel", 0, 16 * r + 8 * total),
        ("_scatter_gather_elementwise_kernel", 0, 8 * total + 8 * total + 8 * r)]


def test_a_sort_of_a_short_row_from_pytorchs_ranges(priced) -> None:
    """unique_consecutive's input, ints.sort() of 1,000 int64: sorted in place (values and indices
    read and written; 1,000 x 10 comparisons). The indices' arange, a kernel of its own, is the
    sort's first stage: na here, where the input's dtype is in no kernel before it (ints was made
    before the capture)."""
    assert _case(priced, "unique_consecutive")[:2] == [("elementwise_kernel_with_index", None, None),
                                                       ("radixSortKVInPlace", 10000, 2 * 1000 * 16)]


def test_data_sized_calls_from_pyprofs_markers(default) -> None:
    """The same calls with pyprof's markers: x[x > 0.5] and masked_select(x, x > 0.5) kernel by
    kernel as one call each (nonzero's four kernels, then the gather), their 613 from the out
    mark; bincount, one_hot and repeat_interleave as their ranges price them above, each kernel
    its own; the sort's arange (8,000 B: its indices) and in-place sort. unique and
    unique_consecutive are not modelled: na."""
    n = 613
    masked = [("DeviceReduceSingleTileKernel", 2048, 2052), ("DeviceCompactInitKernel", 0, 268),
              ("DeviceSelectSweepKernel", 2048, 2048 + 8 * n + 4), ("write_indices", 2 * n, 24 * n),
              ("index_elementwise_kernel", 0, 2 * 8 * n + 2 * 4 * n)]
    assert _case(default, "bool_index")[1:6] == _case(default, "masked_select")[1:6] == masked
    assert _case(default, "bincount")[:4] == [("reduce_kernel", 999, 8008)] * 2 + [
        ("vectorized_elementwise_kernel", 0, 400), ("kernelHistogram1D", 1000, 8400)]
    assert _case(default, "one_hot")[:3] == [("reduce_kernel", 999, 8008), ("vectorized_elementwise_kernel", 0, 400000),
                                             ("_scatter_gather_elementwise_kernel", 0, 16000)]
    assert _case(default, "repeat_interleave")[1:7] == [
        ("DeviceScanInitKernel", 0, 528), ("DeviceScanKernel", 96, 1536), ("vectorized_elementwise_kernel", 96, 864),
        ("reduce_kernel", 95, 97), ("compute_cuda_kernel", 0, 2656), ("_scatter_gather_elementwise_kernel", 0, 3008)]
    assert _case(default, "unique_consecutive")[:2] == [("elementwise_kernel_with_index", 0, 8000),
                                                        ("radixSortKVInPlace", 10000, 32000)]
    # kv.repeat_interleave(3, dim=1) on fp32 [2, 4, 64, 32]: one copy of the expanded heads (x read
    # once, the output written); its ranges price the same kernel as a copy of a [2, 4, 3, 64, 32]
    # source, which they do not tell is a broadcast: both read in full
    x = 2 * 4 * 64 * 32 * 4
    assert _case(default, "repeat_heads")[1] == ("elementwise_kernel", 0, x + 3 * x)
    assert _case(default, "unique")[:8] == UNIQUE
    assert _case(default, "unique_consecutive")[2:4] == [("DeviceCompactInitKernel", 0, 272),
                                                         ("DeviceSelectSweepKernel", 1000, 8000 + 50 * 8 + 8)]


# torch.unique(ints, return_inverse=True, return_counts=True) of 1,000 int64 with 50 distinct:
# the positions' arange, cub's one-tile sort of keys and positions (read and written), the
# neighbours compared (int32 flags written), cub's scan init and the flags' sum into int64, the
# inverse scattered back (the sorted positions and the sums read, the inverse written), cub's
# compaction init and its run-length encoding (keys read; 50 values, 50 counts and the run
# count written).
UNIQUE = [("elementwise_kernel_with_index", 0, 8000), ("DeviceRadixSortSingleTileKernel", 0, 2 * 1000 * 16),
          ("adjacent_difference_kernel", 1000, 1000 * 12), ("DeviceScanInitKernel", 0, 264),
          ("DeviceScanKernel", 1000, 1000 * 12), ("scatter_kernel", 0, 3 * 8000), ("DeviceCompactInitKernel", 0, 536),
          ("DeviceReduceByKeyKernel", 1000, 8000 + 50 * 16 + 8)]


def test_unique_from_pytorchs_ranges_where_its_inputs_dtype_is_known(tmp_path: Path) -> None:
    """aten::_unique2's range carries no flags: the inverse is told by the positions' arange
    before the sort, the counts by the encoding kernel's name; its 50 values by the output's
    first reader. Its input here was made before the capture (no producer: only the sort's keys
    tell its dtype, the other kernels are na); with a producer in the trace (an int64 add put in
    front of the same records) every kernel is priced, as with pyprof's markers."""
    path = unpacked(DATA / "data_sized_plain.sqlite.xz", tmp_path)
    with Export(str(path)) as exp:
        recs = [r for r in records(exp, Stats()) if r["layer"][0] == "unique"]
    facts, _ = analyse(recs)
    assert [(r["kShortName"], f.flops, f.bytes) for r, f in zip(recs, facts)][:8] == [
        ("elementwise_kernel_with_index", None, None), ("DeviceRadixSortSingleTileKernel", 0, 32000),
        ("adjacent_difference_kernel", None, None), ("DeviceScanInitKernel", 0, 264), ("DeviceScanKernel", None, None),
        ("scatter_kernel", None, None), ("DeviceCompactInitKernel", 0, 536), ("DeviceReduceByKeyKernel", None, None)]
    unique = next(o for o in recs[1]["torchOps"] if o["name"] == "aten::_unique2")
    add = dict(recs[1], kShortName="vectorized_elementwise_kernel", torchOps=[
        {"name": "aten::add", "opId": unique["opId"] - 50, "sizes": [[1000], []], "inputOpIds": [[0, -1], [0, -1]]}],
        kLongName="void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<long, long, long, "
                  "at::native::binary_internal::AddFunctor<long>>, std::array<char *, (unsigned long)2>>(int, T2, T3)")
    for r in recs:
        for o in r["torchOps"]:
            if o["name"] == "aten::_unique2":
                o["inputOpIds"][0] = [unique["opId"] - 50, 0]
    facts, _ = analyse([add] + recs)
    assert [(r["kShortName"], f.flops, f.bytes) for r, f in zip(recs, facts[1:])][:8] == UNIQUE


def test_an_int_repeat_interleave_from_pytorchs_ranges_reads_its_source_in_full(priced) -> None:
    """kv.repeat_interleave(3, dim=1) (fp32 [2, 4, 64, 32]) with PyTorch's ranges alone: the copy
    of kv's expanded view, whose range gives the source as [2, 4, 3, 64, 32]: read and written in
    full, where the kernel read kv once. (The expand's range is in the copy's record, but a copy
    priced from it would make every copy of a view one the memo's replay cannot answer.)"""
    out = 2 * 12 * 64 * 32 * 4
    assert _case(priced, "repeat_heads")[1] == ("elementwise_kernel", 0, 2 * out)


def test_a_view_of_a_data_sized_output_keeps_its_dtype(priced) -> None:
    """idx.t().float() of argwhere's [613, 2] int64 indices and hot.t().float() of one_hot's
    [1000, 50] int64: the cast reads the view, whose range launched nothing; the view is among
    the consumers parse handed on, and takes its input's dtype (tensor_flow.consumed): int64 read,
    fp32 written."""
    assert _case(priced, "argwhere")[5] == ("unrolled_elementwise_kernel", 0, 613 * 2 * (8 + 4))
    assert _case(priced, "one_hot")[3] == ("unrolled_elementwise_kernel", 0, 1000 * 50 * (8 + 4))
