"""Which kernel of an op carries its work: the main-kernel rule, helper kernels, call
boundaries, backward attribution (docs/prof.md, "Attribution")."""
from __future__ import annotations

from pyprof.prof.pricing.ops import Call, lookup
from test_prof_helpers import analyse, described, kernels, record, tensor

FN = "torch.nn.functional"
EW = "void at::native::vectorized_elementwise_kernel<4>(...)"


def work(recs):
    facts, summary = analyse(recs)
    return [(f.flops, f.bytes) for f in facts], summary


def test_simt_op_work_goes_to_its_first_kernel():
    x = tensor(8, 3, 4, 4)
    m = described(FN, "softmax", x, dim=1)
    cost = lookup(FN, "softmax")(Call(m))
    got, _ = work(kernels(m, ["cunn_SoftMaxForward", "some_later_kernel"]))
    # the later kernel did work the formula does not split off: na, never 0
    assert got == [(cost.flops, cost.bytes), (None, None)]


def test_repeated_identical_calls_are_separate_calls():
    """Same marker twice in a row (a loop): without PyTorch ranges sub-sequence 0 starts a call,
    with them the outermost range's op id does."""
    m = described(FN, "relu", tensor(4, 4))
    got, _ = work(kernels(m, [EW]) + kernels(m, [EW]))
    assert got == [(16, 128), (16, 128)]
    a = kernels(m, [EW], torchOps=[{"name": "aten::relu", "opId": 1}])
    b = kernels(m, [EW], torchOps=[{"name": "aten::relu", "opId": 2}])
    got, _ = work(a + b)
    assert got == [(16, 128), (16, 128)]


def test_conv_helpers_get_nothing_and_the_conv_kernel_everything():
    x, w, b = tensor(2, 3, 8, 8, dtype="float16"), tensor(4, 3, 3, 3, dtype="float16"), tensor(4)
    m = described(FN, "conv2d", x, w, b)
    cost = lookup(FN, "conv2d")(Call(m))
    ops = [{"name": "aten::conv2d", "opId": 7}, {"name": "aten::cudnn_convolution", "opId": 8}]
    recs = kernels(m, ["void nchwToNhwcKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>(...)",
                       "sm80_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x16",
                       "void nhwcToNchwKernel<__half, __half, float, true, false, (cudnnKernelDataType_t)0>(...)"],
                   torchOps=ops)
    recs.append(record(m, EW, subSeqId=0, torchOps=ops[:1] + [{"name": "aten::add_", "opId": 9}]))
    got, summary = work(recs)
    # the layout conversions and the bias add fit no part of these shapes: na, not 0
    assert got == [(None, None), (cost.flops, cost.bytes), (None, None), (None, None)]
    assert not summary.warnings
    facts, _ = analyse(recs)
    assert sum(f.whole_work()[0] for f in facts) == cost.flops  # the call's kernels sum to the op


def test_gemm_with_split_k_reduce():
    a, b = tensor(64, 4096), tensor(4096, 64)
    m = described("torch", "mm", a, b)
    got, _ = work(kernels(m, ["ampere_sgemm_32x32_sliced1x4_nn", "splitKreduce_kernel"]))
    # the GEMM's grid splits nothing (z 1): the reduction's work is not known
    assert got == [(2 * 64 * 64 * 4096, 4 * (2 * 64 * 4096 + 64 * 64)), (None, None)]


def test_gemm_kernel_work_from_torch_op_sizes():
    """F.linear on a 3-D input runs aten::mm on the folded matrix: the range sizes say so."""
    x, w = tensor(4, 16, 32), tensor(8, 32)
    m = described(FN, "linear", x, w)
    rec = kernels(m, ["ampere_sgemm_64x32_sliced1x4_tn"],
                  torchOps=[{"name": "aten::linear", "opId": 3}, {"name": "aten::mm", "opId": 4, "sizes": [[64, 32], [32, 8]]}])
    got, _ = work(rec)
    assert got == [(2 * 64 * 8 * 32, 4 * (64 * 32 + 32 * 8 + 64 * 8))]


def test_backward_of_unary_and_binary_ops():
    x = tensor(4, 4)
    got, _ = work(kernels(described(FN, "gelu", x), [EW], "bprop"))
    assert got == [(16, 3 * 64)]
    got, _ = work(kernels(described("torch", "mul", x, x), [EW, EW], "bprop"))
    # dX = dY·W and dW = dY·X, a kernel each (the last operand's first): 16 multiplies, dY and
    # the other operand read, the gradient written, 64 B each; together the node's 32 FLOPs
    assert got == [(16, 3 * 64), (16, 3 * 64)]


def test_backward_gemm_kernels_each_carry_one_forward():
    x, w = tensor(32, 64, dtype="bfloat16"), tensor(16, 64, dtype="bfloat16")
    m = described(FN, "linear", x, w, tensor(16, dtype="bfloat16"))
    cost = lookup(FN, "linear")(Call(m))
    names = ["ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x5_nn",
             "ampere_bf16_s16816gemm_bf16_64x64_ldg8_f2f_stages_64x5_nt",
             "void at::native::reduce_kernel<512, 1>(...)"]
    got, _ = work(kernels(m, names, "bprop"))
    # dX = dY·W and dW = dYᵀ·X each touch the three matrices (2 bytes each), not the bias
    grad_bytes = 2 * (32 * 64 + 16 * 64 + 32 * 16)
    assert got == [(cost.flops, grad_bytes)] * 2 + [(None, None)]  # a bias gradient of no part's grid: na
    assert cost.bytes == grad_bytes + 2 * 16


def test_threads_keep_their_own_calls():
    m1, m2 = described(FN, "relu", tensor(4)), described(FN, "silu", tensor(8))
    a = kernels(m1, [EW, EW], tid=1)
    b = kernels(m2, [EW, EW], tid=2)
    got, _ = work([a[0], b[0], a[1], b[1]])
    assert got == [(4, 32), (8, 64), (None, None), (None, None)]  # second kernels of each call


def test_kernel_without_marker_is_na():
    got, summary = work([record(None, EW, mod="aten", op="relu")])
    assert got == [(None, None)] and summary.warnings["no op marker"]["aten.relu"] == 1


def test_bprop_without_forward_marker_is_na():
    rec = record(None, EW, "bprop", mod="aten", op="ReluBackward0")
    got, summary = work([rec])
    assert got == [(None, None)]


def test_flash_backward_helpers_carry_their_own_work():
    """Flash attention's backward over 2x4 heads of 16 query rows (R = 128), E = 8, Ev = 4, fp16:
    D = rowsum(dO * O) first (2 FLOPs an element of O; dO and O read, D written in fp32, dQ's fp32
    accumulator zeroed), the main kernel the backward formula, dQ's cast from fp32 last (R x E
    read in fp32, written in fp16)."""
    q, v = tensor(2, 4, 16, 8, dtype="float16"), tensor(2, 4, 16, 4, dtype="float16")
    m = described(FN, "scaled_dot_product_attention", q, q, v)
    cost = lookup(FN, "scaled_dot_product_attention")(Call(m))
    got, summary = work(kernels(m, ["void flash_bwd_dot_do_o_kernel<Flash_bwd_kernel_traits<...>>(params)",
                                    "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<...>(params)",
                                    "void flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<...>>(params)"], "bprop"))
    rows = 2 * 4 * 16
    assert got == [(2 * rows * 4, 2 * rows * 4 * 2 + rows * 4 + rows * 8 * 4), (cost.bwd_flops, cost.bwd_bytes),
                   (0, rows * 8 * (4 + 2))]
    assert not summary.warnings


def test_sdpa_forward_work_on_the_attention_kernel():
    q = tensor(2, 4, 16, 8, dtype="float16")
    m = described(FN, "scaled_dot_product_attention", q, q, q, is_causal=True)
    cost = lookup(FN, "scaled_dot_product_attention")(Call(m))
    got, _ = work(kernels(m, ["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<...>>(Params)"]))
    assert got == [(cost.flops, cost.bytes)] and cost.flops == 2 * 8 * 16 * 16 * 8
