"""Kernels that ops launch besides their main one, priced from the marker alone: a layer norm's
and a linear's strided tensors made contiguous, softmax's backward as its two kernels, the
memory-efficient attention backward's helpers, cuDNN's dropout seed, and nn.MultiheadAttention's
inference fast path (torch._native_multi_head_attention) as its three matrix kernels. Kernel
names, launches and shapes are those of an H100 capture of benchmarks/pricing_coverage.py's
models (vit_b_16, mha_weights, transformer, transformer_encoder, transformer_encoder_eval)."""
from __future__ import annotations

import pyprof.prof.pricing.ops  # noqa: F401  (fills the op table)
from pyprof.prof.pricing.parts import forward_parts
from pyprof.prof.pricing.registry import Call, lookup
from test_prof_helpers import analyse, described, record, tensor

FN = "torch.nn.functional"
COPY_F32 = ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<"
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() "
            "const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase "
            "&, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
COPY_BF16 = ("void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<"
             "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() "
             "const::[lambda() (instance 12)]::operator ()() const::[lambda(c10::BFloat16) (instance 1)]>("
             "at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
CAST_BF16 = ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda("
             "at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")
LN = ("void at::native::<unnamed>::vectorized_layer_norm_kernel<float, float, (bool)0>(int, T2, const T1 *, "
      "const T1 *, const T1 *, T2 *, T2 *, T1 *)")
LN_DX = ("void at::native::<unnamed>::layer_norm_grad_input_kernel_vectorized<float, float, (bool)0>(const T1 *, "
         "const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)")
LN_DW = ("void at::native::<unnamed>::GammaBetaBackwardCUDAKernelTemplate<float, float, (unsigned int)32, "
         "(unsigned int)32, (unsigned int)256, (bool)0, (bool)0, (bool)0>(long, long, const T1 *, const T1 *, "
         "const T2 *, const T2 *, T1 *, T1 *)")
MUL = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)3>>(int, T2, T3)")
SOFTMAX_BWD = ("void <unnamed>::softmax_warp_backward<float, float, float, (int)7, (bool)0, (bool)0>(T2 *, const T1 *, "
               "const T1 *, int, int, int, const bool *)")
ROW_SUM = ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<"
           "float, at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, "
           "float) (instance 1)]>, unsigned int, float, (int)4, (int)4>>(T3)")
EFFICIENT_BWD = ("fmha_cutlassB_f32_aligned_64x64_k32_dropout_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
                 "cutlass::arch::Sm80, float, (bool)1, (bool)1, (bool)0, (int)64, (int)64, (int)32, (bool)0>::Params)")
CUDNN_SDPA = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"


def call(m: dict, direction: str, *launches: tuple) -> list:
    """The records of one op call: (kernel, grid x, block) per kernel, in launch order."""
    return [record(m, name, direction, grid=[g, 1, 1] if isinstance(g, int) else g, block=b, subSeqId=i)
            for i, (name, g, b) in enumerate(launches)]


def work(records: list) -> list:
    facts, _ = analyse(records)
    return [(f.flops, f.bytes) for f in facts]


def vit_layer_norm() -> dict:
    """vit_b_16's ln_2 under bf16 autocast: its input [2, 197, 768] fp32 stored sequence-first."""
    return described(FN, "layer_norm", tensor(2, 197, 768, strides=[768, 1536, 1], grad=True), [768],
                     tensor(768, grad=True), tensor(768, grad=True), 1e-06) | {"autocast": "bfloat16"}


N = 2 * 197 * 768  # elements
ROWS = 2 * 197


def test_a_layer_norm_of_a_strided_input_copies_it_first_and_its_kernels_keep_their_work():
    """Forward: the copy (read and written in fp32: 128 threads x 2 a block, 1,182 blocks) then
    the norm kernel with the formula's work (before: the copy carried it, the norm na). Backward:
    the saved input and the strided output gradient each copied, then dX and dWeight/dBias with
    their stages (before: the two copies took them, both kernels na), then the engine's add."""
    m = vit_layer_norm()
    assert work(call(m, "fprop", (COPY_F32, 1182, [128, 1, 1]), (LN, 394, [32, 4, 1]))) == [
        (0, 2 * N * 4), (8 * N, (2 * N + 2 * 768) * 4)]
    stats = 2 * ROWS * 4
    assert work(call(m, "bprop", (COPY_F32, 1182, [128, 1, 1]), (COPY_F32, 1182, [128, 1, 1]),
                     (LN_DX, 394, [128, 1, 1]), (LN_DW, 24, [32, 32, 1]))) == [
        (0, 2 * N * 4), (0, 2 * N * 4), (12 * N, (3 * N + 768) * 4 + stats), (4 * N, 2 * N * 4 + stats + 2 * 768 * 4)]


def test_a_contiguous_layer_norm_copies_only_a_strided_output_gradient():
    """mha_weights' norm: input [64, 8, 128] contiguous, forward one kernel; backward dY arrives
    expanded (a sum's gradient) and is copied (256 blocks of 128 x 2)."""
    m = described(FN, "layer_norm", tensor(64, 8, 128, grad=True), [128], tensor(128, grad=True),
                  tensor(128, grad=True), 1e-05)
    n, rows = 64 * 8 * 128, 64 * 8
    assert forward_parts(m, lookup(m["mod"], m["op"])(Call(m))) == []
    assert work(call(m, "bprop", (COPY_F32, 256, [128, 1, 1]), (LN_DX, 512, [128, 1, 1]), (LN_DW, 4, [32, 32, 1]))) == [
        (0, 2 * n * 4), (12 * n, (3 * n + 128) * 4 + 2 * rows * 4), (4 * n, 2 * n * 4 + 2 * rows * 4 + 2 * 128 * 4)]


def test_a_strided_linear_input_is_copied_after_its_cast():
    """vit_b_16's MultiheadAttention in-projection under bf16 autocast: input [197, 2, 768] (a
    batch-first tensor transposed) cast to bf16 keeping its strides, then reshaped into 394 rows:
    a bf16 copy (591 blocks of 128 x 4: gemm_parts.strided_operands), after which the GEMM follows."""
    m = described(FN, "linear", tensor(197, 2, 768, strides=[768, 151296, 1]), tensor(2304, 768, grad=True),
                  tensor(2304, grad=True)) | {"autocast": "bfloat16"}
    facts = work(call(m, "fprop", (CAST_BF16, 3, [128, 1, 1]), (CAST_BF16, 1728, [128, 1, 1]),
                      (CAST_BF16, 296, [128, 1, 1]), (COPY_BF16, 591, [128, 1, 1])))
    assert facts == [(0, 2304 * 6), (0, 2304 * 768 * 6), (0, N * 6), (0, 2 * N * 2)]


def test_a_linear_backward_copies_a_strided_output_gradient_into_rows():
    """mha_weights' key projection: input [80, 8, 96], output 640 x 128 fp32; its gradient
    arrives transposed and is made contiguous (320 blocks of 128 x 2) between the GEMMs."""
    m = described(FN, "linear", tensor(80, 8, 96), tensor(128, 96, grad=True), tensor(128, grad=True))
    (flops, nbytes), = work(call(m, "bprop", (COPY_F32, 320, [128, 1, 1])))
    assert (flops, nbytes) == (0, 2 * 640 * 128 * 4)


def test_softmax_backward_is_its_product_then_its_kernel():
    """mha_weights' softmax over [32, 64, 80] fp32: PyTorch's CUDA backward computes T = dY * Y
    first (1 FLOP an element, three tensors), then softmax_warp_backward the other 3 (before: the
    product carried all 4, the softmax kernel na)."""
    m = described(FN, "softmax", tensor(32, 64, 80, grad=True), dim=-1)
    n = 32 * 64 * 80
    assert work(call(m, "bprop", (MUL, 160, [128, 1, 1]), (SOFTMAX_BWD, 256, [32, 4, 1]))) == [
        (n, 3 * n * 4), (3 * n, 3 * n * 4)]


def test_memory_efficient_attention_backward_helpers_carry_their_work():
    """transformer_encoder's attention ([8, 8, 128, 32] fp32, dropout 0.1, strided q/k/v): dO made
    contiguous (1,024 blocks of 128 x 2), delta = rowsum(dO * O) by PyTorch (the product, its sum
    per row: 262,144 into 8,192, that made contiguous head-major: 32 blocks), then the kernel with
    the backward's formula (before: the four helpers na)."""
    q = tensor(8, 8, 128, 32, strides=[256, 32, 2048, 1], grad=True)
    m = described(FN, "scaled_dot_product_attention", q, q, q, None, 0.1, False)
    out, rows = 8 * 8 * 128 * 32, 8 * 8 * 128
    assert work(call(m, "bprop", (COPY_F32, 1024, [128, 1, 1]), (MUL, 256, [128, 1, 1]), (ROW_SUM, 512, [32, 16, 1]),
                     (COPY_F32, 32, [128, 1, 1]), (EFFICIENT_BWD, [2, 8, 8], [128, 1, 1]))) == [
        (0, 2 * out * 4), (out, 3 * out * 4), (out - rows, (out + rows) * 4), (0, 2 * rows * 4),
        (335544320, 8 * out * 4)]


def test_cudnn_attention_with_dropout_unpacks_its_seed():
    """transformer's attention under cuDNN with dropout: unpack_cudnn writes the seed and the offset."""
    q = tensor(2, 8, 48, 64, dtype="bfloat16")
    m = described(FN, "scaled_dot_product_attention", q, q, q, None, 0.1, False)
    (flops, nbytes), = work(call(m, "fprop", ("at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long *, long *)",
                                              1, [1, 1, 1])))
    assert (flops, nbytes) == (0, 16)


def native_mha() -> dict:
    """transformer_encoder_eval's self-attention: [8, 128, 256] fp16, 8 heads, no weights."""
    x = tensor(8, 128, 256, dtype="float16")
    return described("torch", "_native_multi_head_attention", x, x, x, 256, 8, tensor(768, 256, dtype="float16"),
                     tensor(768, dtype="float16"), tensor(256, 256, dtype="float16"), tensor(256, dtype="float16"),
                     None, False, True, None)


IN_PROJ = (2 * 1024 * 768 * 256, (1024 * 256 + 768 * 256 + 1024 * 768 + 768) * 2)
ATTENTION = (4 * 64 * 128 * 128 * 32, 4 * 8 * 128 * 256 * 2)
OUT_PROJ = (2 * 1024 * 256 * 256, (1024 * 256 + 256 * 256 + 1024 * 256 + 256) * 2)


def test_multihead_attention_fast_path_is_its_projections_and_attention():
    """The three kernels PyTorch runs take the projections' and the attention's work in turn,
    what emit_nvtx's aten::addmm, aten::_cudnn_attention_forward and aten::addmm ranges price
    them at in the same capture (before: no marker, all three na)."""
    m = native_mha()
    cost = lookup("torch", "_native_multi_head_attention")(Call(m))
    assert (cost.flops, cost.bytes) == tuple(map(sum, zip(IN_PROJ, ATTENTION, OUT_PROJ)))
    assert work(call(m, "fprop", ("nvjet_sm90_hsh_96x64_64x10_1x2_h_bz_bias_TNN", [2, 64, 1], [384, 1, 1]),
                     (CUDNN_SDPA, 64, [384, 1, 1]), ("nvjet_sm90_hsh_64x48_64x15_2x4_h_bz_bias_TNT", [8, 12, 1],
                                                     [384, 1, 1]))) == [IN_PROJ, ATTENTION, OUT_PROJ]


def test_multihead_attention_older_path_prices_only_what_it_knows():
    """With weights asked for PyTorch runs its older path (the projection, then batched GEMMs
    and a masked softmax, no fused attention kernel): the projection takes its stage; the batched
    GEMM finds the attention's stage next and takes nothing, nor does any kernel after it."""
    m = native_mha()
    m["args"][10] = True
    gemm = "nvjet_sm90_hsh_96x64_64x10_1x2_h_bz_TNN"
    assert work(call(m, "fprop", (gemm, [2, 64, 1], [384, 1, 1]), (gemm, [2, 64, 1], [384, 1, 1]),
                     (gemm, [2, 64, 1], [384, 1, 1])))[0] == IN_PROJ
    assert [w[0] for w in work(call(m, "fprop", (gemm, [2, 64, 1], [384, 1, 1]), (gemm, [2, 64, 1], [384, 1, 1]),
                                    (gemm, [2, 64, 1], [384, 1, 1])))[1:]] == [None, None]


FILL_F32 = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, "
            "(unsigned long)1>>(int, T2, T3)")


def test_spatial_cross_entropy_runs_nll_loss2d_as_four_kernels():
    """deeplabv3_mobilenet's loss over [2, 21, 128, 128] fp32 logits, mean: log_softmax, then the
    loss and the total weight zeroed (4 bytes each), the sum over the 32,768 pixels (their targets
    and log-probabilities read, the two sums written) and the division (before: the first zero fill
    took nll_loss's stage, the sum and the division na)."""
    m = described(FN, "cross_entropy", tensor(2, 21, 128, 128, grad=True), tensor(2, 128, 128, dtype="int64"))
    n, px = 2 * 21 * 128 * 128, 2 * 128 * 128
    softmax = "void at::native::<unnamed>::cunn_SpatialSoftMaxForward<float, float, float, int, at::native::<unnamed>::LogSoftMaxForwardEpilogue>(T3 *, const T1 *, T4, T4, T4)"
    assert work(call(m, "fprop", (softmax, [2, 16, 1], [1, 1024, 1]), (FILL_F32, 1, [128, 1, 1]),
                     (FILL_F32, 1, [128, 1, 1]),
                     ("void at::native::<unnamed>::nll_loss2d_forward_kernel<float, float, int>(T1 *, T1 *, const T1 *, "
                      "const long *, const T1 *, int, int, int, int, long)", 2, [1024, 1, 1]),
                     ("void at::native::<unnamed>::nll_loss2d_forward_size_average_kernel<float>(T1 *, const T1 *)", 1,
                      [1, 1, 1]))) == [(5 * n, 2 * n * 4), (0, 4), (0, 4), (px - 1, (px + 2) * 4 + px * 8), (1, 12)]


def test_cudnn_attention_seed_unpacking_under_its_aten_range():
    """Without pyprof markers (emit_nvtx ranges alone: transformer's plain capture, [8, 8, 96, 32]
    16-bit) the unpacking runs inside aten::_cudnn_attention_forward, whose range carries no
    dropout_p: the part is offered to every attention forward, and only the unpacking kernel
    takes it (before: na); the attention kernel keeps its work."""
    shape = [8, 8, 96, 32]
    ranges = [{"name": "aten::_scaled_dot_product_cudnn_attention", "seq": 36330, "opId": 12930,
               "sizes": [shape, shape, shape] + [[]] * 6},
              {"name": "aten::_cudnn_attention_forward", "opId": 12931, "sizes": [shape, shape, shape] + [[]] * 10}]
    facts = work([record(None, "at::cuda::philox::unpack_cudnn(at::PhiloxCudaState, long *, long *)", grid=[1, 1, 1],
                         block=[1, 1, 1], torchOps=ranges, subSeqId=0, seqId=36330, mod="aten",
                         op="_cudnn_attention_forward"),
                  record(None, CUDNN_SDPA, grid=[64, 1, 1], block=[384, 1, 1], torchOps=ranges, subSeqId=1, seqId=36330,
                         mod="aten", op="_cudnn_attention_forward")])
    assert facts == [(0, 16), (4 * 64 * 96 * 96 * 32, 4 * 64 * 96 * 32 * 2)]


def test_multihead_attention_fast_path_under_aten_ranges_is_priced_from_them():
    """With emit_nvtx's ranges too (aten mode) the fast path's kernels are priced from their own
    ranges (a composite op), so its older path's kernels keep what their ranges say: the
    projection under aten::addmm as in the plain capture, the masked softmax over the 8 x 8 x 128
    x 128 fp16 scores under aten::_masked_softmax (before: na, the marker's stages knowing no
    softmax)."""
    m = native_mha()
    m["args"][10] = True
    n = 8 * 8 * 128 * 128
    addmm = {"name": "aten::addmm", "opId": 3, "sizes": [[768], [1024, 256], [256, 768], [], []]}
    softmax = {"name": "aten::_masked_softmax", "opId": 5, "sizes": [[8, 8, 128, 128], [], [], []]}
    assert work([record(m, "nvjet_sm90_hsh_96x64_64x10_1x2_h_bz_TNN", grid=[2, 64, 1], block=[384, 1, 1],
                        torchOps=[addmm], subSeqId=0),
                 record(m, "void <unnamed>::masked_softmax_warp_forward<c10::Half, c10::Half, float, (int)7, (bool)0, "
                        "(bool)0>(T2 *, const T1 *, const bool *, int, int, int, int)", grid=[1024, 1, 1],
                        block=[32, 4, 1], torchOps=[softmax], subSeqId=1)]) == [IN_PROJ, (5 * n, 2 * n * 2)]
