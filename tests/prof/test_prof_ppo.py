"""What a PPO update runs that pyprof had not priced (benchmarks/pricing_coverage.py's ppo, H200,
stop 52: 93.1% of its GPU time known with pyprof's markers; 99.6% after): torch.distributions'
argument checks (tests/nvtx/test_nvtx_behavior.py), the backward of broadcast_tensors (Normal's
broadcast_all of a [8] std to the [8192, 8] means) and of minimum (the clipped surrogate). Every
number derived by hand; the kernels' bytes are within 0.8-1.3x of Nsight Compute's on the capture."""
from __future__ import annotations

from pyprof.prof.pricing.registry import Call, lookup
from test_prof_helpers import analyse, kernels

N = 8192
F = 4


def _op(mod: str, op: str, *args) -> dict:
    return {"v": 1, "kind": "op", "mod": mod, "op": op, "args": list(args), "kwargs": {}}


def test_broadcast_tensors_backward_sums_each_expanded_gradient_back():
    """broadcast_tensors(loc [8192, 8], scale [8]): views forward; backward the scale's gradient
    summed over the 8192 rows (65,528 adds; the expanded gradient read, 8 written), the loc's
    none (not expanded)."""
    cost = lookup("torch", "broadcast_tensors")(Call(_op("torch", "broadcast_tensors",
                                                         {"shape": [N, 8], "dtype": "float32", "grad": True},
                                                         {"shape": [8], "dtype": "float32", "grad": True})))
    assert (cost.flops, cost.bytes) == (0, None)
    assert cost.bwd_stages == (("reduce_kernel", N * 8 - 8, (N * 8 + 8) * F),)
    frozen = lookup("torch", "broadcast_tensors")(Call(_op("torch", "broadcast_tensors",
                                                           {"shape": [N, 8], "dtype": "float32", "grad": True},
                                                           {"shape": [8], "dtype": "float32", "grad": False})))
    assert frozen.bwd_stages == () and frozen.bwd_flops == 0


def test_minimums_backward_runs_five_kernels_a_gradient():
    """torch.minimum(ratio·adv, clamp(ratio)·adv) over 8192 fp32: each gradient is
    where(a == b, dY / 2, dY).masked_fill_(a > b, 0): dY halved (read, written), the operands
    compared (both read, bools written), the select (the bools and both gradients read), the other
    comparison, the fill in place (the bools and the gradient read, written): ten kernels, the
    second operand's first, one operation an element each."""
    a = {"shape": [N], "dtype": "float32", "grad": True}
    facts, _ = analyse(kernels(_op("torch", "minimum", a, dict(a)), ["vectorized_elementwise_kernel"] * 10, "bprop"))
    one = [(N, 2 * N * F), (N, 2 * N * F + N), (N, N + 3 * N * F), (N, 2 * N * F + N), (N, N + 2 * N * F)]
    assert [(f.flops, f.bytes) for f in facts] == one * 2
