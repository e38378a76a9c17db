"""Real H100 captures of benchmarks/pricing_coverage.py's small cases (tests/data/*.sqlite.xz, torch 2.11,
made by benchmarks/pricing_coverage.sh and benchmarks/rnn_truth.sh): every kernel priced, the matrix
FLOPs equal to the hand-derived count, the same numbers from a trace made without pyprof.init()
(PyTorch's emit_nvtx ranges alone), and the RNN formulas against Nsight Compute's counters of
the same step. Every expected number is derived by hand in the test."""
from __future__ import annotations

from collections import Counter

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from captures import unpacked
from test_parse_attribution import parse_all
from test_prof_helpers import analyse
from test_views_common import ROOT
from pyprof.prof.pricing.registry import CAUSAL_UNKNOWN

DATA = Path(ROOT) / "tests" / "data"
MATRIX = ("gemm", "conv", "attn", "rnn")

# fixture_encoder: nn.TransformerEncoderLayer(64, 8 heads, 256, batch_first), x [2,16,64]: 32
# tokens. Forward GEMMs: in-projection 2·32·64·192 = 786,432, out-projection 2·32·64·64 =
# 262,144, feed-forward 2·(2·32·64·256) = 2,097,152; attention 2·(2·8)·16·16·(8 + 8) = 131,072.
ENC_FWD_GEMM = 786432 + 262144 + 2097152
ENC_ATTN = 131072
# Backward: every GEMM twice (data and weight gradients) but the in-projection, whose input (the
# model's input) needs no gradient: weight gradient only. Attention backward (2·8)·16·16·(6·8 + 4·8).
ENC_BWD_GEMM = 786432 + 2 * 262144 + 2 * 2097152
ENC_BWD_ATTN = 16 * 16 * 16 * 80
# fixture_lstm: nn.LSTM(32, 64, 2 layers, bidirectional, proj_size 16, batch_first), x [4,12,32]:
# 48 rows, G = 4 gates. Per layer and direction (layer 1 reads 2·16 = 32 features, as layer 0):
# GEMMs 2·48·(256·(32 + 16) + 64·16) = 1,277,952; cell 48·64·(4·3 + 9) = 64,512.
LSTM_FWD = 4 * (1277952 + 64512)
# Backward twice that, plus each bias gradient's sum over the rows (4 x 47 x 256), each layer's
# input gradient summed over the two directions (2 x 48 x 32) and, per layer and direction, each
# step's output and recurrent gradients summed before the projection's backward (4 x 48 x 16).
LSTM_BWD = 2 * LSTM_FWD + 4 * 47 * 256 + 2 * 48 * 32 + 4 * 48 * 16
# Its head: Linear(32, 10) on the last step's 4 rows: 2·4·32·10; backward two GEMMs.
HEAD = 2 * 4 * 32 * 10


def captured(name: str, tmp_path: Path) -> list[dict]:
    """The kernel records of tests/data/<name>.sqlite.xz."""
    recs, _ = parse_all(unpacked(DATA / f"{name}.sqlite.xz", tmp_path))
    return [r for r in recs if r.get("kind", "kernel") == "kernel"]


def matrix_flops(recs: list[dict]) -> tuple[dict, list, object]:
    """{(model, dir, kind): FLOPs} over matrix kernels, the Facts and the warnings tally. The
    helper kernels of matrix ops (bias adds and gradients: parts.py) are not matrix kernels."""
    from pyprof.prof.pricing.parts import family

    facts, tally = analyse(recs)
    sums: dict = defaultdict(int)
    model = None
    for rec, f in zip(recs, facts):
        model = rec["layer"][0] if rec.get("layer") else model
        if f.cost is not None and f.cost.kind in MATRIX and f.flops and family(rec.get("kLongName")) is None:
            sums[(model, rec["dir"], f.cost.kind)] += f.flops
    return dict(sums), facts, tally


def test_transformer_encoder_training_and_eval_fast_path(tmp_path):
    """With pyprof.init(): F.multi_head_attention_forward (no formula) hides nothing, so its
    projections and SDPA are priced; the eval fast path (one aten::_native_multi_head_attention
    call) from its aten ranges. FlopCounterMode counts only the feed-forward 2,097,152 there."""
    from pyprof.prof.pricing.parts import family

    recs = captured("fixture_encoder", tmp_path)
    sums, facts, tally = matrix_flops(recs)
    assert sums == {("fixture_encoder", "fprop", "gemm"): ENC_FWD_GEMM, ("fixture_encoder", "fprop", "attn"): ENC_ATTN,
                    ("fixture_encoder", "bprop", "gemm"): ENC_BWD_GEMM,
                    ("fixture_encoder", "bprop", "attn"): ENC_BWD_ATTN,
                    ("fixture_encoder_eval", "fprop", "gemm"): ENC_FWD_GEMM,
                    ("fixture_encoder_eval", "fprop", "attn"): ENC_ATTN}
    # Every kernel is priced, the calls' helpers too: the in-projection's strided input copied
    # (gemm_parts.strided_operands: the marker says the operand is strided), the memory-efficient
    # backward's dO made contiguous and rowsum(dO * O) (attention_parts.efficient_helpers). cuBLAS's zeroing of a linear's output before its split-K GEMM and cuBLASLt's
    # bias epilogue are parts (gemm_parts.output_parts): 32 x 64, 32 x 256 and 32 x 64 fp32 outputs.
    assert all(f.whole_work()[0] is not None for f in facts)
    helpers = [(r["kShortName"], f.flops, f.bytes) for r, f in zip(recs, facts)
               if r["kShortName"] in ("scal_kernel", "globalKernel")]
    assert helpers == [x for out, bias in ((2048, 64), (8192, 256), (2048, 64))
                       for x in (("scal_kernel", 0, out * 4), ("globalKernel", out, (2 * out + bias) * 4))]
    assert [(f.flops, f.bytes) for r, f in zip(recs, facts) if r["dir"] == "bprop"
            and r["op"] == "scaled_dot_product_attention" and family(r["kLongName"])] == [
        (0, 2048 * 8), (2048, 2048 * 12), (2048 - 256, (2048 + 256) * 4), (0, 256 * 8)]
    assert [f.flops for f in facts if f.flops is None] == []
    # The eval fast path's attention, priced from its ranges, is the one upper bound.
    assert [f.level for f in facts].count("aten") == 21
    assert tally.warnings == {CAUSAL_UNKNOWN: {"aten._cudnn_attention_forward": 1}}
    # loss.backward()'s own kernel, the seed gradient ones_like(loss), priced by its marker.
    seed = [(f.level, f.flops, f.bytes) for r, f in zip(recs, facts) if (r["mod"], r["op"]) == ("Tensor", "backward")]
    assert seed == [("marker", 0, 4)]


# Its cells, per step, layer and direction (12 x 2 x 2 = 48 kernels each way): 4·64·21 FLOPs
# forward, twice that backward.
LSTM_CELL = 4 * 64 * 21
# Its bias gradients' sums (GENERIC_elementWise_bp2), per layer and direction: 48 rows of 256 gates.
LSTM_BIAS_GRAD = 47 * 256


def lstm_kernels(recs: list[dict], facts: list) -> list[tuple]:
    """(dir, kernel, FLOPs) of every kernel that the cuDNN LSTM calls launched."""
    return [(r["dir"], r["kShortName"], f.flops) for r, f in zip(recs, facts)
            if f.cost is not None and f.cost.kind == "rnn"]


def check_lstm_with_projection(recs: list[dict], facts: list, launched: int) -> None:
    """Each kernel of the calls carries its own work (rnn_kernels.py), per layer and direction:
    forward the input projection over the 12 steps (cuBLAS's sgemm_largek, 48 x 256, K 32: both
    layers read 32 features), per step the recurrent GEMM (4 x 256, K 16) and, after the cell,
    the projection (4 x 16, K 64), cuBLAS's small-N gemmSN kernels placed by the order alone;
    backward per step the output and recurrent gradients' sum (4 x 16 adds: Nsight Compute's 64
    FP32 adds), the projection's gradient (4 x 64, K 16), the cell, the recurrent GEMM (4 x 16, K
    256); after a layer's steps its input gradient (48 x 32, K 256) and the directions' sum (48 x
    32 adds); the bias gradients and the weight gradients (256 x 16 against h0, K 4, and the other
    11 steps, K 44; 256 x 32, K 48; the projection's 16 x 64, K 48). Nsight Compute counted 1.05 to
    3.0 times these FLOPs for each GEMM (tiles of 4 rows padded). cuDNN's dropout masks between the
    layers are drawn at 0 FLOPs (their states' and bits' bytes); their applies are na (11 or 12
    steps fit their 6 blocks), as is cuBLAS's beta scaling before each chunk; under the marker the
    batch-first transposes (forward the input; backward the input, dOutput and the input again) and
    the backward's zero fills are parts (0 FLOPs). Each call's kernels add up to its formula."""
    kernels = lstm_kernels(recs, facts)
    assert len(kernels) == launched
    gemm = lambda m, n, k: 2 * m * n * k  # noqa: E731
    want = Counter({("fprop", "sgemm_largek_lds64", gemm(48, 256, 32)): 4, ("fprop", "scal_kernel", None): 4,
                    ("fprop", "gemmSN_TN_kernel", gemm(4, 256, 16)): 48, ("fprop", "elemWiseRNNcell", LSTM_CELL): 48,
                    ("fprop", "gemmSN_TN_kernel", gemm(4, 16, 64)): 48,
                    ("fprop", "dropout_generate_mask", 0): 2, ("fprop", "dropout_apply_mask", None): 2,
                    ("bprop", "LSTM_dgrad_combine_dh_di", 4 * 16): 48, ("bprop", "gemmSN_NN_kernel", gemm(4, 64, 16)): 48,
                    ("bprop", "LSTM_elementWise_bp1", 2 * LSTM_CELL): 48,
                    ("bprop", "gemmSN_NN_kernel", gemm(4, 16, 256)): 48,
                    ("bprop", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
                              "alignc4_execute_kernel__5x_cublas", gemm(48, 32, 256)): 4,
                    ("bprop", "dropout_apply_mask", None): 4,
                    ("bprop", "RNN_bidirectional_accum_bp1_2", 48 * 32): 1, ("bprop", "RNN_bidirectional_accum_bp1_1", 48 * 32): 1,
                    ("bprop", "GENERIC_elementWise_bp2", LSTM_BIAS_GRAD): 4,
                    ("bprop", "Kernel2", gemm(256, 16, 4)): 4, ("bprop", "Kernel2", gemm(256, 16, 44)): 4,
                    ("bprop", "Kernel2", gemm(256, 32, 48)): 4,
                    ("bprop", "sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_"
                              "alignc4_execute_kernel__5x_cublas", gemm(16, 64, 48)): 4})
    got = Counter(kernels)
    marker_only = {("fprop", "elementwise_kernel", 0): 1, ("bprop", "elementwise_kernel", 0): 3,
                   ("bprop", "vectorized_elementwise_kernel", 0): 3}
    assert got - want == Counter(marker_only if launched == 385 else {}) and not want - got
    costs = {(f.cost.flops, f.cost.bwd_flops) for f in facts if f.cost is not None and f.cost.kind == "rnn"}
    assert costs <= {(LSTM_FWD, LSTM_BWD), (LSTM_BWD, LSTM_BWD)}  # aten level: the backward range's own cost
    for d, total in (("fprop", LSTM_FWD), ("bprop", LSTM_BWD)):
        assert sum(x for k, _, x in kernels if k == d and x) == total


def test_lstm_stack_kernels_carry_their_own_steps(tmp_path):
    """The forward's and the backward's cuDNN kernels (157 and 228 of them), each its own work
    (check_lstm_with_projection)."""
    recs = captured("fixture_lstm", tmp_path)
    sums, facts, tally = matrix_flops(recs)
    assert sums == {("fixture_lstm", "fprop", "rnn"): LSTM_FWD, ("fixture_lstm", "bprop", "rnn"): LSTM_BWD,
                    ("fixture_lstm", "fprop", "gemm"): HEAD, ("fixture_lstm", "bprop", "gemm"): 2 * HEAD}
    check_lstm_with_projection(recs, facts, 157 + 228)
    assert not tally.warnings


def test_a_trace_without_pyprof_init_is_priced_from_aten_ranges_alone(tmp_path):
    """The same two models traced with emit_nvtx(record_shapes=True) and no pyprof.init(): no
    pyprof marker anywhere, every kernel priced by the aten level, and the matrix FLOPs equal
    to the marker traces' (the LSTM from aten::_cudnn_rnn's weight shapes: its kernels as with
    markers). A sum in SDPA's backward, whose reduced dims are not in the range (and this analysis
    reads no consumer ahead: scan.py does), writes the 256 outputs its reduce_kernel's launch (4
    blocks of 8 x 64 threads over [2, 16, 8, 8]) gives (reduce_launch.py); the four bias
    gradients' sums under AddmmBackward0 and AddBackward0's sum of the in-place bias add's
    [16, 2, 192] gradient to its 192 elements (its engine range names no node: the record's
    fwd.seq does) take their shapes from the node's forward op (tensor_flow.py); the loss's mean
    of 2,048 elements writes one, as its reduce_kernel's launch (one block of one row) says."""
    recs = captured("fixture_plain", tmp_path)
    assert not any(r.get("marker") for r in recs)
    sums, facts, tally = matrix_flops(recs)
    assert sums == {("fixture_encoder", "fprop", "gemm"): ENC_FWD_GEMM, ("fixture_encoder", "fprop", "attn"): ENC_ATTN,
                    ("fixture_encoder", "bprop", "gemm"): ENC_BWD_GEMM,
                    ("fixture_encoder", "bprop", "attn"): ENC_BWD_ATTN,
                    ("fixture_lstm", "fprop", "rnn"): LSTM_FWD, ("fixture_lstm", "bprop", "rnn"): LSTM_BWD,
                    ("fixture_lstm", "fprop", "gemm"): HEAD, ("fixture_lstm", "bprop", "gemm"): 2 * HEAD}
    # The dropout and accumulation kernels inside the calls are priced from their own ranges.
    check_lstm_with_projection(recs, facts, 157 + 228 - 7)
    rest = [(r, f) for r, f in zip(recs, facts) if f.cost is None or f.cost.kind != "rnn"]
    assert {f.level for f in facts} == {"aten"} and all(f.whole_work()[0] is not None for r, f in rest)
    unknown = Counter((r["op"], r["kShortName"]) for r, f in rest if f.bytes is None)
    # (LayerNorm's weight-gradient kernel runs the second stage of aten::native_layer_norm_backward's
    # formula, nn.row_norm_cost); cuBLAS's zeroing and cuBLASLt's bias epilogue are aten::addmm's
    # output parts, as with markers (gemm_parts.output_parts)
    assert not unknown
    assert [(f.flops, f.bytes) for r, f in rest if r["op"] == "_scaled_dot_product_efficient_attention"
            and r["kShortName"] == "reduce_kernel"] == [(2048 - 256, 2048 * 4 + 256 * 4)]
    helpers = [(r["kShortName"], f.flops, f.bytes) for r, f in rest if r["kShortName"] in ("scal_kernel", "globalKernel")]
    assert helpers == [x for out, bias in ((2048, 64), (8192, 256), (2048, 64))
                       for x in (("scal_kernel", 0, out * 4), ("globalKernel", out, (2 * out + bias) * 4))]
    sums = [(r["op"], f.flops, f.bytes) for r, f in rest
            if r["kShortName"] == "reduce_kernel" and r["op"] in ("mean", "add_")]
    assert sums == [("mean", 2048, 2048 * 4 + 4), ("add_", 6144 - 192, (6144 + 192) * 4)]
    # The one warning: attention priced from its ranges counts the whole score matrix.
    assert tally.warnings == {CAUSAL_UNKNOWN: {"aten._efficient_attention_forward": 1,
                                               "aten._scaled_dot_product_efficient_attention": 1}}


def rnn_truth(name: str, tmp_path: Path) -> list[list[str]]:
    """benchmarks/pricing_coverage.py rnn-truth on the capture and its Nsight Compute counters."""
    records = tmp_path / f"{name}.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in captured(name, tmp_path)))
    ncu = unpacked(DATA / f"{name}_ncu.csv.xz", tmp_path)
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "pricing_coverage.py"), "rnn-truth", str(records),
                          str(ncu)], capture_output=True, text=True, env=env, check=True).stdout
    return [line.split() for line in out.splitlines()[1:]]


# truth_lstm: nn.LSTM(256, 256, 2 layers, bidirectional), x [16, 64, 256]: 1024 rows. Layer 0,
# per direction: GEMMs 2·1024·1024·(256 + 256); layer 1 reads 512 features: 2·1024·1024·(512 +
# 256); cells 1024·256·(4·3 + 9) per layer and direction.
TRUTH_LSTM = 2 * (2 * 1024 * 1024 * 512 + 2 * 1024 * 1024 * 768) + 4 * 1024 * 256 * 21
# truth_gru: nn.GRU(256, 256), one layer: GEMMs 2·1024·768·512, cells 1024·256·(3·3 + 8).
TRUTH_GRU = 2 * 1024 * 768 * 512 + 1024 * 256 * 17
# Backward: twice the forward, plus the bias gradients' sums over the rows (LSTM one per layer and
# direction, GRU two: its n gate's hidden bias has a gradient of its own) and the LSTM's input
# gradients summed over the two directions (1024 x 512 into layer 0's input, 1024 x 256 below).
TRUTH_LSTM_BWD = 2 * TRUTH_LSTM + 4 * 1023 * 1024 + 1024 * 512 + 1024 * 256
TRUTH_GRU_BWD = 2 * TRUTH_GRU + 2 * 1023 * 768


@pytest.mark.parametrize("name,fwd,bwd", [("truth_lstm", TRUTH_LSTM, TRUTH_LSTM_BWD),
                                          ("truth_gru", TRUTH_GRU, TRUTH_GRU_BWD)])
def test_rnn_formulas_against_nsight_compute(tmp_path, name, fwd, bwd):
    """Nsight Compute's FP32 instruction counts (FMA 2) over all kernels of each cuDNN call are
    at least the formula's and at most 1.1% more (tile edges, several instructions per
    activation): the GEMM part, 99% of the count, is exact."""
    rows = rnn_truth(name, tmp_path)
    assert [(r[0], r[2], int(r[4].replace(",", ""))) for r in rows] == \
        [("fprop", "_cudnn_rnn", fwd), ("bprop", "_cudnn_rnn_backward", bwd)]
    for r in rows:
        assert 1.0 <= int(r[5].replace(",", "")) / int(r[4].replace(",", "")) <= 1.011


def test_tiny_rnn_hardware_counts_exceed_the_formula(tmp_path):
    """fixture_lstm's 48 rows fill a fraction of cuDNN's GEMM tiles: the hardware executes
    2.5x (forward) and 3.5x (backward) the algorithmic FLOPs, never fewer."""
    rows = rnn_truth("fixture_lstm", tmp_path)
    assert [int(r[4].replace(",", "")) for r in rows] == [LSTM_FWD, LSTM_BWD]
    assert [round(float(r[6]), 1) for r in rows] == [2.5, 3.5]
