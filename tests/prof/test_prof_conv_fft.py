"""cuDNN's FFT convolution path kernel by kernel (pricing/conv_parts.py: fft_stage, fft_operand,
fft_work): what a name and a launch say, and where they do not say it. The path on a real
capture against Nsight Compute: tests/prof/test_prof_parts.py (stn, ktx_h200)."""
from __future__ import annotations

from pyprof.prof.pricing.conv_parts import FFT_PATH, fft_frequencies, fft_operand, fft_stage, fft_work

R2C = ("void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>(float2 *, const T1 *, int, int, int, int, int,"
       " int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)")
C2R = ("void fft2d_c2r_32x32<float, (bool)0, (bool)0, (unsigned int)0, (bool)0, (bool)0>(T1 *, const float2 *, int, int,"
       " int, int, int, int, int, int, int, float, float, cudnn::reduced_divisor, bool, T1 *, T1 *, int2,"
       " cudnnActivationStruct, int, int)")
CGEMM = "sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x_cublas"
X, W, Y = [64, 16, 30, 30], [32, 16, 5, 5], [64, 32, 26, 26]


def test_fft_stage_reads_square_fp32_transforms_the_gemm_and_the_flip():
    assert fft_stage(R2C) == ("r2c", 32) and fft_stage(C2R) == ("c2r", 32)
    assert fft_stage(CGEMM) == ("cgemm",) and fft_stage("void flip_filter<float, float>(T2 *, const T1 *, int)") == ("flip",)
    assert fft_stage(R2C.replace("<float,", "<__half,")) is None  # not measured
    assert fft_stage(R2C.replace("32x32", "16x32")) is None
    assert fft_stage("void fft2d_r2c_32x32_other(float *)") is None and fft_stage(None) is None
    assert fft_frequencies(("r2c", 32)) == 32 * 17
    assert all(FFT_PATH.search(n) for n in (R2C, C2R, CGEMM, "flip_filter"))


def test_fft_transforms_take_the_tensor_whose_images_their_launch_covers():
    stage = ("r2c", 32)
    assert [fft_operand(stage, [g, 1, 1], [512, 1, 1], (X, W, Y)) for g in (32, 64, 128)] == [1, 0, 2]
    assert fft_operand(stage, [33, 1, 1], [512, 1, 1], (X, W, Y)) is None  # no tensor has those images
    # 1000 images, 16 a block: the last block part full
    assert fft_operand(stage, [63, 1, 1], [512, 1, 1], ([40, 25, 30, 30], W, Y)) == 0
    # N == K: the input's and the weight's images are as many, of other sizes: which is not known
    assert fft_operand(stage, [32, 1, 1], [512, 1, 1], ([32, 16, 30, 30], W, [32, 32, 26, 26])) is None
    assert fft_operand(stage, [32, 1, 1], [16, 1, 1], (X, W, Y)) is None  # a block narrower than a row
    assert fft_operand(stage, None, [512, 1, 1], (X, W, Y)) is None


def test_fft_work_each_kernel_its_own():
    spectrum = 32 * 17 * 8
    fft = int(2.5 * 1024 * 10)
    assert fft_work(fft_stage(R2C), [64, 1, 1], [512, 1, 1], X, W, Y, None) == (1024 * fft, 64 * 16 * 900 * 4 + 1024 * spectrum)
    assert fft_work(fft_stage(C2R), [128, 1, 1], [512, 1, 1], X, W, Y, None) == (2048 * fft, 64 * 32 * 676 * 4 + 2048 * spectrum)
    assert fft_work(("cgemm",), [2, 1, 544], [128, 1, 1], X, W, Y, 544) == (
        8 * 544 * 64 * 16 * 32, 544 * (64 * 16 + 32 * 16 + 64 * 32) * 8)
    assert fft_work(("flip",), [32, 16, 1], [5, 5, 1], X, W, Y, None) == (0, 2 * 32 * 16 * 25 * 4)
    # the GEMM without the call's transforms before it, or at other frequencies: na
    assert fft_work(("cgemm",), [2, 1, 544], [128, 1, 1], X, W, Y, None) is None
    assert fft_work(("cgemm",), [2, 1, 272], [128, 1, 1], X, W, Y, 544) is None
    assert fft_work(fft_stage(R2C), [64, 1, 1], [512, 1, 1], X, W, None, None) is None  # shapes not known
    assert fft_work(fft_stage(R2C), [64, 1, 1], [512, 1, 1], [64, 16, 30], W, Y, None) is None  # not 2-D
