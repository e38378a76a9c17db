"""A convolutional VAE and a NeRF-style field on an H200 (ktu_h200_default: benchmarks/
pricing_coverage.py's vae and nerf, captured before any change for them) against Nsight Compute."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402


def test_the_reparameterisations_noise_is_written_once():
    """torch.randn_like(mu) of the fp16 [32, 128] means: one random fill, 8,192 B written (na
    before: randn_like had no formula), no FLOPs (a generator counts none)."""
    rows = [(r["kShortName"], f.flops, f.bytes) for r, f, _, _ in measured("vae", "default", "ktu_h200")
            if r["op"] == "randn_like"]
    assert rows == [("distribution_elementwise_grid_stride_kernel", 0, 32 * 128 * 2)]


def test_a_gemm_whose_operand_outgrows_the_l2_is_read_once_a_column_of_tiles():
    """What algorithmic bytes do not count: the NeRF's [65536, 256] x [256, 256] fp32 linears
    (cuBLAS's SIMT GEMM, a 4-column grid of tiles) read the 67 MB activation from DRAM once per
    column of tiles, the L2 being smaller: ncu counts 333 MB where prof counts the inputs read and
    the output written once, 134 MB (0.40). prof's bytes are the algorithm's, the roofline's."""
    rows = [(r["grid"], f.bytes, moved) for r, f, moved, _ in measured("nerf", "default", "ktu_h200")
            if r["dir"] == "fprop" and f.bytes == 65536 * 256 * 4 * 2 + 256 * 256 * 4 + 256 * 4]
    assert len(rows) == 6 and all(grid == [256, 4, 1] for grid, _, _ in rows)
    assert all(0.40 <= nb / moved <= 0.41 for _, nb, moved in rows)


def test_cumprods_backward_kernel_by_kernel():
    """The transmittance's cumprod over [1024, 65] fp32 (no zero in it) backward as PyTorch runs
    it, reversed_cumsum(dY * output).div(input): the product, the zero test and its any(), the
    flip, the scan, the flip back, the division; each within 0.5-1.0 of ncu's bytes (all na before)."""
    n = 1024 * 65
    rows = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("nerf", "default", "ktu_h200")
            if r["op"] == "cumprod" and r["dir"] == "bprop"]
    assert [r[:3] for r in rows] == [
        ("vectorized_elementwise_kernel", n, 12 * n), ("vectorized_elementwise_kernel", n, 5 * n),
        ("reduce_kernel", n - 1, n + 1), ("index_elementwise_kernel", 0, 8 * n),
        ("tensor_kernel_scan_innermost_dim", n, 8 * n), ("index_elementwise_kernel", 0, 8 * n),
        ("vectorized_elementwise_kernel", n, 12 * n)]
    assert all(0.5 <= nb / moved <= 1.0 for *_, nb, moved in rows)
