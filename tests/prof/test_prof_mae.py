"""A masked autoencoder on an H200 (ktz_h200_default: benchmarks/pricing_coverage.py's mae, bf16
autocast, captured before any change for it) against Nsight Compute, kernel by kernel: the
random masking's argsort and the per-patch squared error's backward."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402


def _kernels(mode: str = "default") -> list:
    return [(r, f, moved) for r, f, moved, _ in measured("mae", mode, "ktz_h200")]


def test_argsort_fills_one_row_of_indices_and_copies_it_to_every_row():
    """argsort of [16, 64] noise (and of its result): arange writes one row of 64 int64 indices
    (512 B: ncu counted 512 written), a copy kernel broadcasts it into the 16 rows (the row read,
    8,192 B written: ncu 8,192 written), then the in-place radix sort of keys and indices. Without
    markers the sort's dim, a scalar no range carries, is the one whose rows its kernel's launch
    sorts (16 blocks: dim 1 of [16, 64])."""
    rows = [(r["kShortName"], f.flops, f.bytes) for r, f, _ in _kernels() if r["op"] == "argsort"]
    assert rows == [("elementwise_kernel_with_index", 0, 512), ("elementwise_kernel", 0, 512 + 8192),
                    ("radixSortKVInPlace", 6144, 2 * 1024 * (4 + 8))] + [
                       ("elementwise_kernel_with_index", 0, 512), ("elementwise_kernel", 0, 512 + 8192),
                       ("radixSortKVInPlace", 6144, 2 * 1024 * (8 + 8))]
    written = [moved for r, f, moved in _kernels() if r["op"] == "argsort"][:2]
    assert written[0] >= 512 and written[1] >= 8192
    plain = [(r["kShortName"], f.flops) for r, f, _ in _kernels("plain") if r["kShortName"] == "radixSortKVInPlace"]
    assert plain == [("radixSortKVInPlace", 6144)] * 2


def test_a_squares_backward_is_two_kernels():
    """((pred - patches) ** 2)'s backward on [16, 64, 768] fp32: dY·(2·x), x.pow(1) a memcpy, so
    two kernels of one operation an element: 2·x (x read, written: 6,291,456 B) and the product
    with dY (9,437,184 B), each within 0.1% of ncu's bytes."""
    n = 16 * 64 * 768
    rows = [(f.flops, f.bytes, moved) for r, f, moved in _kernels() if r["op"] == "__pow__" and r["dir"] == "bprop"]
    assert [r[:2] for r in rows] == [(n, 8 * n), (n, 12 * n)]
    assert all(0.999 <= nb / moved <= 1.0 for _, nb, moved in rows)


def test_every_kernel_ncu_measured_is_priced():
    """All 83 kernels of the MAE that moved 1 MB or more within 0.5-2x of ncu, and every kernel
    carries FLOPs and bytes > 0 with pyprof's markers."""
    rows = _kernels()
    assert all(f.flops is not None and f.bytes for _, f, _ in rows)
    big = [f.bytes / moved for _, f, moved in rows if moved >= 1 << 20]
    assert len(big) == 83 and all(0.5 <= x <= 2 for x in big)


def test_a_gather_through_an_expanded_index_from_ranges_alone():
    """The unshuffle torch.gather(x, 1, restore.unsqueeze(-1).expand(-1, -1, 128)) of the decoder's
    [16, 64, 128] fp32 tokens from emit_nvtx's ranges alone: the expand (in the record's
    `consumers`) says the index holds 16 x 64 int64, read once (2.4x ncu when counted in full);
    the MAE's 83 kernels of 1 MB or more all within 0.5-2x."""
    rows = [(r["kShortName"], f, moved) for r, f, moved in _kernels("plain")
            if r["op"] == "gather" and r["dir"] == "fprop" and moved >= 1 << 20]
    assert [(k, f.bytes) for k, f, _ in rows] == [("_scatter_gather_elementwise_kernel", 16 * 64 * 8 + 2 * 16 * 64 * 128 * 4)]
    assert 0.95 <= rows[0][1].bytes / rows[0][2] <= 1.0  # ncu: 1,110,784
    assert all(0.5 <= f.bytes / moved <= 2 for _, f, moved in _kernels("plain") if moved >= 1 << 20)
