"""prof's FLOPs against torch.utils.flop_counter.FlopCounterMode, forward and backward, exactly,
for every op both cover. The marker is built by the annotation's encoder from the same tensors."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="compared with torch.utils.flop_counter on real torch calls: needs torch")

import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count

from pyprof.prof.pricing.ops import Call, lookup
from test_prof_helpers import analyse, kernels, marker, total_flops

FN = "torch.nn.functional"


def counted(fn, *args, **kwargs) -> int:
    with FlopCounterMode(display=False) as mode:
        fn(*args, **kwargs)
    return mode.get_total_flops()


def cost_of(mod, op, *args, **kwargs):
    return lookup(mod, op)(Call(marker(mod, op, *args, **kwargs)))


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


GEMM_CASES = [
    (FN, "linear", F.linear, (r(16, 32), r(24, 32)), {}),
    (FN, "linear", F.linear, (r(4, 16, 32), r(24, 32), r(24)), {}),
    (FN, "linear", F.linear, (r(2, 3, 5, 32), r(24, 32)), {"bias": r(24)}),
    ("torch", "mm", torch.mm, (r(16, 32), r(32, 8)), {}),
    ("Tensor", "mm", torch.Tensor.mm, (r(16, 32), r(32, 8)), {}),
    ("torch", "bmm", torch.bmm, (r(3, 16, 32), r(3, 32, 8)), {}),
    ("torch", "addmm", torch.addmm, (r(8), r(16, 32), r(32, 8)), {}),
    ("torch", "baddbmm", torch.baddbmm, (r(3, 16, 8), r(3, 16, 32), r(3, 32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(16, 32), r(32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(4, 16, 32), r(32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(16, 32), r(4, 32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(2, 1, 16, 32), r(1, 3, 32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(32), r(32, 8)), {}),
    ("torch", "matmul", torch.matmul, (r(32), r(4, 32, 8)), {}),
    ("Tensor", "__matmul__", torch.Tensor.__matmul__, (r(5, 16, 32), r(5, 32, 8)), {}),
    ("Tensor", "__rmatmul__", torch.Tensor.__rmatmul__, (r(32, 8), r(16, 32)), {}),
    ("torch", "einsum", torch.einsum, ("bij,bjk->bik", r(2, 3, 4), r(2, 4, 5)), {}),
    ("torch", "einsum", torch.einsum, ("ij,jk", r(3, 4), r(4, 5)), {}),
    ("torch", "einsum", torch.einsum, ("bhqd,bhkd->bhqk", r(2, 4, 8, 16), r(2, 4, 6, 16)), {}),
    ("torch", "einsum", torch.einsum, ("...ij,...jk->...ik", r(2, 3, 4, 5), r(2, 3, 5, 6)), {}),
    ("torch", "einsum", torch.einsum, ("bij,jk->bik", r(2, 3, 4), r(4, 5)), {}),
    ("torch", "einsum", torch.einsum, ("abc,cd->ad", r(2, 3, 4), r(4, 5)), {}),
]

CONV_CASES = [
    ("conv1d", F.conv1d, (r(2, 4, 33), r(8, 4, 3)), {"stride": 2, "padding": 1}),
    ("conv1d", F.conv1d, (r(4, 33), r(8, 4, 5)), {"padding": "same"}),
    ("conv2d", F.conv2d, (r(2, 3, 17, 19), r(8, 3, 3, 3)), {}),
    ("conv2d", F.conv2d, (r(2, 3, 17, 19), r(8, 3, 3, 3), r(8)), {"stride": (2, 1), "padding": (1, 2)}),
    ("conv2d", F.conv2d, (r(2, 8, 16, 16), r(8, 2, 3, 3)), {"groups": 4, "dilation": 2}),
    ("conv2d", F.conv2d, (r(2, 8, 15, 15), r(8, 1, 5, 5)), {"groups": 8, "padding": "same", "dilation": 2}),
    ("conv2d", F.conv2d, (r(2, 3, 10, 10), r(4, 3, 3, 3)), {"padding": "valid"}),
    ("conv3d", F.conv3d, (r(1, 2, 6, 7, 8), r(4, 2, 3, 3, 3)), {"stride": 2, "padding": 1}),
    ("conv_transpose1d", F.conv_transpose1d, (r(2, 4, 9), r(4, 6, 3)), {"stride": 2, "output_padding": 1}),
    ("conv_transpose2d", F.conv_transpose2d, (r(2, 4, 7, 9), r(4, 3, 3, 3)), {"stride": 2, "padding": 1}),
    ("conv_transpose2d", F.conv_transpose2d, (r(2, 4, 7, 9), r(4, 2, 3, 3)), {"groups": 2, "dilation": 2}),
    ("conv_transpose3d", F.conv_transpose3d, (r(1, 2, 4, 5, 6), r(2, 3, 2, 2, 2)), {"stride": 2}),
]


@pytest.mark.parametrize("mod,op,fn,args,kwargs", GEMM_CASES)
def test_gemm_forward_matches_flop_counter(mod, op, fn, args, kwargs):
    assert cost_of(mod, op, *args, **kwargs).flops == counted(fn, *args, **kwargs)


@pytest.mark.parametrize("op,fn,args,kwargs", CONV_CASES)
def test_conv_forward_matches_flop_counter(op, fn, args, kwargs):
    for mod in (FN, "torch"):
        assert cost_of(mod, op, *args, **kwargs).flops == counted(fn, *args, **kwargs)


def test_conv_output_shape_in_params_matches_torch():
    x, w = r(2, 3, 17, 19), r(8, 3, 3, 3)
    y = F.conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
    params = cost_of(FN, "conv2d", x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2)).params
    assert f"P={y.shape[2]},Q={y.shape[3]}" in params and params.startswith("N=2,C=3,H=17,W=19,K=8")


def _backward_counted(fn, args, kwargs):
    out = fn(*args, **kwargs)
    loss = out.sum()
    return counted(loss.backward)


# A data-gradient GEMM, cuBLAS's split-K reduction, a weight-gradient GEMM, autograd's bias
# reduction: only the two GEMMs carry work.
GEMM_BWD = ["sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_cgasize1x1x1_warpgroupsize1x1x1",
            "splitKreduce_kernel", "nvjet_sm90_tst_128x128_64x4_1x2_h_bz_coopA_NNT",
            "void at::native::reduce_kernel<512, 1>(...)"]


def _has_vector(args) -> bool:
    """1-D matmul operands: their gradients are outer products and GEMVs, which flop_counter
    does not count (it has no formula for mv/dot)."""
    return any(isinstance(a, torch.Tensor) and a.dim() == 1 for a in args)


@pytest.mark.parametrize("mod,op,fn,args,kwargs", [c for c in GEMM_CASES if not _has_vector(c[3])])
def test_gemm_backward_attribution_sums_to_flop_counter(mod, op, fn, args, kwargs):
    """Each gradient GEMM kernel carries one forward's FLOPs; helpers carry none. With both
    matrix operands requiring grad, autograd runs one GEMM for each."""
    args = tuple(a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    kwargs = {k: v.detach().requires_grad_() for k, v in kwargs.items()}
    m = marker(mod, op, *args, **kwargs)
    assert total_flops(kernels(m, GEMM_BWD, "bprop")) == _backward_counted(fn, args, kwargs)


CONV_BWD = ["sm80_xmma_dgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nchwkcrs_nchw_tilesize64x32x64",
            "void at::native::reduce_kernel<512, 1>(...)",
            "sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nchwkcrs_nchw_tilesize128x128x32"]


@pytest.mark.parametrize("op,fn,args,kwargs", CONV_CASES)
def test_conv_backward_attribution_matches_flop_counter(op, fn, args, kwargs):
    """dgrad and wgrad kernels each carry one forward's FLOPs. Grouped convolutions: flop_counter
    counts the weight gradient with all C input channels instead of C/groups, `groups` times the
    real work (torch/utils/flop_counter.py conv_backward_flop); prof counts the real work."""
    args = tuple(a.detach().requires_grad_() for a in args)
    m = marker(FN, op, *args, **kwargs)
    fwd = counted(fn, *args, **kwargs)
    bwd = _backward_counted(fn, args, kwargs)
    groups = kwargs.get("groups", 1)
    assert bwd == fwd + groups * fwd  # flop_counter's dgrad + wgrad
    assert total_flops(kernels(m, CONV_BWD, "bprop")) == fwd + bwd // (groups + 1)


# Backward nodes as cuDNN and PyTorch launch them on the H100 (benchmarks/pricing_coverage.py's capture):
# a data and a weight gradient, each one forward's work, whatever the kernels are called.
SLOTS = [
    # GEMM-lowered 1x1 convolution: two cuBLAS kernels, neither named dgrad nor wgrad.
    (["nvjet_sm90_tst_32x64_64x16_4x2_h_bz_NNN", "nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NTT"], [1, 1]),
    # CUTLASS GEMMs and cuDNN's sum of the per-sample weight gradients (a helper: its own part,
    # the 2 samples' 108 weights summed, 108 adds).
    (["void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nn_align4>(T1::Params)",
      "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_32x6_nt_align4>(T1::Params)",
      "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void *, const void *, T1, int, int)"], [1, 1, ("part", 108)]),
    # Depthwise: PyTorch computes the weight gradient first.
    (["void at::native::conv_depthwise2d_grad_weight_kernel<float, unsigned int>(...)",
      "void at::native::conv_depthwise2d_backward_kernel<3, 1, float, unsigned int>(...)"], [1, 1]),
    # A named weight gradient first: the unnamed kernel after it is the data gradient.
    (["sm80_xmma_wgrad_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc", "wgrad2d_c1_k1_nhwc_reduce",
      "dgrad2d_c1_k1_nhwc_specialized"], [1, 0, 1]),
    # conv_transpose: its data gradient is a forward convolution (an fprop kernel).
    (["sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x128x64",
      "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc"], [1, 1]),
    # A data gradient in two named kernels: the second finds its slot filled. A third unnamed
    # matrix kernel finds both filled.
    (["sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32", "sm80_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32",
      "implicit_convolve_sgemm", "implicit_convolve_sgemm"], [1, 0, 1, 0]),
    # Only the weight gradient (the input needs none), unnamed: one forward's work.
    (["implicit_convolve_sgemm"], [1]),
]


@pytest.mark.parametrize("names,shares", SLOTS)
def test_conv_backward_kernels_fill_the_data_and_weight_gradient_slots(names, shares):
    """x [2,3,8,8], w [4,3,3,3]: one forward is 2·2·4·6·6·3·3·3 = 15,552 FLOPs. A kernel that
    finds no slot free (a split gradient's second kernel, a helper that is no part) did work not
    known: na, and 0 in the node's sum, which is the slots' filled and the parts'."""
    m = marker(FN, "conv2d", r(2, 3, 8, 8), r(4, 3, 3, 3))
    facts, summary = analyse(kernels(m, names, "bprop"))
    want = [s[1] if isinstance(s, tuple) else 15552 * s if s else None for s in shares]
    assert [f.flops for f in facts] == want and not summary.warnings
    assert sum(f.whole_work()[0] for f in facts) == sum(w or 0 for w in want)


def _sdpa_args(causal=False, mask=False):
    q, k, v = r(2, 3, 8, 4), r(2, 3, 6, 4), r(2, 3, 6, 5)
    kw = {"is_causal": True} if causal else {}
    if mask:
        kw["attn_mask"] = torch.zeros(8, 6, dtype=torch.bool)
    return (q, k, v), kw


def test_sdpa_forward_matches_flop_counter():
    args, kw = _sdpa_args(mask=True)
    assert cost_of(FN, "scaled_dot_product_attention", *args, **kw).flops == counted(
        F.scaled_dot_product_attention, *args, **kw)


def test_sdpa_causal_is_half_of_flop_counter():
    """flop_counter ignores is_causal; prof counts only the lower triangle: exactly half."""
    args, kw = _sdpa_args(causal=True)
    full = counted(F.scaled_dot_product_attention, *args, **kw)
    assert cost_of(FN, "scaled_dot_product_attention", *args, **kw).flops * 2 == full


FUSED_BWD = {
    "flash": ["flash_bwd_dot_do_o_kernel", "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", "flash_bwd_convert_dq_kernel"],
    "efficient": ["fmha_cutlassB_f32_aligned_64x64_k64_sm80"],
    "cudnn": ["cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x64x64_4x1x1_kernel0_0"],
}


@pytest.mark.parametrize("backend", sorted(FUSED_BWD))
def test_sdpa_fused_backward_is_flop_counters_fused_formula(backend):
    """Fused backward kernels (flash, memory-efficient, cuDNN) recompute Q K^T: flop_counter's
    formula for those backends, on the main kernel. Flash's helper before it takes D =
    rowsum(dO * O), 2 FLOPs per element of O (2·3·8 rows of 5), which flop_counter does not count;
    its dQ cast after it adds none."""
    (q, k, v), kw = _sdpa_args()
    m = marker(FN, "scaled_dot_product_attention", q, k, v, **kw)
    grad_out = (*q.shape[:-1], v.shape[-1])
    want = sdpa_backward_flop_count(grad_out, q.shape, k.shape, v.shape)
    helper = 2 * (2 * 3 * 8) * 5 if backend == "flash" else 0
    assert total_flops(kernels(m, FUSED_BWD[backend], "bprop")) == want + helper


def _bmm(b, m, k, n):
    return {"name": "aten::bmm", "sizes": [[b, m, k], [b, k, n]]}


def test_sdpa_math_path_kernels_from_torch_op_sizes_match_flop_counter():
    """The math path runs plain bmm kernels, each its product (forward QK^T and PV, backward dV,
    dP, dK, dQ: what flop_counter counts); the softmax between them its 5 FLOPs per score."""
    (q, k, v), kw = _sdpa_args()
    m = marker(FN, "scaled_dot_product_attention", q, k, v)
    bh, L, S, E, Ev = 6, 8, 6, 4, 5
    gemm = "volta_sgemm_64x32_sliced1x4_nn"
    fwd = [kernels(m, [gemm], torchOps=[_bmm(bh, L, E, S)])[0],
           kernels(m, ["void (anonymous namespace)::cunn_SoftMaxForward<4, float>(...)"])[0],
           kernels(m, [gemm], torchOps=[_bmm(bh, L, S, Ev)])[0]]
    assert total_flops(fwd) == counted(F.scaled_dot_product_attention, q, k, v) + 5 * bh * L * S
    bwd = [kernels(m, [gemm], "bprop", torchOps=[_bmm(*s)])[0]
           for s in ((bh, L, Ev, S), (bh, S, L, Ev), (bh, L, S, E), (bh, S, L, E))]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        args = tuple(t.detach().requires_grad_() for t in (q, k, v))
        want = _backward_counted(F.scaled_dot_product_attention, args, {})
    assert total_flops(bwd) == want
