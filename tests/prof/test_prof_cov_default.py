"""Kernels of the H100 coverage captures (benchmarks/pricing_coverage.py) that pyprof.init()'s
markers left unpriced (issue 27), each its own FLOPs and bytes, and the same kernels priced from
PyTorch's ranges alike: whole op calls of Swin-T in tests/data/kernel_truth/default_cov_calls.jsonl.xz
and UNet's head (the markers' records first, then the plain emit_nvtx capture's), and DenseNet-121's
cat of 24 inputs."""
from __future__ import annotations

import lzma
import os

import pytest

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally
from test_prof_conv_winograd import LD, ST, ncu_configs

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "kernel_truth")


@pytest.fixture(scope="module")
def calls() -> list:
    """(dir, op, short name, grid, FLOPs, bytes, level) of every record, in order."""
    with lzma.open(os.path.join(DATA, "default_cov_calls.jsonl.xz"), "rb") as stream:
        return [(r["dir"], r["op"], r["kShortName"], r["grid"], f.flops, f.bytes, f.level)
                for r, f, _ in analysed(records(stream, Tally()), Tally())]


def test_roll_over_two_dims_runs_two_gathers(calls) -> None:
    """Swin-T's shifted windows: torch.roll(x, (-3, -3), (1, 2)) of a 2x56x56x96 fp32 tensor runs
    PyTorch's roll kernel once per dim, each the whole tensor read and written (the second was
    na: the marker's one copy went to the first); its backward rolls dY back the same way
    (2x14x14x384 bf16). The aten level prices each kernel from its own aten::roll: the same."""
    fwd = ("roll_cuda_kernel", [1176, 1, 1], 0, 2 * 2 * 56 * 56 * 96 * 4)
    bwd = ("roll_cuda_kernel", [294, 1, 1], 0, 2 * 2 * 14 * 14 * 384 * 2)
    assert [c[2:6] for c in calls[0:2]] == [fwd, fwd] and [c[6] for c in calls[0:2]] == ["marker"] * 2
    assert [c[2:6] for c in calls[6:8]] == [bwd, bwd]
    assert [c[2:6] for c in calls[15:17]] == [fwd, fwd] and [c[2:6] for c in calls[20:22]] == [bwd, bwd]
    assert [c[6] for c in calls[15:17]] == ["aten"] * 2


def test_masked_fill_reads_input_and_mask(calls) -> None:
    """Swin-T's attention mask, attn_mask.masked_fill(attn_mask != 0, -100.0) over 64x49x49: one
    kernel (no clone before it), a select an element, the fp32 input and the bool mask read and the
    result written; aten::masked_fill_ the same. Its markers had no formula (na)."""
    n = 64 * 49 * 49
    want = ("vectorized_elementwise_kernel", [151, 1, 1], n, n * 4 + n + n * 4)
    assert [c[1:6] for c in (calls[3], calls[5])] == [("masked_fill",) + want] * 2
    assert [c[1:6] for c in (calls[17], calls[19])] == [("masked_fill_",) + want] * 2


def test_new_zeros_writes_its_size(calls) -> None:
    """x.new_zeros((56, 56)) of an fp32 x: one fill kernel writing 3,136 fp32 (no formula before)."""
    assert calls[2][1:6] == ("new_zeros", "vectorized_elementwise_kernel", [4, 1, 1], 0, 56 * 56 * 4)


def test_cat_of_more_than_16_tensors_from_the_runs_its_marker_carries(calls) -> None:
    """DenseNet-121's cat of 24 inputs (4x256x8x8 and 23 4x32x8x8 fp16): the marker keeps 16 and
    now the other 8 as one run (here written as the annotation writes it, their shapes those of
    the plain capture's aten::cat range of the same call, which prices the kernel alike:
    1,015,808 bytes). The batched copy reads all 24 and writes their sum; the backward's 24
    gradient accumulations (one add an element: both read, the sum written) each have their
    input's size: the 8 past 16 were na."""
    n = 4 * 256 * 64 + 23 * 4 * 32 * 64
    assert calls[26][2:6] == ("CatArrayBatchedCopy_vectorized", [64, 24, 1], 0, 2 * n * 2) == (
        "CatArrayBatchedCopy_vectorized", [64, 24, 1], 0, 1015808)
    big, small = 4 * 256 * 64, 4 * 32 * 64
    assert [c[3:6] for c in calls[27:51]] == [([128, 1, 1], big, 3 * big * 2)] + [
        ([16, 1, 1], small, 3 * small * 2)] * 23


def test_filter_transform_moves_the_filter(calls) -> None:
    """UNet's head, a 3x64x3x3 convolution under bf16 autocast: cuDNN converts its filter with
    tensorTransformGeneric (no layout conversion kernel), before the forward's implicit GEMM and
    before the data gradient's: the filter read and written once, 3,456 bytes each way (Nsight
    Compute on an H100, this shape and 11 others: its global loads and stores, exactly). The plain
    capture's convolution_backward range prices it alike; both were na."""
    transform = ("tensorTransformGeneric", [264, 1, 1], 0, 2 * 3 * 64 * 9 * 2)
    assert calls[8][2:6] == calls[11][2:6] == calls[22][2:6] == transform
    assert [c[6] for c in (calls[8], calls[11], calls[22])] == ["marker", "marker", "aten"]


def test_filter_transform_loads_and_stores_the_filter_in_nsight_compute() -> None:
    """benchmarks/cov_default_truth.py's bf16 convolutions on an H100: every tensorTransformGeneric
    launch's global loads and its stores are its K x C x 3 x 3 filter's bf16 bytes, whatever the
    input (8 x C x 32 x 32 or 64 x 64); its L2 writes are 845,000 sectors or so for each, the size
    of no tensor of the call (not counted)."""
    filters = [(k, 64) for k in (1, 2, 3, 4, 5, 6, 7, 9, 12, 16)] + [(3, 32)]
    launches = [((k, c), name.startswith("void tensorTransformGeneric<"), m[LD], m[ST])
                for (k, c), rows in zip(filters, ncu_configs("transform_dropout_ncu.csv.xz")) for name, _, m in rows]
    assert len(launches) == 16 and all(ok and ld == st == k * c * 9 * 2 for (k, c), ok, ld, st in launches)
    big = ncu_configs("filter_transform_ncu.csv.xz")
    assert [{(m[LD], m[ST]) for _, _, m in rows} for rows in big] == [{(3456, 3456)}, {(3456, 3456)}, {(6912, 6912)}]
    assert all(840000 < m["lts__t_sectors_srcunit_tex_op_write.sum"] < 850000 for rows in big for _, _, m in rows)
