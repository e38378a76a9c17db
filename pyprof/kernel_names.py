"""What a kernel's name says (Volta through Blackwell libraries): Tensor Core use, matrix work,
split-K reductions, the dtype. Imports no other part of pyprof: parse reads it too
(docs/maintaining.md).

Nothing in an nsys export says whether a kernel used Tensor Cores; the rule below models how
cuBLAS, cuBLASLt, cuDNN, CUTLASS, FlashAttention, PyTorch and Triton name their kernels. It runs
on the full demangled name (template arguments included: CUTLASS puts the deciding token there),
lower-cased. The first matching rule wins; extend RULES (and tests/prof/test_prof_tensorcores.py)
when ground truth shows a name it gets wrong.

Verdicts: MMA (a matrix kernel that used Tensor Cores), SIMT (a matrix kernel on CUDA cores),
NONE (a kernel that never does MMA work: element-wise, reductions, layout conversions, ...),
or None when the name says nothing.
"""
from __future__ import annotations

import re
from functools import lru_cache

MMA, SIMT, NONE = "mma", "simt", "none"

# (pattern, verdict, why). Order matters: helpers first (a splitK reduce of an fp16 GEMM must not
# read as a GEMM), then instruction tokens, then CUDA-core tokens, then dtype tokens, then families.
RULES = [
    # Helper kernels of GEMM/conv/attention ops, and kernels that never run MMA instructions.
    (r"splitkreduce|split_k_reduce|splitk_reduce|reducesplitk|reduction_kernel|execute_split_k_kernel", NONE,
     "split-K reduction (xmma's execute_split_k_kernel sums the partial products of the main kernel)"),
    (r"addpadding|init_device_workspace", NONE, "cuDNN padding copy or workspace initialisation"),
    (r"reduce_wgrad|wgrad\w*_reduce\b", NONE, "cuDNN's sum of a split weight gradient's partial results"),
    (r"tensortransformgeneric", NONE, "cuDNN tensor layout transform"),
    (r"(?<![a-z0-9])scal_kernel|cublaslt::epilogue|philox::unpack", NONE,
     "cuBLAS's scaling of C by beta, cuBLASLt's separate epilogue (bias, activation), RNG state unpacking"),
    (r"nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw|transpose_readwrite|cudnn::.*(?:tensor_?transform|reorder)",
     NONE, "layout conversion"),
    (r"winograd_nonfused|winograd(?:forward|wgrad|dgrad)(?:data|filter|delta|output)|scalepackedtensor",
     NONE, "cuDNN Winograd transform or tensor scaling (the GEMM between the transforms is separate)"),
    (r"\bfft2d_(?:r2c|c2r)|\bflip_filter\b", NONE,
     "cuDNN FFT convolution's transforms and filter flip (its complex GEMM between them is the matrix kernel)"),
    (r"flash_bwd_dot_do_o|flash_bwd_convert_dq|flash_bwd_clear|flash_fwd_splitkv_combine|"
     r"compute_dot_do_o|convert_dq_to_16bits|fmha_reduce_head", NONE,
     "FlashAttention / cuDNN SDPA backward pre/post-processing (fmha_reduce_head: grouped-query dK/dV sums)"),
    (r"elementwise_kernel|vectorized_elementwise|unrolled_elementwise|reduce_kernel|fill_kernel|"
     r"fillfunctor|cunn_softmax|softmax_warp|layer_norm|layernorm|batch_norm|bn_fw|bn_bw|"
     r"rmsnorm|rms_norm|groupnorm|group_norm|\bcatarraybatched|index_elementwise|scatter_gather|"
     r"multi_tensor_apply|embedding|indexselect|gatherkernel|im2col|col2im|fused_dropout|dropout_(?:generate|apply)|"
     r"max_pool|avg_pool|maxpool|avgpool|upsample|cross_entropy|nll_loss|distribution_",
     NONE, "element-wise, reduction, normalization or data-movement kernel"),
    (r"triton_(?:poi|red|per)_", NONE, "Triton pointwise/reduction kernel"),
    # MMA instruction tokens.
    (r"tensorop|wgmma|hgmma|igmma|gmma|hmma|imma|dmma|qmma|tcgen05|umma|tensor\d+x\d+x\d+|\bmma\b",
     MMA, "Tensor Core instruction or CUTLASS tensorop class"),
    (r"(?<![a-z0-9])[hsdi](?:884|1688|16816|8816|16832|1684|8832)", MMA, "MMA shape (884, 1688, 16816, ...)"),
    # Matrix kernels on CUDA cores.
    (r"simt|ffma|(?<![a-z0-9])[sd]gemm|(?<![a-z0-9])hgemm|gemv|gemmsn|gemmk1|dot_kernel|"
     r"implicit_convolve|precomputed_convolve|explicit_convolve|convolve_common_engine|"
     r"dgrad_engine|wgrad_alg|conv_depthwise|depthwise|winograd|fft2d|fft_|grouped_direct|"
     r"slow_conv|cudnn::detail::.*(?:convolve|dgrad|wgrad)|(?<![a-z0-9])(?:conv|dgrad|wgrad)[123]d_", SIMT,
     "CUDA-core GEMM/GEMV/convolution (FFMA, SIMT, sgemm/dgemm, direct or FFT/Winograd conv)"),
    # Library kernels whose dtype tokens decide: half, bf16, tf32, fp8 and int8 GEMMs/convs are MMA.
    (r"(?:xmma|cutlass|cudnn|gemm|conv|fprop|dgrad|wgrad).*(?:bf16|f16|fp16|tf32|e4m3|e5m2|int8|i8i8)|"
     r"(?:bf16|f16|fp16|tf32|e4m3|e5m2|int8).*(?:xmma|gemm|fprop|dgrad|wgrad)", MMA,
     "GEMM/conv with a Tensor-Core dtype"),
    (r"xmma.*f32f32_f32|xmma.*f64", SIMT, "xmma GEMM/conv in plain FP32/FP64"),
    # Families that always use MMA on the GPUs they exist for.
    (r"nvjet", MMA, "cuBLAS Hopper/Blackwell GEMM (nvjet)"),
    (r"flash_fwd|flash_bwd|flash::|fmha|sdpa|attention|_attn_", MMA, "fused attention kernel"),
    (r"cutlass3x|sm90_xmma|sm100_xmma", MMA, "CUTLASS 3 / Hopper+ xmma GEMM"),
]
_COMPILED = [(re.compile(p), v) for p, v, _ in RULES]
_TRITON_GEMM = re.compile(r"triton_(?:tem|mm|bmm)|_kernel_mm|matmul_kernel")


@lru_cache(maxsize=65536)
def classify(name: str | None) -> str | None:
    """MMA, SIMT, NONE or None (not recognised) for a kernel name; cached per name."""
    if not name:
        return None
    low = name.lower()
    for pattern, verdict in _COMPILED:
        if pattern.search(low):
            return verdict
    return None


# What a library call launches right after its matrix kernel: a split-K reduction (it sums the
# partial products of the GEMM before it: RULES' first rule), cuDNN's sum of a split weight
# gradient (the third), cuBLASLt's separate epilogue, cuDNN's conversion of an NHWC result back
# to NCHW, cuDNN's FFT convolution's inverse transform of the spectra its complex GEMM wrote.
_TRAILING = re.compile("|".join((RULES[0][0], RULES[2][0], r"cublaslt::epilogue|nhwctonchw|nhwc2nchw|\bfft2d_c2r")))


def trailing_helper(name: str | None) -> bool:
    """Whether a kernel is a helper its library call launches right after its matrix kernel (a
    split-K reduction, a split weight gradient's sum, cuBLASLt's separate epilogue, an NHWC result
    converted back to NCHW), so that it is the previous matrix kernel's call's."""
    return bool(name) and _TRAILING.search(name.lower()) is not None


# Launched before the call's main kernel: attention backward's pre-processing, dot(dO, O) per
# row; cuDNN's conversion of an NCHW operand to the NHWC its kernel reads; its FFT convolution's
# filter flip and transforms of the operands.
_LEADING = re.compile(r"flash_bwd_dot_do_o|compute_dot_do_o|nchwtonhwc|nchw2nhwc|\bfft2d_r2c|\bflip_filter\b")


def leading_helper(name: str | None) -> bool:
    """Whether a kernel is a helper its library call launches before its matrix kernel (attention
    backward's dot(dO, O), an operand converted from NCHW to NHWC), so that it is the next matrix
    kernel's call's."""
    return bool(name) and _LEADING.search(name.lower()) is not None


def triton_gemm(name: str | None) -> bool:
    """A Triton template GEMM: MMA when its dtype is 16-bit, fp8 or int8 (`tl.dot` always lowers
    to MMA for those from Ampere on); unknown for fp32, where it depends on allow_tf32."""
    return bool(name) and _TRITON_GEMM.search(name.lower()) is not None


_DTYPE_TOKENS = [
    (re.compile(r"e4m3"), "float8_e4m3fn"), (re.compile(r"e5m2"), "float8_e5m2"),
    # xmma's complex GEMMs name their operands cf32 / cf64 (`sm80_xmma_gemm_cf32cf32_f32f32_cf32`:
    # the FNO's spectral mixing), before the real tokens their accumulator's match.
    (re.compile(r"_cf32cf32_"), "complex64"), (re.compile(r"_cf64cf64_"), "complex128"),
    # cuDNN's templates spell bf16 `__nv_bfloat16`: its element type where it is the first argument
    # (`implicit_convolve_sgemm<__nv_bfloat16, ...>`, whose `sgemm` says nothing of its type).
    (re.compile(r"bf16|^(?:void )?[\w:]+<__nv_bfloat16\b"), "bfloat16"),
    (re.compile(r"(?<![a-z0-9])(?:h(?:884|1688|16816)|fp16|half)|(?<![b0-9])f16"), "float16"),
    (re.compile(r"tf32|(?<![a-z0-9])sgemm|_f32f32_|(?<![a-z0-9])s(?:1688|16816)gemm"), "float32"),
    (re.compile(r"(?<![a-z0-9])i(?:8816|16832|8832)|int8|i8i8"), "int8"),
    (re.compile(r"(?<![a-z0-9])(?:d884|d16816|dgemm)|f64|fp64|double"), "float64"),
]


# cuBLAS nvjet names carry the A/B type as the first letter after the architecture (nvjet_sm90_hsh_,
# nvjet_sm90_tst_): h = fp16, t = bf16 (H100 ground truth, tests/data/tc_ground_truth.csv).
# Other letters are not confirmed yet and say nothing.
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z])[a-z]{2}_")
_NVJET_TYPES = {"h": "float16", "t": "bfloat16"}


@lru_cache(maxsize=65536)
def kernel_dtype(name: str | None) -> str | None:
    """The input dtype a GEMM/conv/attention kernel's name states, if it states one.

    Under autocast the marker records the Python-level arguments (fp32 tensors), while the
    kernel ran in bf16/fp16: the name's dtype token is the better witness for bytes and peaks.
    """
    if not name:
        return None
    low = name.lower()
    nvjet = _NVJET.search(low)
    if nvjet:
        return _NVJET_TYPES.get(nvjet.group(1))
    for pattern, dtype in _DTYPE_TOKENS:
        if pattern.search(low):
            return dtype
    return None
