"""A compiled graph's library calls that launch several kernels, each kernel its own work: real
records of the H200 coverage captures under torch.compile (benchmarks/coverage_modes.sh,
benchmarks/results/coverage_h200_records/compiled/), priced as eager calls of the same ops are."""
from __future__ import annotations

import lzma
import os

from pyprof.prof.io.reader import records
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")


def priced(name: str) -> list[tuple]:
    """(kernel, FLOPs, bytes) of each kernel record of a fixture, in order."""
    path = os.path.join(DATA, name)
    with (lzma.open(path, "rb") if name.endswith(".xz") else open(path, "rb")) as stream:
        return [(rec["kShortName"], f.flops, f.bytes) for rec, f, _ in analysed(records(stream, Tally()), Tally())]


def test_embedding_bag_backward_kernels_each_run_their_stage() -> None:
    """The DLRM-style recommender's EmbeddingBag (50,000 x 64 fp32, sum, 1,022 indices in 256
    bags) backward as a compiled graph's fallback call: thirteen kernels, each the stage of
    nn.embedding_bag_cost's dense backward its name holds, dWeight's zero fill its part, cub's
    tile initialisations what their launches state; the FLOPs are compute_grad_weight_bags'
    adds, one per gathered element."""
    got = priced("compiled_embedding_bag_bwd.jsonl.xz")
    n, d = 1022, 64
    assert [k for k, _, _ in got] == [
        "elementwise_kernel", "elementwise_kernel_with_index", "DeviceRadixSortSingleTileKernel",
        "vectorized_elementwise_kernel", "DeviceCompactInitKernel", "DeviceUniqueByKeySweepKernel",
        "krn_partials_per_segment", "DeviceScanInitKernel", "DeviceScanKernel", "compute_num_of_partial_segments",
        "krn_partial_segment_offset", "compute_grad_weight_bags", "sum_and_scatter"]
    assert all(flops is not None and nbytes for _, flops, nbytes in got)
    assert sum(flops for _, flops, _ in got) == n * d
    by_name = {k: (flops, nbytes) for k, flops, nbytes in got}
    assert by_name["elementwise_kernel"] == (0, 2 * 256 * d * 4)  # dOut made contiguous
    assert by_name["vectorized_elementwise_kernel"] == (0, 50000 * d * 4)  # dWeight zeroed
    assert by_name["DeviceRadixSortSingleTileKernel"] == (0, 4 * n * 8)
    assert by_name["sum_and_scatter"] == (0, n * d * 4 + n * d * 4 + 2 * n * 8)


def test_depthwise_weight_gradient_reduction() -> None:
    """MnasNet's 288-channel 5x5 depthwise convolution backward (fp16, channels-last) in a
    compiled graph: cuDNN's data gradient, its depthwise weight gradient (grid 9 x 8 x 6: 48 fp32
    partials of 9 x 32 channels x 25 taps) and wgrad2d_c1_k1_nhwc_reduce summing them: 47 adds an
    element of the 288 x 25 gradient, the partials read, the gradient written in fp16."""
    got = priced("compiled_depthwise_wgrad.jsonl")
    assert [k for k, _, _ in got] == ["dgrad2d_c1_k1_nhwc_specialized", "wgrad2d_c1_k1_nhwc", "wgrad2d_c1_k1_nhwc_reduce"]
    out = 288 * 25
    assert got[2][1:] == (47 * out, 48 * out * 4 + out * 2)
    assert got[0][1] == got[1][1] == 2 * 8 * 288 * 4 * 4 * 25  # each gradient one forward's MACs, x2


def test_grouped_weight_gradient_one_cutlass_kernel_a_group() -> None:
    """RegNetY-400MF's 6-group 48-channel 3x3 stride-2 convolution backward (tf32, x 8x48x64x64)
    in a compiled graph: cuDNN's data gradient, then per group its layout conversions, a CUTLASS
    weight-gradient kernel of no group mode (grid z 13: 13 fp32 partials of the group's 8 x 72
    gradient, 29,952 bytes, as ncu measured on the eager step) and the ReduceSplitK summing them.
    Each group kernel carries a sixth of the weight gradient's FLOPs, which add up to one
    forward's, as the data gradient's do; every kernel of the call is priced."""
    got = priced("compiled_grouped_wgrad.jsonl.xz")
    forward = 2 * 8 * 48 * 32 * 32 * 8 * 9
    assert all(flops is not None and nbytes for _, flops, nbytes in got)
    assert [(k, f) for k, f, _ in got if k.startswith("sm80_xmma_dgrad")] == [(got[2][0], forward)]
    groups = [(f, b) for k, f, b in got if k == "Kernel" and f > 10000]
    assert groups == [(forward // 6, (8 * 48 * 64 * 64 + 8 * 48 * 32 * 32) // 6 * 4 + 13 * 576 * 4)] * 6
    assert [(f, b) for k, f, b in got if k == "Kernel" and f <= 10000] == [(12 * 576, 13 * 576 * 4 + 576 * 4)] * 6


def test_winograd_weight_gradient_in_a_compiled_graph() -> None:
    """SqueezeNet 1.1's 8x64x7x7 input, 256x64x3x3 weight convolution backward (fp32) in a CUDA
    graph's replay (H200, reduce-overhead): dX zeroed, cuDNN's data gradient, then the weight
    gradient's Winograd path, each kernel priced as in the eager call of
    test_prof_conv_winograd.py, whose bytes are what Nsight Compute measured: Data reads X and
    writes 36 x 64 x 32 fp32 tiles, Delta reads dY and writes 36 x 256 x 32, the GEMM runs its
    36 products (the convolution's 115,605,504 FLOPs kept for whole-call sums) and Output writes
    dW from them."""
    path = os.path.join(DATA, "compiled_winograd_wgrad.jsonl.xz")
    with lzma.open(path, "rb") as stream:
        got = [(rec["kShortName"], f.flops, f.bytes, f.call_work) for rec, f, _ in analysed(records(stream, Tally()), Tally())]
    tiles_read = 36 * (256 + 64) * 32 * 4
    assert [g[:3] for g in got] == [
        ("scalePackedTensor_kernel", 0, 8 * 64 * 49 * 4), ("dgrad_engine", 115605504, got[1][2]),
        ("winogradWgradData4x4", 0, 395264), ("winogradWgradDelta4x4", 0, 1581056),
        (got[4][0], 2 * 36 * 256 * 64 * 32, tiles_read + 2359296), ("winogradWgradOutput4x4", 0, 2949120)]
    assert got[4][3] == (115605504, tiles_read + 2359296)


def test_cudnn_attention_seed_unpack_in_a_compiled_graph() -> None:
    """The encoder-decoder's causal self-attention with dropout 0.1 (bf16, q 8x8x64x32) as a
    compiled graph's cuDNN attention call: cuDNN first unpacks its Philox seed and offset (two
    int64 written, no FLOPs), the part an eager call's marker gives it, read from the node's
    dropout_p (its sixth argument, F.scaled_dot_product_attention's fifth); the attention kernel
    carries the call's FLOPs."""
    got = priced("compiled_cudnn_attention_dropout.jsonl.xz")
    assert got[0] == ("unpack_cudnn", 0, 16)
    assert got[1][0].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") and got[1][1] > 0 and got[1][2] > 0


def test_dynamic_shape_library_calls_take_their_sizes_from_their_op_ranges() -> None:
    """A top-2 MoE under torch.compile (H200, pricing_coverage's `moe`; its experts' graph
    compiled for dynamic rows, 124 as its hint): each call's rows differ (125 here; 129 in the
    backward), and the table holds 124. pyprof's op ranges inside such a graph's call carry the
    call's sizes, which replace the hinted ones: the up and down projections' addmm over 125 rows,
    dX of 129 rows; the head's calls, whose sizes are the hint's, as they were."""
    got = priced("compiled_moe_dynamic.jsonl.xz")
    assert [flops for _, flops, _ in got] == [2 * 125 * 256 * 512, 2 * 125 * 512 * 256, 2 * 4 * 10 * 256,
                                              2 * 16 * 4 * 256, 2 * 129 * 256 * 512]
    # bf16 under autocast: operands read, the output written once; addmm's bias read too
    assert got[0][2] == 2 * (125 * 256 + 256 * 512 + 125 * 512 + 512)


def test_fft_convolution_in_a_compiled_graph() -> None:
    """The spatial transformer's 16 -> 32 channel 5x5 convolution (fp32, 64 images of 30x30) in a
    compiled graph (H200, pricing_coverage's `stn` under torch.compile): cuDNN's FFT path for the
    forward and, in four rounds, the data gradient, then wgrad_alg0_engine for the weight's. Each
    kernel priced as in the eager call (test_prof_parts.py's, against Nsight Compute); the
    convolution's FLOPs for whole-call sums once for each result, on its first inverse transform:
    the forward's output, dX, and the weight gradient's own kernel (it was na: the transforms had
    taken the node's matrix-kernel parts)."""
    path = os.path.join(DATA, "compiled_fft_conv.jsonl.xz")
    with lzma.open(path, "rb") as stream:
        got = [(rec["kShortName"], f.flops, f.bytes, f.whole_work()[0])
               for rec, f, _ in analysed(records(stream, Tally()), Tally())]
    x, w, y = 64 * 16 * 30 * 30, 32 * 16 * 5 * 5, 64 * 32 * 26 * 26
    spectrum, fft = 544 * 8, int(2.5 * 1024 * 10)
    cgemm_name = ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_{}_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_"
                  "execute_kernel__5x_cublas")
    cgemm_work = (8 * 544 * 64 * 16 * 32, 544 * (64 * 16 + 32 * 16 + 64 * 32) * 8, 0)
    conv = 2 * 64 * 32 * 26 * 26 * 16 * 25
    r2c_w = ("fft2d_r2c_32x32", 512 * fft, w * 4 + 512 * spectrum, 0)
    r2c_dy = ("fft2d_r2c_32x32", 2048 * fft, y * 4 + 2048 * spectrum, 0)
    c2r_dx = ("fft2d_c2r_32x32", 1024 * fft, x * 4 + 1024 * spectrum)
    forward = [("flip_filter", 0, 2 * w * 4, 0), r2c_w, ("fft2d_r2c_32x32", 1024 * fft, x * 4 + 1024 * spectrum, 0),
               (cgemm_name.format("tn"),) + cgemm_work, ("fft2d_c2r_32x32", 2048 * fft, y * 4 + 2048 * spectrum, conv)]
    data_grad = [r2c_w, r2c_dy, (cgemm_name.format("nt"),) + cgemm_work, c2r_dx + (conv,)] + \
        [r2c_dy, (cgemm_name.format("nt"),) + cgemm_work, c2r_dx + (0,)] * 3
    assert got == forward + data_grad + [("wgrad_alg0_engine", conv, (x + y + w) * 4, conv)]


def test_a_grouped_convolution_run_a_group_at_a_time_in_a_compiled_graph() -> None:
    """StyleGAN2's modulated convolution (16 samples' 128 x 128 x 3 x 3 weights as one conv2d of
    groups 16 at 4 x 4, fp16) in a compiled graph (H200, pricing_coverage's `stylegan` under
    torch.compile): cuDNN converts each group's input and weight, runs the group's CUTLASS fprop
    and converts its output back, sixteen times. Each fprop launch a group's FLOPs and operands
    (matrix_chain.group_launch, as for an eager call); every kernel of the call priced. The first
    launch had carried all sixteen groups (4x what ncu counted its Tensor Cores doing), the
    other fifteen na."""
    got = priced("compiled_group_launches.jsonl.xz")
    group = 2 * 128 * 16 * 128 * 9
    assert [(f, b) for k, f, b in got if k == "Kernel"] == [(group, (128 * 16 * 2 + 128 * 128 * 9) * 2)] * 16
    assert all(f is not None and b for _, f, b in got) and len(got) == 64
