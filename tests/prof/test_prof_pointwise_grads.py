"""Element-wise backwards PyTorch runs as several kernels, each kernel its own (H200 capture
ktp2_h200_default of benchmarks/pricing_coverage.py's fixture_pointwise_grads, against Nsight
Compute): clamp with two number bounds and with one, x ** 2, x ** 3, (|x| + 1) ** 0.5, abs, and
a division by a tensor that takes a gradient, on [256, 1024] fp32."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_prof_parts import measured  # noqa: E402

N = 256 * 1024
MODEL = "fixture_pointwise_grads"


def _backward(op: str) -> list:
    return [(f.flops, f.bytes, moved) for r, f, moved, _ in measured(MODEL, "default", "ktp2_h200")
            if r["op"] == op and r["dir"] == "bprop"]


def test_clamp_backwards_kernel_by_kernel():
    """clamp(-1, 1): the 0-dim zero (4 B; ncu 4,128: its sectors and the launch's reads), x
    compared with each bound (x read, bools written), the tests' logical and, the select; the
    engine's accumulation of x's gradient after (an add). clamp_min(0.1): the zero, one compare,
    the select. Every kernel of 1 MB or more within 1% of ncu's bytes."""
    clamp = _backward("clamp")
    assert [c[:2] for c in clamp[:5]] == [(0, 4), (N, 5 * N), (N, 5 * N), (N, 3 * N), (N, 9 * N + 4)]
    clamp_min = _backward("clamp_min")
    assert [c[:2] for c in clamp_min[:3]] == [(0, 4), (N, 5 * N), (N, 9 * N + 4)]
    assert all(0.99 <= nb / moved <= 1.0 for _, nb, moved in clamp[1:5] + clamp_min[1:3] if moved >= 1 << 20)


def test_power_and_abs_backwards_kernel_by_kernel():
    """x ** 2: 2·x and its product with dY (x.pow(1) is a memcpy); x ** 3 and (|x| + 1) ** 0.5:
    x.pow(e - 1), ·e, ·dY; abs: sgn(x), then its product with dY (before: the unary rule's whole
    on the first kernel, 1.5x ncu, and the second na). Each within 0.5% of ncu's bytes."""
    abs_ = _backward("abs")
    assert [a[:2] for a in abs_] == [(N, 8 * N), (N, 12 * N)] * 2
    powers = _backward("__pow__")
    assert {p[:2] for p in powers} <= {(N, 8 * N), (N, 12 * N)}
    assert all(0.995 <= nb / moved <= 1.0 for _, nb, moved in abs_ + powers)


def test_every_kernel_but_an_extra_accumulation_is_priced():
    """Every kernel of the step carries FLOPs and bytes > 0 but one: a second accumulation of
    x's gradient (an add) inside clamp's backward, which no part of the call names."""
    rows = [(r["op"], r["kShortName"], f) for r, f, _, _ in measured(MODEL, "default", "ktp2_h200")]
    assert [(op, k) for op, k, f in rows if f.flops is None or not f.bytes] == [
        ("clamp", "vectorized_elementwise_kernel")]
