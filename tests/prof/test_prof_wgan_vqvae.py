"""A WGAN-GP step and a VQ-VAE on an H200 (ktg_h200_*: benchmarks/pricing_coverage.py's wgan_gp
and vqvae, captured at stop 51 before any change for them; the default mode's re-captured after
profiled() began recording op ranges during a create_graph backward) against Nsight Compute."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import cost_of, measured  # noqa: E402

# The VQ-VAE's codebook lookup: 32 x 16 x 16 latents, one index each, into 512 fp32 rows of 64.
N, D, ROWS = 32 * 16 * 16, 64, 512
# The partial segments PyTorch's sorted embedding backward can make (each run of up to 10 dOut
# rows of one index; 819 + 512 = its own bound, compute_grad_weight's grid) and the segments (the
# table's rows), each counted at its most.
PARTIALS, SEGMENTS = N // 10 + ROWS, ROWS


@pytest.mark.parametrize("mode", ["default", "plain", "nsyspt"])
def test_an_embedding_backward_of_many_indices_kernel_by_kernel(mode):
    """More than 3,072 indices: PyTorch sorts them (arange, cub's radix sort on all 64 bits: a
    histogram, its sums and eight onesweep passes), finds the segments and their partials, sums
    each partial's dOut rows (compute_grad_weight: the 524,288 adds, dOut read once, 1.07x ncu's
    bytes) and scatters the partials into dWeight's rows. Every kernel na but the first before
    (which carried the whole node); the same from PyTorch's ranges, whose num_weights (a scalar)
    comes from the forward's weight."""
    rows = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("vqvae", mode, "ktg_h200")
            if r["op"] in ("embedding", "embedding_dense_backward") and r["dir"] == "bprop"]
    names = [r[0] for r in rows]
    assert names[:3] == ["elementwise_kernel_with_index", "DeviceRadixSortHistogramKernel",
                         "DeviceRadixSortExclusiveSumKernel"]
    assert names.count("DeviceRadixSortOnesweepKernel") == 8
    assert all(f is not None and nb for _, f, nb, _ in rows)
    by_name = {r[0]: r[1:3] for r in rows}
    partials = PARTIALS * D * 4
    assert by_name["DeviceRadixSortOnesweepKernel"] == (0, 2 * N * 16 + 256 * 8)
    assert by_name["compute_grad_weight"] == (N * D, N * D * 4 + partials + 2 * N * 8)
    assert by_name["sum_and_scatter"] == (0, SEGMENTS * D * 4 + partials + 2 * N * 8)
    assert sum(r[1] for r in rows) == N * D
    grad_weight = next(nb / moved for name, _, nb, moved in rows if name == "compute_grad_weight")
    assert 1.0 <= grad_weight <= 1.1


def test_few_indices_keep_one_scatter_kernel():
    """3,072 indices or fewer run embedding_backward_feature_kernel alone after the zero fill (a
    part): one stage, the node's cost; scale_grad_by_freq (a count first) and sparse run other
    kernels: no stages."""
    w = {"shape": [512, 64], "dtype": "float32"}
    m = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "embedding",
         "args": [{"shape": [3072], "dtype": "int64"}, w]}
    few = cost_of(m)
    assert few.bwd_stages == (("embedding_backward_feature_kernel", 3072 * 64, 3 * 3072 * 64 * 4, 3072 * 8),)
    assert few.bwd_bytes == sum(few.bwd_stages[0][2:])
    m["args"][0] = {"shape": [3073], "dtype": "int64"}
    stages = cost_of(m).bwd_stages
    assert stages[-2] == ("compute_grad_weight", 3073 * 64, 3073 * 64 * 4, (307 + 512) * 64 * 4 + 2 * 3073 * 8)
    for kw in ({"scale_grad_by_freq": True}, {"sparse": True}):
        m["kwargs"] = kw
        assert cost_of(m).bwd_stages is None, kw


@pytest.mark.parametrize("mode", ["plain", "nsyspt"])
def test_a_convolutions_double_backward_from_pytorchs_ranges(mode):
    """The gradient penalty's backward through the critic's convolutions (aten::
    _convolution_double_backward: ggI with the weight for dY's gradient, ggI with dY, both
    transposed, for the weight's): each of its convolution kernels one forward's FLOPs on the
    convolution's input, weight and output (the first conv: 64 x 64 x 16 x 16 outputs of 3 x 4 x
    4 taps, 2 FLOPs each), two of them read and the third written (0.9-1.0 of ncu's bytes); all na
    before (the inner cudnn_convolution's output shape has no consumer: it defers to the range
    around). The weight-gradient convolution of the 3-channel input ran 620 us for its 0.1 GFLOP."""
    rows = [(r["kShortName"], r["grid"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("wgan_gp", mode, "ktg_h200")
            if r["op"] == "cudnn_convolution" and r["dir"] == "bprop"]
    first = 2 * 64 * 64 * 16 * 16 * 3 * 4 * 4
    elems = 64 * 3 * 32 * 32 + 64 * 3 * 4 * 4 + 64 * 64 * 16 * 16
    assert [r[2:4] for r in rows[:2]] == [(first, elems * 4)] * 2
    assert len(rows) == 8 and all(f and nb for _, _, f, nb, _ in rows)
    assert all(0.9 <= nb / moved <= 1.0 for *_, nb, moved in rows if moved >= 1 << 20)


def test_a_two_norms_backward_kernel_by_kernel():
    """The gradient penalty's ||grad||_2 over [64, 3072] fp32 rows, backward as PyTorch runs it,
    dY * (X / Y).masked_fill_(Y == 0, 0): the division, the zero test of the 64 norms, the fill,
    the product; each within 0.5-2x of ncu's bytes (the last three na before, the first carried
    the node)."""
    n, rows_ = 64 * 3072, 64
    got = [(r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("wgan_gp", "default", "ktg_h200")
           if r["op"] == "norm" and r["dir"] == "bprop"]
    assert [g[:3] for g in got] == [
        ("elementwise_kernel", n, (2 * n + rows_) * 4), ("vectorized_elementwise_kernel", rows_, rows_ * 5),
        ("elementwise_kernel", 0, 2 * n * 4 + rows_), ("elementwise_kernel", n, (2 * n + rows_) * 4)]
    assert all(0.5 <= nb / moved <= 2.0 for *_, nb, moved in got if moved >= 1 << 20)


def test_the_double_backward_with_pyprofs_markers() -> None:
    """The gradient penalty's ConvolutionBackwardBackward0 and LeakyReluBackwardBackward0 with
    pyprof's markers (26% of the step's GPU time, na before): each convolution kernel one forward
    of its convolution (from the first backward's convolution_backward range of the node's seq),
    0.9-1.0 of ncu's bytes; LeakyReLU's its op again and a zero fill, within 1%. Its copies of
    transposed tensors stay na (bytes 0)."""
    rows = [(r["op"], r["kShortName"], f.flops, f.bytes, moved) for r, f, moved, _ in measured("wgan_gp", "default", "ktg_h200")
            if r["op"] in ("ConvolutionBackwardBackward0", "LeakyReluBackwardBackward0")]
    convs = [x for x in rows if x[0] == "ConvolutionBackwardBackward0" and "elementwise" not in x[1]]
    assert len(convs) == 8 and convs[0][2:4] == (2 * 64 * 64 * 16 * 16 * 3 * 4 * 4,
                                                 (64 * 3 * 32 * 32 + 64 * 3 * 4 * 4 + 64 * 64 * 16 * 16) * 4)
    assert all(0.9 <= nb / moved <= 1.0 for *_, nb, moved in convs if moved >= 1 << 20)
    relus = [x for x in rows if x[0] == "LeakyReluBackwardBackward0"]
    assert len(relus) == 6 and all(0.99 <= nb / moved <= 1.01 for *_, nb, moved in relus)
    copies = [x for x in rows if "elementwise" in x[1] and x[0] == "ConvolutionBackwardBackward0"]
    assert copies and all(f is None for _, _, f, _, _ in copies)
