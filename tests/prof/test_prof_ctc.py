"""ctc_loss kernel by kernel (ops/ctc.py) on the shipped H200 capture of ctc_asr (ktx_h200_default:
log-probabilities [200, 8, 29] fp32, padded targets [8, 60], a mean with zero_infinity)."""
from __future__ import annotations

from test_prof_parts import analysed_capture

from pyprof.prof.pricing.ops import Call, lookup

T, B, C, S = 200, 8, 29, 60
STATES = B * T * (2 * S + 1)
RECURSION = (13 * STATES, B * T * (S + 1) * 4 + STATES * 4 + B * 4 + B * S * 8 + 2 * B * 8)


def test_ctc_losss_sixteen_kernels_each_carry_their_stage():
    """Forward: the log-alpha recursion, zero_infinity's fill, compare and select, the target
    lengths clamped, the division, the mean; backward: the mean's and the division's gradients,
    the select's, the log-betas and the gradient filled with -inf (in that order: 193,600 then
    46,400 elements), the log-beta recursion, the collect kernel, and the padded steps zeroed
    (bytes na: which steps the lengths' values say)."""
    rows = [(r["dir"], r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture("default", "ktx_h200")["ctc_asr"]
            if r["op"] == "ctc_loss"]
    grads = T * B * C
    collect = (6 * STATES + 6 * grads, (2 * STATES + 2 * grads) * 4 + 2 * B * 4 + B * S * 8 + 2 * B * 8)
    assert rows == [("fprop", "ctc_loss_log_alpha_gpu_kernel", *RECURSION),
                    ("fprop", "vectorized_elementwise_kernel", 0, 4), ("fprop", "vectorized_elementwise_kernel", B, 40),
                    ("fprop", "elementwise_kernel", B, 76), ("fprop", "vectorized_elementwise_kernel", B, 128),
                    ("fprop", "vectorized_elementwise_kernel", B, 128), ("fprop", "reduce_kernel", B, 36),
                    ("bprop", "elementwise_kernel", B, 36), ("bprop", "vectorized_elementwise_kernel", B, 128),
                    ("bprop", "vectorized_elementwise_kernel", 0, 4), ("bprop", "elementwise_kernel", B, 76),
                    ("bprop", "vectorized_elementwise_kernel", 0, STATES * 4),
                    ("bprop", "vectorized_elementwise_kernel", 0, grads * 4),
                    ("bprop", "ctc_loss_backward_log_beta_gpu_kernel", *RECURSION),
                    ("bprop", "ctc_loss_backward_collect_gpu_kernel", *collect),
                    ("bprop", "ctc_loss_zero_padded_gradients", 0, None)]


def test_ctc_loss_reductions_and_unmodelled_targets():
    """A sum runs one reduction kernel (B - 1 adds); none, no reduction; concatenated 1-D targets
    are not modelled (na)."""
    lp, tg = {"shape": [T, B, C], "dtype": "float32"}, {"shape": [B, S], "dtype": "int64"}
    lengths = {"shape": [B], "dtype": "int64"}
    marker = {"v": 1, "kind": "op", "mod": "torch", "op": "ctc_loss", "args": [lp, tg, lengths, lengths, 0, 2, False]}
    cost = lookup("torch", "ctc_loss")(Call(marker))
    assert cost.stages == (("ctc_loss_log_alpha", *RECURSION[:1], RECURSION[1] - B * S * 8 - 2 * B * 8,
                            B * S * 8 + 2 * B * 8), ("sum_functor", B - 1, B * 4 + 4))
    marker["args"][5] = 0
    assert len(lookup("torch", "ctc_loss")(Call(marker)).stages) == 1
    marker["args"][1] = {"shape": [B * S], "dtype": "int64"}
    assert lookup("torch", "ctc_loss")(Call(marker)) is None


def test_ctc_losss_kernels_from_pytorchs_ranges_alone():
    """Without markers (nsys's own PyTorch ranges): aten::_ctc_loss's recursion and
    aten::_ctc_loss_backward's three kernels get the numbers the marker gives them."""
    rows = [(r["kShortName"], f.flops, f.bytes) for r, f in analysed_capture("nsyspt", "ktx_h200")["ctc_asr"]
            if r["kShortName"].startswith("ctc_loss")]
    assert [x[:2] for x in rows] == [("ctc_loss_log_alpha_gpu_kernel", RECURSION[0]),
                                    ("ctc_loss_backward_log_beta_gpu_kernel", RECURSION[0]),
                                    ("ctc_loss_backward_collect_gpu_kernel", 6 * STATES + 6 * T * B * C),
                                    ("ctc_loss_zero_padded_gradients", 0)]
    assert [x[2] for x in rows[:2]] == [RECURSION[1]] * 2 and rows[3][2] is None
