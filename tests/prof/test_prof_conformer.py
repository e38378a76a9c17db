"""A Conformer on an H200 (kty_h200_default: benchmarks/pricing_coverage.py's conformer, bf16
autocast) kernel by kernel against Nsight Compute: nn.MultiheadAttention with a key padding mask
runs scaled_dot_product_attention's math path (the merged float mask's dtype is not the
query's), its pointwise Conv1d reads a transposed input, the loss is kl_div."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402

B, H, L, E = 8, 4, 200, 36  # batch, heads, frames, head width


def rows() -> list:
    return [(r, f, moved) for r, f, moved, _ in measured("conformer", "default", "kty_h200")]


def test_masked_math_attention_each_kernel_its_own():
    """The math path with a float mask: the mask cast to the query's bf16, Q, K, V cast up to
    fp32, Q and Kᵀ scaled, Q·Kᵀ, the mask added, softmax and _safe_softmax's checks, P cast, P·V,
    the output cast back (16 kernels); backward dO cast up, the four products, softmax's backward,
    the scalings and casts back (12). Each was na but the first GEMM, which carried the whole
    formula; now each within 0.93-1.05 of ncu's bytes where it moved 1 MB or more (all()'s reduce
    0.93), and the GEMMs
    each 2·m·n·k."""
    attention = [(r, f, moved) for r, f, moved in rows() if r["op"] == "scaled_dot_product_attention"]
    assert len(attention) == 2 * 16 + 2 * 12
    assert all(f.flops is not None and f.bytes for _, f, _ in attention)
    assert all(0.93 <= f.bytes / moved <= 1.05 for _, f, moved in attention if moved >= 1 << 20)
    gemms = [f.flops for r, f, _ in attention if r["kShortName"].startswith("sm80_xmma_gemm")]
    assert gemms == [2 * B * H * L * L * E] * (2 * 2 + 2 * 4)
    masked_add = [f for r, f, _ in attention if r["dir"] == "fprop" and r["kShortName"] == "elementwise_kernel"][0]
    assert (masked_add.flops, masked_add.bytes) == (B * H * L * L, 2 * B * H * L * L * 4 + B * H * L * 2)


def test_kl_div_and_the_transposed_conv_input_kernel_by_kernel():
    """kl_div(log-probabilities, teacher, batchmean) over [8, 200, 64] fp32: t·x, xlogy(t, t),
    their difference, the sum, the batch divide; backward the divide, -dLoss expanded, times t.
    The pointwise Conv1d's transposed input (autocast's cast keeps its layout) copied contiguous
    before the GEMM and again for the weight gradient (and the second Conv1d's output gradient,
    transposed back, made contiguous). Every one of the Conformer's 384 kernels
    known (84.7% of its GPU time before)."""
    n = B * L * 64
    kl = [(r["dir"], f.flops, f.bytes) for r, f, _ in rows() if r["op"] == "kl_div"]
    assert kl == [("fprop", n, 3 * n * 4), ("fprop", 2 * n, 2 * n * 4), ("fprop", n, 3 * n * 4),
                  ("fprop", n - 1, (n + 1) * 4), ("fprop", 1, 8), ("bprop", 1, 8), ("bprop", n, (n + 1) * 4),
                  ("bprop", n, 3 * n * 4)]
    copies = [(r["dir"], f.bytes) for r, f, _ in rows() if r["op"] == "conv1d" and "direct_copy" in r["kLongName"]
              and r["kShortName"] == "elementwise_kernel"]
    assert copies == [("fprop", 2 * B * 144 * L * 2)] * 2 + [("bprop", 2 * B * 144 * L * 2)] * 4
    assert all(f.flops is not None and f.bytes for _, f, _ in rows())


def test_a_cast_keeps_a_dense_permutation_only():
    """Which strided inputs autocast's cast leaves strided (conv_parts._dense): a transpose's
    dense permutation, not a channel split's slice (ShuffleNet: every other channel block of a
    [8, 116, 28, 28] tensor), which the cast writes contiguous."""
    from pyprof.prof.pricing.conv_parts import _dense

    assert _dense([8, 144, 200], [28800, 1, 144]) and _dense([2, 1, 5], [5, 99, 1])
    assert not _dense([8, 58, 28, 28], [90944, 784, 28, 1]) and not _dense([8, 144, 200], None)
