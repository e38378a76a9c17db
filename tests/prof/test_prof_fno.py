"""A Fourier neural operator's step on an H200 (ktn_h200_*: benchmarks/pricing_coverage.py's fno,
captured at stop 52 before any change for it) against Nsight Compute: cuFFT's passes, the complex
einsum's copies and conjugates, complex gradients' fills, accumulations and an assignment's
backward, kernel by kernel. Every kernel but the Adam step's (fp32 and complex64 parameters: the
marker has one numel for both dtype groups) carries FLOPs and bytes."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402


@pytest.mark.parametrize("mode", ["default", "plain"])
def test_every_fft_and_complex_kernel_priced_near_ncus_bytes(mode):
    """Every kernel of 1 MB or more that is not the optimizer's carries bytes within 0.5-2x of
    ncu's, median within 0.9-1.1 (fno's were 0 for every FFT pass and complex helper: median
    0.499, 48% within, with markers; from ranges 31%); the FFT passes and complex kernels none na."""
    rows = [(r, f, moved) for r, f, moved, _ in measured("fno", mode, "ktn_h200")]
    assert len(rows) == 273
    step = [r for r, f, _ in rows if (f.flops is None or not f.bytes) and "multi_tensor_apply" not in r["kShortName"]]
    big = sorted(f.bytes / moved for r, f, moved in rows if moved >= 1 << 20 and "multi_tensor_apply" not in r["kShortName"])
    inside = sum(0.5 <= x <= 2 for x in big) / len(big)
    # Left: the head's split-K reduce after an addmm whose partials cuBLAS's grid does not state.
    assert [r["kShortName"] for r in step] == ["splitKreduce_kernel"]
    assert inside >= 0.99 and 0.9 <= big[len(big) // 2] <= 1.1


def test_the_einsums_copies_and_conjugates_take_their_operands_sizes():
    """The spectral mixing einsum("bixy,ioxy->boxy") of a [16, 32, 12, 12] slice and [32, 32, 12, 12]
    weights, complex64: forward both operands copied into the products' index order (the
    contiguous weights too: 2,359,296 bytes, ncu 2,371,840), the batched CGEMM at 8 FLOPs a
    multiply-add; backward dY copied for each product, the weights' conjugate materialised (1 FLOP an
    element), the weights' gradient copied back to their layout."""
    rows = measured("fno", "default", "ktn_h200")
    einsum = [(r["dir"], r["kShortName"][:12], f.flops, f.bytes) for r, f, _, _ in rows[5:8] + rows[114:120]]
    slice_, weights = 16 * 32 * 144, 32 * 32 * 144
    gemm = ("sm80_xmma_ge", 8 * 144 * 16 * 32 * 32, (slice_ + weights + slice_) * 8)
    assert einsum == [("fprop", "elementwise_", 0, 2 * slice_ * 8), ("fprop", "elementwise_", 0, 2 * weights * 8),
                      ("fprop",) + gemm,
                      ("bprop", "elementwise_", 0, 2 * slice_ * 8), ("bprop",) + gemm,
                      ("bprop", "elementwise_", weights, 2 * weights * 8), ("bprop", "elementwise_", 0, 2 * slice_ * 8),
                      ("bprop",) + gemm, ("bprop", "elementwise_", 0, 2 * weights * 8)]


def test_complex_gradients_fills_accumulations_and_an_assignments_backward():
    """Complex gradients take the parts real ones do: the slice x_ft[:, :, -12:, :12]'s backward
    zero-fills the whole [16, 32, 64, 33] complex64 gradient (8,650,752 bytes; ncu 8,655,616), the
    engine adds the two slices' gradients (1,081,344 adds, both read, the sum written); the
    assignment out[:, :, -12:, :12] = einsum(...)'s backward clones dY's region (the value's
    gradient), zero-fills the region and copies it into out's gradient."""
    rows = measured("fno", "default", "ktn_h200")
    n, region = 16 * 32 * 64 * 33, 16 * 32 * 144
    got = {i: (rows[i][1].flops, rows[i][1].bytes) for i in (111, 112, 113, 122, 135)}
    assert got == {111: (0, 2 * region * 8), 112: (0, region * 8), 113: (0, 2 * region * 8),
                   122: (0, n * 8), 135: (n, 3 * n * 8)}
    assert 1.0 <= rows[122][2] / (n * 8) < 1.001
