"""nn.TransformerEncoderLayer's inference fast path, torch._transformer_encoder_layer_fwd, as the
kernels it launches, each priced from the marker as its own PyTorch range prices it. Kernel
names, launches and ranges are those of one layer of an H100 capture of
benchmarks/pricing_coverage.py's transformer_encoder_eval ([8, 128, 256] fp16, 8 heads, FFN 1024,
ReLU, post-norm) under emit_nvtx (the plain capture, where each kernel sits in its aten range);
tests/data/cov_encoder_eval_{default,plain}.jsonl.xz are that layer's records, unchanged, from
the same step captured in both modes (default: pyprof.init()'s markers; plain: emit_nvtx alone)."""
from __future__ import annotations

import lzma
import os

import pytest

import pyprof.prof.pricing.ops  # noqa: F401  (fills the op table)
from pyprof.prof.io.reader import records
from pyprof.prof.pricing.registry import Call, lookup
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally
from test_prof_helpers import analyse, described, record, tensor

DATA = os.path.join(os.path.dirname(__file__), "..", "data")

H = "float16"
QKV = "nvjet_sm90_hsh_96x64_64x10_1x2_h_bz_bias_TNN"
CUDNN_SDPA = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"
PROJ = "nvjet_sm90_hsh_64x48_64x15_2x4_h_bz_bias_TNT"
ADD = ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::Half>, "
       "std::array<char *, (unsigned long)3>>(int, T2, T3)")
LN = ("void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::Half, float, (bool)0>(int, T2, const T1 *, "
      "const T1 *, const T1 *, T2 *, T2 *, T1 *)")
FFN1 = "nvjet_sm90_hsh_64x128_64x8_2x1_v_bz_relubias_TNN"
RELU = ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::<unnamed>::launch_clamp_scalar("
        "at::TensorIteratorBase &, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::[lambda() "
        "(instance 1)]::operator ()() const::[lambda() (instance 8)]::operator ()() const::[lambda(c10::Half) "
        "(instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)")

OLDER = "encoder layer fast path with a mask or heads not a multiple of 8: attention's older path not decomposed"
X = [8, 128, 256]
HEADS = [8, 8, 128, 32]
N = 8 * 128 * 256  # elements of the layer's input
# Each kernel's (FLOPs, bytes) as its aten range prices it in the plain capture.
QKV_WORK = (2 * 1024 * 768 * 256, (1024 * 256 + 768 * 256 + 1024 * 768 + 768) * 2)
ATTENTION = (4 * 64 * 128 * 128 * 32, 4 * N * 2)
PROJ_WORK = (2 * 1024 * 256 * 256, (1024 * 256 + 256 * 256 + 1024 * 256 + 256) * 2)
ADD_WORK = (N, 3 * N * 2)
NORM = (8 * N, (2 * N + 2 * 256) * 2)
FFN1_WORK = (2 * 1024 * 1024 * 256, (1024 * 256 + 1024 * 256 + 1024 * 1024 + 1024) * 2)
FFN2_WORK = (2 * 1024 * 256 * 1024, (1024 * 1024 + 1024 * 256 + 1024 * 256 + 256) * 2)
LAYER = [QKV_WORK, ATTENTION, PROJ_WORK, ADD_WORK, NORM, FFN1_WORK, FFN2_WORK, ADD_WORK, NORM]

# The capture's kernels in launch order: (kernel, grid, block, the ranges inside the layer's).
MHA = {"name": "aten::_native_multi_head_attention", "opId": 2371, "sizes": [X, X, X, [], [], [768, 256], [768],
                                                                             [256, 256], [256], [], [], [], []]}
KERNELS = [
    (QKV, [2, 64, 1], [384, 1, 1], [MHA, {"name": "aten::linear", "opId": 2381, "sizes": [X, [768, 256], [768]]},
                                    {"name": "aten::addmm", "opId": 2386, "sizes": [[768], [1024, 256], [256, 768], [], []]}]),
    (CUDNN_SDPA, [64, 1, 1], [384, 1, 1], [
        MHA, {"name": "aten::scaled_dot_product_attention", "opId": 2408, "sizes": [HEADS] * 3 + [[]] * 5},
        {"name": "aten::_scaled_dot_product_cudnn_attention", "opId": 2409, "sizes": [HEADS] * 3 + [[]] * 6},
        {"name": "aten::_cudnn_attention_forward", "opId": 2410, "sizes": [HEADS] * 3 + [[]] * 10}]),
    (PROJ, [8, 12, 1], [384, 1, 1], [MHA, {"name": "aten::linear", "opId": 2419, "sizes": [X, [256, 256], [256]]},
                                     {"name": "aten::addmm", "opId": 2424, "sizes": [[256], [1024, 256], [256, 256], [], []]}]),
    (ADD, [256, 1, 1], [128, 1, 1], [{"name": "aten::add_", "opId": 2426, "sizes": [X, X, []]}]),
    (LN, [1024, 1, 1], [32, 4, 1], [{"name": "aten::layer_norm", "opId": 2427, "sizes": [X, [], [256], [256], [], []]},
                                    {"name": "aten::native_layer_norm", "opId": 2428, "sizes": [X, [], [256], [256], []]}]),
    (FFN1, [2, 64, 1], [384, 1, 1], [{"name": "aten::_addmm_activation", "opId": 2438,
                                      "sizes": [[1024], [1024, 256], [256, 1024], [], [], []]}]),
    (PROJ, [8, 12, 1], [384, 1, 1], [{"name": "aten::addmm", "opId": 2444,
                                      "sizes": [[256], [1024, 1024], [1024, 256], [], []]}]),
    (ADD, [256, 1, 1], [128, 1, 1], [{"name": "aten::add_", "opId": 2446, "sizes": [X, X, []]}]),
    (LN, [1024, 1, 1], [32, 4, 1], [{"name": "aten::layer_norm", "opId": 2447, "sizes": [X, [], [256], [256], [], []]},
                                    {"name": "aten::native_layer_norm", "opId": 2448, "sizes": [X, [], [256], [256], []]}]),
]
LAYER_RANGE = {"name": "aten::_transformer_encoder_layer_fwd", "opId": 2370,
               "sizes": [X, [], [], [768, 256], [768], [256, 256], [256], [], [], [], [256], [256], [256], [256],
                         [1024, 256], [1024], [256, 1024], [256], [], []]}


def encoder_layer(norm_first: bool = False, use_gelu: bool = False, mask: object = None, src: object = None,
                  heads: int = 8) -> dict:
    """The marker pyprof writes for the layer's call (the model's, unless told otherwise)."""
    def h(*shape: int) -> dict:
        return tensor(*shape, dtype=H)
    return described("torch", "_transformer_encoder_layer_fwd", src or h(*X), 256, heads, h(768, 256), h(768),
                     h(256, 256), h(256), use_gelu, norm_first, 1e-05, h(256), h(256), h(256), h(256), h(1024, 256),
                     h(1024), h(256, 1024), h(256), mask, None)


def marker_records(m: dict, launches: list) -> list:
    """The layer's kernels as pyprof.init()'s capture records them: the marker, no PyTorch ranges."""
    return [record(m, name, grid=grid, block=block, subSeqId=i) for i, (name, grid, block, *_) in enumerate(launches)]


def range_records(m: dict | None, launches: list) -> list:
    """The layer's kernels under emit_nvtx's ranges (with the marker too where `m` is given)."""
    return [record(m, name, grid=grid, block=block, subSeqId=0, torchOps=[LAYER_RANGE] + ranges,
                   mod="aten" if m is None else m["mod"], op=ranges[-1]["name"][6:] if m is None else m["op"])
            for name, grid, block, ranges in launches]


def work(records: list) -> list:
    facts, _ = analyse(records)
    return [(f.flops, f.bytes) for f in facts]


def test_each_kernel_of_the_layer_carries_what_its_aten_range_prices_it_at():
    """The same capture step, marker only and emit_nvtx's ranges alone: the nine kernels (QKV
    projection, cuDNN attention, output projection, residual add, norm, linear1 with its fused
    ReLU, linear2, add, norm) carry the same exact work (before: the marker had no formula, all
    nine na)."""
    assert work(range_records(None, KERNELS)) == LAYER
    assert work(marker_records(encoder_layer(), KERNELS)) == LAYER


def captured(mode: str) -> list:
    """(kernel, FLOPs, bytes, the op that priced it) of the captured layer's records."""
    with lzma.open(os.path.join(DATA, f"cov_encoder_eval_{mode}.jsonl.xz"), "rb") as s:
        return [(rec["kShortName"], f.flops, f.bytes, rec["op"]) for rec, f, _ in analysed(records(s, Tally()), Tally())]


def test_the_captured_layer_prices_alike_in_both_modes():
    """The same step's layer under the marker alone (every kernel's op the encoder layer's) and
    under emit_nvtx's ranges alone: kernel for kernel the same work, the LAYER numbers (before:
    the nine kernels na: none of transformer_encoder_eval's GPU time known in the default capture)."""
    default, plain = captured("default"), captured("plain")
    assert {op for *_, op in default} == {"_transformer_encoder_layer_fwd"}
    assert [op for *_, op in plain] == ["addmm", "_cudnn_attention_forward", "addmm", "add_", "native_layer_norm",
                                        "_addmm_activation", "addmm", "add_", "native_layer_norm"]
    assert [d[:3] for d in default] == [p[:3] for p in plain]
    assert [d[1:3] for d in default] == LAYER


def test_the_layers_formula_is_the_sum_of_its_kernels():
    cost = lookup("torch", "_transformer_encoder_layer_fwd")(Call(encoder_layer()))
    assert (cost.flops, cost.bytes) == tuple(map(sum, zip(*LAYER)))
    assert [s[0] for s in cost.stages] == ["gemm", "attn", "gemm", "add", "norm", "gemm", "gemm", "add", "norm"]
    assert cost.composite


def test_with_the_marker_and_the_ranges_each_kernel_is_priced_from_its_range():
    """aten mode (pyprof.init() with emit_nvtx): a composite op, each kernel priced from its own
    range, as in the plain capture."""
    assert work(range_records(encoder_layer(), KERNELS)) == LAYER


def test_norm_first_runs_each_norm_before_its_block():
    """norm_first: norm1, the attention block, the add, norm2, the FFN, the add; each kernel its
    own work in that order (the norms' work on the norm kernels, not on the adds)."""
    order = [4, 0, 1, 2, 3, 8, 5, 6, 7]
    launches = [KERNELS[i] for i in order]
    assert work(marker_records(encoder_layer(norm_first=True), launches)) == [LAYER[i] for i in order]
    cost = lookup("torch", "_transformer_encoder_layer_fwd")(Call(encoder_layer(norm_first=True)))
    assert [s[0] for s in cost.stages] == ["norm", "gemm", "attn", "gemm", "add", "norm", "gemm", "gemm", "add"]


def test_a_kernel_the_layer_does_not_expect_is_na_and_the_rest_keep_their_work():
    """An activation cuBLASLt did not fuse into linear1 (a clamp kernel after it): no stage of its
    role comes next, so na, and linear2, the add and the norm still take theirs."""
    launches = KERNELS[:6] + [(RELU, [512, 1, 1], [128, 1, 1])] + KERNELS[6:]
    assert work(marker_records(encoder_layer(), launches)) == LAYER[:6] + [(None, None)] + LAYER[6:]


@pytest.mark.parametrize("kwargs, why", [
    ({"src": {"type": "Tensor"}}, "nested tensor input (padded batch): tokens per sequence not in the marker"),
    ({"mask": tensor(8, 128, dtype="bool")}, OLDER),
    ({"heads": 64}, OLDER),
])
def test_a_padded_batch_or_attentions_older_path_is_na_with_its_reason(kwargs: dict, why: str):
    """A nested tensor (TransformerEncoder with src_key_padding_mask) runs over the unpadded
    tokens, which the marker does not give; a mask, or 64 heads of 4 dims (not a multiple of 8),
    may send attention down its older path (bmm, masked softmax), which is not decomposed: every
    kernel na, the reason in the closing warnings."""
    facts, tally = analyse(marker_records(encoder_layer(**kwargs), KERNELS[:3]))
    assert [(f.flops, f.bytes) for f in facts] == [(None, None)] * 3
    assert tally.warnings[why] == {"torch._transformer_encoder_layer_fwd": 3}
