"""No kernel above its compute peak because of attribution (pyprof/prof/pricing/beyond_peak.py): FLOPs
a kernel could not have executed in its time are withheld (na, one warning), and what was
withheld stays for the sums over whole op calls."""
from __future__ import annotations

from pyprof.prof.pricing.beyond_peak import REASON
from pyprof.prof.columns import pct_of_peak
from test_prof_helpers import analyse, described, kernels, prof_text, tensor

GEMM = "cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4"  # Tensor Cores, fp32 in: the TF32 peak
ADD = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
       "std::array<char *, (unsigned long)3>>(int, T2, T3)")
FLOPS = 2 * 64 * 1024 * 1024
BYTES = (64 * 1024 + 1024 * 1024 + 64 * 1024 + 1024) * 4  # x, weight, out; the bias read once
ADD_BYTES = (2 * 64 * 1024 + 1024) * 4                      # the bias add apart: out read and written, bias read
ADD_FLOPS = 64 * 1024                                       # and one add per output element
TF32_PEAK = 494.5  # H100 SXM, TFLOP/s = 1e3 FLOP/ns


def linear_call(gemm_ns: int) -> list[dict]:
    """One F.linear call: its GEMM (`gemm_ns` long), then the bias added by its own kernel."""
    m = described("torch.nn.functional", "linear", tensor(64, 1024), tensor(1024, 1024), tensor(1024))
    recs = kernels(m, [GEMM, ADD])
    recs[0]["kDuration"], recs[1]["kDuration"] = gemm_ns, 2000
    recs[1]["grid"] = [128, 1, 1]  # 65,536 outputs: a launch that covers them
    return recs


def test_flops_beyond_the_peak_in_the_kernel_s_time_are_withheld_with_a_warning():
    # 200 ns at 494.5 TFLOP/s is 98.9 MFLOP: the call's 134 MFLOP cannot all be its GEMM's.
    assert FLOPS > 200 * TF32_PEAK * 1e3
    (gemm, add), tally = analyse(linear_call(200))
    assert (gemm.flops, gemm.bytes, gemm.call_work) == (None, None, (FLOPS, BYTES))
    assert gemm.whole_work() == (FLOPS, BYTES) and pct_of_peak({"kDuration": 200}, gemm) is None
    assert (add.flops, add.bytes, add.call_work) == (ADD_FLOPS, ADD_BYTES, None)  # the helper keeps its own share
    assert tally.as_dict() == {REASON: {"torch.nn.functional.linear": 1}}


def test_flops_within_the_peak_are_kept():
    (gemm, _add), tally = analyse(linear_call(1000))
    assert (gemm.flops, gemm.bytes, gemm.call_work) == (FLOPS, BYTES, None)
    assert pct_of_peak({"kDuration": 1000}, gemm) == FLOPS / 1000 / 1e3 / TF32_PEAK * 100 < 100
    assert not tally.warnings


def test_the_table_shows_na_and_the_warning_names_the_reason_and_the_op():
    out, err = prof_text(linear_call(200), "op,flops,bytes,peak")
    assert out.splitlines()[1].split() == ["linear", "na", "na", "na"]
    assert err.splitlines()[1] == (
        "  FLOPs beyond the GPU's peak in the kernel's time (the op's work is shared with other kernels of its "
        "call in a way not known: FLOPs and bytes na; --summary --by call has the call's rate): 1 kernel: "
        "torch.nn.functional.linear (1)")


def test_a_kernel_without_a_known_peak_or_duration_is_not_judged():
    recs = linear_call(200)
    recs[0]["gpu"] = {"name": "NVIDIA H100"}  # H100 SXM or PCIe: no peak (peaks.py)
    (gemm, _add), tally = analyse(recs)
    assert gemm.flops == FLOPS and not tally.warnings
