"""torch.fft's transforms as cuFFT and PyTorch run them (a Fourier neural operator, benchmarks/
pricing_coverage.py's fno, captured on an H200 at stop 52 before any change for it: every FFT
kernel na). Shapes are the FNO's: [16, 32, 64, 64] fp32 activations, their [16, 32, 64, 33]
half spectra. Every number derived by hand."""
from __future__ import annotations

from pyprof.prof.pricing.ops.fft import always_run
from pyprof.prof.pricing.registry import Call, lookup
from test_prof_helpers import analyse, kernels

X = {"shape": [16, 32, 64, 64], "dtype": "float32", "grad": True}
HALF = {"shape": [16, 32, 64, 33], "dtype": "complex64", "grad": True}
N, NC = 16 * 32 * 64 * 64, 16 * 32 * 64 * 33  # real elements, half-spectrum elements
# The capture's kernels (long names cut to what the stages match).
R2C, C2R = "void vector_fft_r2c<64u, EPT<8u>, 8u, 32u>(kernel_arguments_t<T9>)", \
    "void vector_fft_c2r<64u, EPT<8u>, 8u, 24u>(kernel_arguments_t<T9>)"
PASS, PASS_2D = "void regular_fft<64u, EPT<8u>, 32u, 6u>(kernel_arguments_t<T9>)", \
    "void vector_2d_fft<64u, 64u, EPT<8u>, EPT<8u>>(kernel_arguments_t<T11>)"
SCALE = "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, " \
        "at::native::binary_internal::MulFunctor<float>>, std::array<char *, 2ul>>(int, T2, T3)"
FILL = "void at::native::vectorized_elementwise_kernel<2, at::native::FillFunctor<c10::complex<float>>>(int, T2, T3)"
DUR = 100_000  # ns a kernel: this much work in less is beyond the H100's fp32 peak (na)
COPY = "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)>(int, T3)"


def _fft(op: str, *args, **kwargs) -> dict:
    return {"v": 1, "kind": "op", "mod": "torch.fft", "op": op, "args": list(args), "kwargs": kwargs}


def test_rfft2_is_a_real_pass_over_the_rows_then_a_complex_pass_over_the_columns():
    """rfft2 of [.., 64, 64]: the r2c pass, 2.5 * 64 log2 64 FLOPs a row of 64 (2.5 N log2 64 in
    all), reading the real input and writing the half spectrum; the complex pass over the 64
    columns, 5 log2 64 a complex element, reading and writing the half spectrum. No scaling (norm
    "backward"); the copy of an input cuFFT cannot read as it is only where a kernel runs it."""
    cost = lookup("torch.fft", "rfft2")(Call(_fft("rfft2", X)))
    assert cost.stages[0] == ("_r2c", 2.5 * N * 6, N * 4 + NC * 8)
    assert cost.stages[2] == ("fft", 5 * NC * 6, 2 * NC * 8)
    assert (cost.flops, cost.bytes) == (15 * N + 30 * NC, N * 4 + NC * 8 + 2 * NC * 8)
    assert cost.dtype == "float32" and cost.params == "shape=[16,32,64,64],dim=[2,3],type=fp32"
    facts, _ = analyse(kernels(_fft("rfft2", X), [R2C, PASS], dur=DUR))
    assert [(f.flops, f.bytes) for f in facts] == [(15 * N, N * 4 + NC * 8), (30 * NC, 2 * NC * 8)]
    strided = analyse(kernels(_fft("rfft2", X), [COPY, R2C, PASS], dur=DUR))[0]
    assert (strided[0].flops, strided[0].bytes) == (0, 2 * N * 4)


def test_rfft2s_backward_rebuilds_the_whole_spectrum_and_runs_one_2d_kernel():
    """FunctionsManual's fft_r2c_backward: the whole [.., 64, 64] complex gradient zero-filled,
    the half copied into it, its inverse 2-D transform (one vector_2d_fft kernel on the H200:
    both dims' 5 N log2 64 each, the array read and written once)."""
    full = N * 8
    bwd = analyse(kernels(_fft("rfft2", X), [FILL, COPY, PASS_2D], "bprop", dur=DUR))[0]
    assert [(f.flops, f.bytes) for f in bwd] == [(0, full), (0, 2 * NC * 8), (2 * 5 * N * 6, 2 * full)]
    cost = lookup("torch.fft", "rfft2")(Call(_fft("rfft2", X)))
    assert (cost.bwd_flops, cost.bwd_bytes) == (60 * N, full + 2 * NC * 8 + 2 * full)


def test_irfft2_runs_the_column_pass_then_the_c2r_pass_then_scales():
    """irfft2 (norm "backward": the inverse scales by 1/4096): the complex pass over the columns of
    the half spectrum into a buffer, the c2r pass (2.5 N log2 64, the half spectrum read, N reals
    written), the scaling (1 FLOP a real, read and written). Backward (fft_c2r_backward): the r2c
    transform of dY, its scaling (by 1/n too), then the 31 bins of 33 that stand for two doubled."""
    cost = lookup("torch.fft", "irfft2")(Call(_fft("irfft2", HALF, s=[64, 64])))
    facts, _ = analyse(kernels(_fft("irfft2", HALF, s=[64, 64]), [PASS, C2R, SCALE], dur=DUR))
    assert [(f.flops, f.bytes) for f in facts] == [(30 * NC, 2 * NC * 8), (15 * N, NC * 8 + N * 4), (N, 2 * N * 4)]
    assert (cost.flops, cost.bytes) == (30 * NC + 16 * N, 2 * NC * 8 + NC * 8 + N * 4 + 2 * N * 4)
    doubled = NC // 33 * 31
    assert [s[0] for s in cost.bwd_stages] == ["_r2c", "direct_copy_kernel_cuda", "fft", "MulFunctor", "MulFunctor"]
    assert cost.bwd_stages[-1] == ("MulFunctor", doubled, 2 * doubled * 8)
    assert cost.bwd_flops == 15 * N + 30 * NC + NC + doubled


def test_what_pytorch_pads_or_trims_first_is_na():
    """A size other than the input's (rfft2's `s`), or a half spectrum of the wrong length for the
    output asked (irfft2's s=[64, 70]): PyTorch pads or trims first, kernels not counted here."""
    assert lookup("torch.fft", "rfft2")(Call(_fft("rfft2", X, s=[32, 32]))) is None
    assert lookup("torch.fft", "irfft2")(Call(_fft("irfft2", HALF, s=[64, 70]))) is None
    assert lookup("torch.fft", "rfft2")(Call(_fft("rfft2", X, norm="unheard"))) is None


def test_complex_transforms_and_their_norms():
    """fft of a complex [8, 1024] along its last dim: one pass, 5 * 1024 log2 1024 a row; "ortho"
    scales forward and inverse, "forward" only the forward. fftn over all dims of [8, 16, 16]:
    three passes, listed with a 2-D kernel's alternative only for two dims. A real input
    (PyTorch's two-sided r2c): na."""
    z = {"shape": [8, 1024], "dtype": "complex64"}
    plain = lookup("torch.fft", "fft")(Call(_fft("fft", z)))
    assert plain.stages == (("fft", 5 * 8 * 1024 * 10, 2 * 8 * 1024 * 8),)
    ortho = lookup("torch.fft", "ifft")(Call(_fft("ifft", z, norm="ortho")))
    assert ortho.stages[-1] == ("MulFunctor", 8 * 1024, 2 * 8 * 1024 * 8) and ortho.bwd_stages == ortho.stages
    assert lookup("torch.fft", "ifft")(Call(_fft("ifft", z, norm="forward"))).stages == plain.stages
    cube = lookup("torch.fft", "fftn")(Call(_fft("fftn", {"shape": [8, 16, 16], "dtype": "complex128"})))
    assert [s[0] for s in cube.stages] == ["fft", "fft", "fft"] and cube.flops == 5 * 2048 * (3 + 4 + 4)
    assert lookup("torch.fft", "fft")(Call(_fft("fft", {"shape": [8, 1024], "dtype": "float32"}))) is None


def test_a_2d_kernel_and_its_per_dim_passes_are_counted_once():
    """A 2-D complex transform lists its one-kernel form and its two passes as alternatives: the
    op's totals count the one kernel (the same FLOPs, the array read and written once)."""
    stages = (("2d_fft", 60, 16), ("fft", 30, 16), ("fft", 30, 16), ("MulFunctor", 4, 16))
    assert always_run(stages) == (("2d_fft", 60, 16), ("MulFunctor", 4, 16))
    assert always_run((("_r2c", 1, 2), ("direct_copy_kernel_cuda", 0, 8), ("fft", 3, 4))) == (("_r2c", 1, 2), ("fft", 3, 4))


def test_a_complex_matrix_product_counts_eight_flops_a_multiply_add():
    """The FNO's spectral mixing, einsum("bixy,ioxy->boxy") over its 12 x 12 lowest modes in
    complex64: a batched GEMM of 144 products of [16, 32] x [32, 32], 8 FLOPs a complex multiply-add
    (cuBLAS's CGEMM count: 4 real products and 4 sums); a real one 2."""
    a = {"shape": [16, 32, 12, 12], "dtype": "complex64"}
    w = {"shape": [32, 32, 12, 12], "dtype": "complex64"}
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "einsum", "args": ["bixy,ioxy->boxy", a, w], "kwargs": {}}
    assert lookup("torch", "einsum")(Call(marker)).flops == 8 * 144 * 16 * 32 * 32
    real = {"v": 1, "kind": "op", "mod": "torch", "op": "mm", "args": [{"shape": [16, 32], "dtype": "float32"},
                                                                    {"shape": [32, 32], "dtype": "float32"}], "kwargs": {}}
    assert lookup("torch", "mm")(Call(real)).flops == 2 * 16 * 32 * 32


def test_from_pytorchs_ranges_each_cufft_pass_by_the_lengths_its_name_states():
    """PyTorch's ranges carry no dims and no norm: each cuFFT kernel under aten::_fft_r2c /
    _fft_c2r / _fft_c2c is priced from the lengths its template starts with and the range's
    input. rfft2's range: the r2c pass (64) over the real input, then the complex pass (64) over
    the half spectrum it wrote, the same numbers as from the marker."""
    from pyprof.prof.pricing.ops.fft import _range_stages, cufft_pass
    r2c = "void vector_fft_r2c<(unsigned int)64, ept<(unsigned int)8>, (unsigned int)8, float>(kernel_arguments_t<t9>)"
    c2c = "void regular_fft<(unsigned int)64, ept<(unsigned int)8>, (unsigned int)32, float>(kernel_arguments_t<t9>)"
    two_d = "void vector_2d_fft<(unsigned int)64, (unsigned int)64, ept<(unsigned int)8>, ept<(unsigned int)8>>(k)"
    assert [cufft_pass(k) for k in (r2c, c2c, two_d)] == [("r2c", (64,)), ("c2c", (64,)), ("c2c", (64, 64))]
    stages = _range_stages("r2c", [r2c, c2c], N, 4, 8)
    marker = lookup("torch.fft", "rfft2")(Call(_fft("rfft2", X)))
    assert [s[1:] for s in stages] == [marker.stages[0][1:], marker.stages[2][1:]]
    assert _range_stages("c2c", [two_d], N, 4, 8)[0][1:] == (2 * 5 * N * 6, 2 * N * 8)
    c2r = "void vector_fft_c2r<(unsigned int)64, ept<(unsigned int)8>, (unsigned int)8, float>(k)"
    assert [s[1:] for s in _range_stages("c2r", [c2c, c2r], NC, 4, 8)] == [(30 * NC, 2 * NC * 8), (15 * N, NC * 8 + N * 4)]
    assert _range_stages("r2c", [c2c, r2c], N, 4, 8) is None  # a plan this does not know: na


def test_complex_kernels_name_their_type():
    """The complex GEMM's name (`cf32cf32`) and a complex functor's template say complex64."""
    from pyprof.kernel_names import kernel_dtype
    from pyprof.prof.pricing.op_ranges import template_dtype
    assert kernel_dtype("sm80_xmma_gemm_cf32cf32_f32f32_cf32_nn_n_tilesize32x32x8_stage3_execute_kernel__5x_cublas") \
        == "complex64"
    assert template_dtype(FILL) == "complex64" and template_dtype("x<c10::Half, float>") == "float16"
