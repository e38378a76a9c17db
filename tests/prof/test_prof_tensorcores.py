"""The Tensor Core rule on real kernel names, Volta through Blackwell, and the tc column."""
from __future__ import annotations

import pytest

from pyprof.kernel_names import MMA, NONE, RULES, SIMT, classify, kernel_dtype, leading_helper, trailing_helper
from test_prof_helpers import analyse, described, kernels, tensor

NAMES = [
    # Volta / Turing cuBLAS and cuDNN: MMA shape digits
    ("volta_h884gemm_64x64_ldg8_nn", MMA, "float16"),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", MMA, "float16"),
    ("turing_fp16_s1688gemm_fp16_256x128_ldg8_f2f_tn", MMA, "float16"),
    ("volta_s884cudnn_fp16_128x128_ldg8_wgrad_idx_exp_interior_nhwc_nt", MMA, "float16"),
    ("turing_fp16_s1688cudnn_fp16_256x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", MMA, "float16"),
    # Ampere
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn", MMA, "float16"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_nn", MMA, "bfloat16"),
    ("ampere_int8_i16832gemm_int8_256x128_ldg16_stages_64x3_nt", MMA, "int8"),
    ("ampere_tf32_s1688gemm_tf32_128x128_ldg8_stages_32x3_nn", MMA, "float32"),
    ("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
     MMA, "bfloat16"),
    ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8",
     MMA, "float32"),
    ("sm86_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x16",
     MMA, "float16"),
    # FFMA xmma: a plain FP32 GEMM on CUDA cores despite the xmma prefix
    # f32 operands (`_f32f32_`): bytes of a GEMM priced from its aten range alone need them.
    ("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel_trt",
     SIMT, "float32"),
    ("sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize128x128x8_stage3_warpsize2x2x1_g1_ffma",
     SIMT, "float32"),
    # CUTLASS: operator class in the name, often only inside the template arguments
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_relu_f16_256x128_32x3_nn_align8>(Params)", MMA, "float16"),
    # TF32 on fp32 operands, no 16-bit token (H100, an fp32 mm with allow_tf32: tests/data/fixture_plain)
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(T1::Params)", MMA, "float32"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_d884gemm_64x64_16x4_nn_align1>(Params)", MMA, "float64"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nn_align1>(Params)", SIMT, "float32"),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma",
     MMA, "bfloat16"),
    ("void cutlass::device_kernel<cutlass3x_sm100_tensorop_s128x256x16gemm_f16_f16_f32_void_f16_128x256x64_1x1x1_0_tnn_align8_1sm>(Params)",
     MMA, "float16"),
    # Hopper cuBLAS and cuDNN
    ("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_TNT", MMA, "bfloat16"),  # t: bf16 (H100 ground truth)
    ("nvjet_sm90_hsh_192x128_64x4_1x2_h_bz_coopB_NNN", MMA, "float16"),
    ("nvjet_sm90_sss_128x128_64x4_1x2_h_bz_NNN", MMA, None),  # letters not confirmed: no dtype claimed
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     MMA, "bfloat16"),
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4", SIMT, "float32"),
    # CUDA-core GEMMs and convolutions
    ("ampere_sgemm_128x64_nn", SIMT, "float32"),
    ("volta_sgemm_64x32_sliced1x4_tn", SIMT, "float32"),
    ("maxwell_dgemm_64x64_nt", SIMT, "float64"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(...)", SIMT, None),
    ("void gemmSN_TN_kernel<float, 128, 16, 2, 4, 8, 9, false>(...)", SIMT, None),
    ("void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(...)", SIMT, "float32"),
    # ... in bf16 (ShuffleNet's stem under autocast, H100): cuDNN's `__nv_bfloat16` first, not `sgemm`, says it.
    ("void implicit_convolve_sgemm<__nv_bfloat16, __nv_bfloat16, (int)1024, (int)5, (int)5, (int)3, (int)3, (int)3, "
     "(int)1, (bool)0, (bool)0, (bool)1>(int, int, int, const T1 *, int, T1 *, const T1 *, kernel_conv_params)", SIMT,
     "bfloat16"),
    ("void cudnn::detail::dgrad_engine<float, 128, 6, 7, 3, 3, 5, false>(...)", SIMT, None),
    ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(...)", SIMT, None),
    ("void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>(...)", SIMT, None),
    # cuDNN's direct (CUDA-core) depthwise and grouped convolutions on H100 (coverage capture,
    # benchmarks/pricing_coverage.py): the names carry nothing but the pass and the layout
    ("conv2d_c1_k1_nhwc_specialized", SIMT, None),
    ("dgrad2d_c1_k1_nchw_shmem_tiling", SIMT, None),
    ("wgrad2d_shmem_tiling", SIMT, None),
    ("wgrad2d_c1_k1_nhwc", SIMT, None),
    # Attention
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::half_t>, false>(Params)",
     MMA, "float16"),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", MMA, None),
    ("fmha_cutlassF_f16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", MMA, "float16"),
    # With dropout: an attention kernel, not a dropout helper
    ("fmha_cutlassB_f32_aligned_64x64_k32_dropout_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<...>::Params)",
     MMA, None),
    ("void at::native::<unnamed>::fused_dropout_kernel_vec<float, float, unsigned int, (int)1, (int)4, bool>(...)",
     NONE, None),
    ("void cudnn::dropout_apply_mask<float, float, (int)4>(T2, T1 *, const T1 *, long, long, const unsigned int *)",
     NONE, None),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_kernel0_0", MMA, "float16"),
    # Helpers of matrix ops and kernels that never do MMA work, whatever their dtype
    ("void splitKreduce_kernel<32, 16, int, __half, __half, float, __half, true, false, false>(...)", NONE, "float16"),
    ("void nchwToNhwcKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>(...)", NONE, None),
    # cuDNN's FFT convolution: its transforms and filter flip no matrix kernel, its complex GEMM one
    # (of complex64 operands: cf32)
    ("void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>(float2 *, const T1 *, int)", NONE, None),
    ("void fft2d_c2r_32x32<float, (bool)0, (bool)0, (unsigned int)0, (bool)0, (bool)0>(T1 *, const float2 *)", NONE, None),
    ("void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)", NONE, None),
    ("sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_execute_kernel__5x"
     "_cublas", SIMT, "complex64"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(...), ...>(...)", NONE, None),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::Half, float, false>(...)", NONE, None),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, ...>>(...)", NONE, None),
    ("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, Epilogue>(...)", NONE, None),
    ("flash_bwd_dot_do_o_kernel", NONE, None),
    ("void cudnn::fusion::compute_dot_do_o_specialized<(bool)0, (int)64, __nv_bfloat16>(...)", NONE, None),
    ("void cudnn::fusion::convert_dq_to_16bits<(int)64, __nv_bfloat16>(...)", NONE, None),
    ("void cudnn::fusion::fmha_reduce_head<(bool)1>(const void *, void *, unsigned int)", NONE, None),
    ("void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(...)", NONE, None),
    ("void cudnn::engines_precompiled::scalePackedTensor_kernel<float, float>(long, T1 *, T2)", NONE, None),
    ("void wgrad2d_grouped_direct_kernel<float, float, float, float, 5, 5>(...)", SIMT, None),
    # cuDNN helpers in examples/resnet.sqlite (fp16 AMP, channels_last convolutions on the H100)
    ("void nhwcAddPaddingKernel<__half, __half, float, (bool)1, (cudnnKernelDataType_t)0>(int, int, int, int, int, "
     "int, int, int, const T1 *, T2 *, int, int, int, int, T3, T3, cudnn::reduced_divisor, cudnn::reduced_divisor, "
     "cudnn::reduced_divisor)", NONE, "float16"),
    ("void cask_plugin__5x_cudnn::xmma__5x_cudnn::init_device_workspace_kernel<xmma__5x_cudnn::implicit_gemm::"
     "wgrad_indexed::Warp_specialized_params<xmma__5x_cudnn::Grid_constant_params>>(T1, bool)", NONE, None),
    ("void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::reduction::kernel::ReduceSplitK<cutlass__5x_cudnn::"
     "MatrixShape<(int)4, (int)256>, cutlass__5x_cudnn::epilogue::thread::LinearCombination<cutlass__5x_cudnn::"
     "half_t, (int)8, float, float>>>(T1::Params)", NONE, None),
    ("void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816dgrad_optimized_f16_64x128_64x3_nhwc_align8>"
     "(T1::Params)", MMA, "float16"),
    ("sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_"
     "execute_segment_k_on_kernel__5x_cudnn", MMA, "float16"),
    # ... and its split-K pass, which sums the partial products (Nsight Compute: no MMA ops, 0.1%
    # of the main kernel's FLOPs in the fp32 case of tests/data/tc_ground_truth.csv)
    ("sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1_"
     "execute_split_k_kernel__5x_cudnn", NONE, "float16"),
    # ... and the reductions that finish cuDNN's split weight gradients, its layout transform
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<float, __half>(void *, const void *, T1, int, int)", NONE, "float16"),
    ("wgrad2d_c1_k1_nhwc_reduce", NONE, None),
    ("void tensorTransformGeneric<__nv_bfloat16, __nv_bfloat16, float, (bool)1, (bool)0, (bool)0, "
     "(cudnnKernelDataType_t)0>(cudnnTensorTransformStruct, tensorTransformParams)", NONE, "bfloat16"),
    ("void scal_kernel<float, float, (int)1, (bool)1, (int)6, (int)5, (int)5, (int)3>(cublasTransposeParams<T2>, "
     "const T1 *, T1 *, const T2 *)", NONE, None),
    ("void cublasLt::epilogue::impl::globalKernel<(int)8, (int)32, float, float, float, (bool)1, (bool)1, (int)1>(...)",
     NONE, None),
    ("at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long *, long *)", NONE, None),
    ("triton_poi_fused_add_mul_0", NONE, None),
    ("triton_red_fused_sum_1", NONE, None),
    # Unknown: the name says nothing
    ("my_custom_kernel", None, None),
    ("triton_tem_fused_mm_0", None, None),
]


@pytest.mark.parametrize("name,verdict,dtype", NAMES)
def test_classify_real_names(name, verdict, dtype):
    assert classify(name) == verdict
    if verdict in (MMA, SIMT):
        assert kernel_dtype(name) == dtype


def test_every_rule_has_a_reason():
    assert all(len(r) == 3 and r[2] for r in RULES)


def _tc(m, name):
    facts, summary = analyse(kernels(m, [name]))
    return facts[0].tc, summary


def test_tc_column_values():
    a, b = tensor(16, 32, dtype="float16"), tensor(32, 8, dtype="float16")
    mm = described("torch", "mm", a, b)
    assert _tc(mm, "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_tn")[0] is True
    assert _tc(mm, "ampere_sgemm_128x64_nn")[0] is False
    assert _tc(mm, "splitKreduce_kernel")[0] is None
    relu = described("torch.nn.functional", "relu", a)
    assert _tc(relu, "void at::native::vectorized_elementwise_kernel<4>(...)")[0] is None


def test_unknown_kernel_of_a_matrix_op_is_dash_and_counted():
    mm = described("torch", "mm", tensor(16, 32), tensor(32, 8))
    tc, summary = _tc(mm, "my_custom_kernel")
    assert tc is None and sum(summary.warnings["kernel not recognised (tc -, work na)"].values()) == 1


def test_triton_template_gemm_decided_by_dtype():
    a, a_t = tensor(16, 32, dtype="bfloat16"), tensor(32, 16, dtype="bfloat16", strides=[1, 32])
    assert _tc(described("torch", "mm", a, a_t), "triton_tem_fused_mm_0")[0] is True
    a32, a32_t = tensor(16, 32), tensor(32, 16, strides=[1, 32])
    assert _tc(described("torch", "mm", a32, a32_t), "triton_tem_fused_mm_0")[0] is None


def test_autocast_kernel_dtype_wins_over_marker_dtype():
    """linear with fp32 tensors under bf16 autocast: the marker says fp32, the kernel ran bf16,
    so bytes use 2-byte elements and the peak is the BF16 Tensor Core one."""
    x, w = tensor(64, 128), tensor(256, 128)
    m = described("torch.nn.functional", "linear", x, w)
    facts, _ = analyse(kernels(m, ["ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_nn"]))
    assert facts[0].dtype == "bfloat16" and facts[0].path == "fp16_tc"
    assert facts[0].bytes == 2 * (64 * 128 + 256 * 128 + 64 * 256)
    assert facts[0].flops == 2 * 64 * 128 * 256


def test_fp8_and_int8_gemm_paths():
    a, a_t = tensor(16, 32, dtype="float8_e4m3fn"), tensor(32, 16, dtype="float8_e4m3fn", strides=[1, 32])
    facts, _ = analyse(kernels(described("torch", "mm", a, a_t),
                               ["sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_kernel"]))
    assert facts[0].tc is True and facts[0].dtype == "float8_e4m3fn"
    assert facts[0].path is None  # no dense FP8 figure in the table: %peak na, not a guess
    i8, i8_t = tensor(16, 32, dtype="int8"), tensor(32, 16, dtype="int8", strides=[1, 32])
    facts, _ = analyse(kernels(described("torch", "mm", i8, i8_t), ["ampere_int8_i16832gemm_int8_256x128_ldg16_stages_64x3_nt"]))
    assert facts[0].path == "int8_tc"


def test_name_dtype_does_not_replace_a_16_bit_marker_dtype():
    """cuDNN SDPA kernels read `f16` for bf16 inputs (H100 ground truth): the marker's bf16 stays."""
    q = tensor(2, 4, 64, 32, dtype="bfloat16")
    m = described("torch.nn.functional", "scaled_dot_product_attention", q, q, q)
    facts, _ = analyse(kernels(m, ["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"]))
    assert facts[0].dtype == "bfloat16" and facts[0].path == "fp16_tc"


def test_trailing_helpers_and_leading_helpers() -> None:
    """Where a library helper sits beside its call's matrix kernel, as parse splits a CUDA graph
    replay's kernels (docs/compiled.md): split-K reductions after it, attention backward's
    dot(dO, O) before it, cuBLASLt's separate epilogue after it; other helpers say nothing."""
    names = {"void cublasLt::splitKreduce_kernel<32, 16, int, float>(Params)": (True, False),
             "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_execute_split_k_kernel__5x_cublas": (True, False),
             "void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, false>(int)": (True, False),
             "void cudnn::fusion::compute_dot_do_o_specialized<(bool)1, (int)64>(const void *)": (False, True),
             "void flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits>(Params)": (False, True),
             "void cudnn::fusion::convert_dq_to_16bits<(bool)1>(const void *, void *)": (False, False),
             # cuDNN's FFT convolution: the filter flipped and the operands transformed before its
             # complex GEMM, the result's inverse transform after it
             "void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)": (False, True),
             "void fft2d_r2c_32x32<float, (bool)0, (unsigned int)5, (bool)0>(float2 *, const T1 *)": (False, True),
             "void fft2d_c2r_32x32<float, (bool)0, (bool)0, (unsigned int)0, (bool)0, (bool)0>(T1 *)": (True, False),
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)": (False, False),
             None: (False, False)}
    assert {n: (trailing_helper(n), leading_helper(n)) for n in names} == names
