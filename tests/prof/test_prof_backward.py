"""Backward formulas of binary element-wise ops, reductions, pooling and interpolation
(docs/prof.md, "FLOPs and bytes"). Every expected number is derived by hand in the test from the
shapes: fp32 4 B, fp16/bf16 2 B, int64 indices 8 B. Every floating point tensor operand is taken
to need a gradient (markers do not record requires_grad)."""
from __future__ import annotations

import pytest

from pyprof.prof.pricing.ops import Call, lookup
from test_prof_helpers import described, dtype, kernels, prof_text
from test_prof_helpers import tensor as t

FN = "torch.nn.functional"
F16, BF16, I64 = "float16", "bfloat16", "int64"


def bwd(mod, op, *args, **kwargs):
    c = lookup(mod, op)(Call(described(mod, op, *args, **kwargs)))
    return c.bwd_flops, c.bwd_bytes


BINARY = [
    # add, [4,5] + [5]: dX = dY (0), dW = dY summed over 4 rows: 20 - 5 adds.
    # Bytes: dY 80 read, dX 80 and dW 20 written.
    (("torch", "add", t(4, 5), t(5)), {}, (15, 80 + 80 + 20)),
    # The same as a dunder, reflected, and in place: the same node.
    (("Tensor", "__add__", t(4, 5), t(5)), {}, (15, 180)),
    (("Tensor", "__iadd__", t(4, 5), t(5)), {}, (15, 180)),
    (("Tensor", "add_", t(4, 5), t(5)), {}, (15, 180)),
    # alpha=2, fp16 [8,1] + [1,8] -> [8,8] (64): dX summed 64 -> 8 (56 adds); dW = 2·dY (64)
    # then summed 64 -> 8 (56). Bytes: dY 128, dX 16, dW 16.
    (("torch", "add", t(8, 1, dtype=F16), t(1, 8, dtype=F16)), {"alpha": 2}, (56 + 64 + 56, 128 + 16 + 16)),
    # fp32 + bf16 (the GPT residual): no broadcast, 0 FLOPs; dY fp32 24, dX fp32 24, dW bf16 12.
    (("Tensor", "__add__", t(2, 3), t(2, 3, dtype=BF16)), {}, (0, 24 + 24 + 12)),
    # sub: dW = -dY, 12 negations; dY, dX, dW 48 B each.
    (("torch", "sub", t(3, 4), t(3, 4)), {}, (12, 3 * 48)),
    # 1 - x (__rsub__): the tensor is the subtrahend: 12 negations; dY read, dX written.
    (("Tensor", "__rsub__", t(3, 4), 1.0), {}, (12, 2 * 48)),
    # mul, [4,5] * [4,1]: dX = dY·W (20), dW = dY·X (20) summed over 5 columns (20 - 4 = 16).
    # Bytes: dY 80, X 80, W 16 read; dX 80, dW 16 written.
    (("Tensor", "__mul__", t(4, 5), t(4, 1)), {}, (20 + 20 + 16, 80 + 80 + 16 + 80 + 16)),
    (("Tensor", "__rmul__", t(4, 5), t(4, 1)), {}, (56, 272)),
    # bf16 x·2.0: dX = 2·dY, 20 multiplies; dY 40 read, dX 40 written (a scalar is not read).
    (("Tensor", "__mul__", t(4, 5, dtype=BF16), 2.0), {}, (20, 80)),
    # fp32 x · int64 idx: only x takes a gradient, dX = dY·idx: dY 80 and idx 160 read, dX 80.
    (("torch", "mul", t(4, 5), t(4, 5, dtype=I64)), {}, (20, 80 + 160 + 80)),
    # div, [4,5] / [5]: dX = dY/W (20); dW = -dY·((X/W)/W), four kernels of one operation an
    # element (80), summed 20 -> 5 (15). Bytes: dY 80, X 80, W 20 read; dX 80, dW 20 written.
    (("torch", "div", t(4, 5), t(5)), {}, (20 + 80 + 15, 80 + 80 + 20 + 80 + 20)),
    (("Tensor", "__truediv__", t(4, 5), t(5)), {}, (115, 280)),
    (("Tensor", "__itruediv__", t(4, 5), t(5)), {}, (115, 280)),
    # 2 / x (__rtruediv__): x is the divisor, dX = -dY·2/x²: 60; dY and x read, dX written.
    (("Tensor", "__rtruediv__", t(4, 5), 2.0), {}, (60, 3 * 80)),
]


@pytest.mark.parametrize("args,kwargs,expected", BINARY)
def test_binary_backward(args, kwargs, expected):
    assert bwd(*args, **kwargs) == expected


BOOL = "bool"
MORE = [
    # pow, [4,5] ** [5]: dX = dY·e·x^(e-1) 3·20; dE = dY·x^e·ln(x) 3·20, summed 20 -> 5 (15).
    # Bytes: dY 80 read, dX 80 and dE 20 written, X 80 and E 20 read.
    (("torch", "pow", t(4, 5), t(5)), {}, (135, 280)),
    # x ** 2.0: only dX, dY·(2·x): x.pow(1) is a copy (a memcpy), then two products (40); dY, X
    # read, dX written. x ** 3.0: x.pow(2) too (60).
    (("Tensor", "__pow__", t(4, 5), 2.0), {}, (40, 240)),
    (("Tensor", "__pow__", t(4, 5), 3.0), {}, (60, 240)),
    # maximum: each gradient where(x == w, dY / 2, dY).masked_fill_(x < w, 0), five kernels of
    # one operation an element: 200; dY, X, W read, dX, dW written, 80 B each.
    (("torch", "maximum", t(4, 5), t(4, 5)), {}, (200, 400)),
    (("torch", "fmax", t(4, 5), t(4, 5)), {}, (80, 400)),
    # where(cond [4,5] bool, x [4,5], y [5]): dX 20 selects, dy 20 selects summed 20 -> 5 (15);
    # dY 80 and the condition 20 read, dX 80 and dy 20 written. The method form is the same node.
    (("torch", "where", t(4, 5, dtype=BOOL), t(4, 5), t(5)), {}, (55, 200)),
    (("Tensor", "where", t(4, 5), t(4, 5, dtype=BOOL), t(5)), {}, (55, 200)),
    # lerp with a scalar weight: dX = dY·(1-w) 40, dEnd = dY·w 20; dY read, dX and dEnd written.
    (("torch", "lerp", t(4, 5), t(4, 5), 0.3), {}, (60, 240)),
    # ... with a tensor weight: dW = dY·(end - x) 40 more; weight, x and end read too.
    (("torch", "lerp", t(4, 5), t(4, 5), t(4, 5)), {}, (100, 560)),
    # addcmul(x, t1, t2, value=0.5): dT1 = dY·0.5·t2 and dT2 2 per element each, dX = dY free;
    # dY, t1, t2 read, three gradients written. value 1: 1 per element each.
    (("torch", "addcmul", t(4, 5), t(4, 5), t(4, 5)), {"value": 0.5}, (80, 480)),
    (("Tensor", "addcmul_", t(4, 5), t(4, 5), t(4, 5)), {}, (40, 480)),
    # addcdiv: dT1 = dY·v/t2 2, dT2 = -dY·v·t1/t2² 4 per element.
    (("torch", "addcdiv", t(4, 5), t(4, 5), t(4, 5)), {}, (120, 480)),
]


@pytest.mark.parametrize("args,kwargs,expected", MORE)
def test_pow_maximum_where_lerp_addcmul_addcdiv_backward(args, kwargs, expected):
    assert bwd(*args, **kwargs) == expected


def test_binary_ops_without_a_backward_formula_stay_na():
    assert bwd("torch", "div", t(4, 5), t(5), rounding_mode="floor") == (None, None)  # zero gradient
    assert bwd("torch", "atan2", t(4, 5), t(5)) == (None, None)
    assert bwd("torch", "add", t(4, 5, dtype=I64), t(5, dtype=I64)) == (None, None)  # nothing differentiable


X = t(4, 5, 6)  # 120 elements, 480 B
REDUCTIONS = [
    # sum over dim 1 -> [4,6] (24): dY expanded, 0 FLOPs; dY 96 read, dX 480 written.
    (("torch", "sum", X, 1), {}, (0, 96 + 480)),
    # mean over (0, 2) -> 5: one scale per input element; dY 20, dX 480.
    (("torch", "mean", X), {"dim": (0, 2), "keepdim": True}, (120, 20 + 480)),
    # fp16 [4,5] summed in fp32 to one element: dY 4 B (fp32), dX 40 B (fp16).
    (("torch", "sum", t(4, 5, dtype=F16)), {"dtype": dtype("float32")}, (0, 4 + 40)),
    # prod over dim 1: dY·Y/X, 2 per element; dY 96, X 480, Y 96 read, dX 480 written.
    (("torch", "prod", X, 1), {}, (240, 96 + 480 + 96 + 480)),
    # amax over the last dim of [4,5] -> 4: compare, count, multiply per element (60) + one divide
    # per output (4); dY 16, X 80, Y 16 read, dX 80 written.
    (("torch", "amax", t(4, 5)), {"dim": -1}, (64, 16 + 80 + 16 + 80)),
    # max with a dim: dY scattered through the indices, 0 FLOPs; dY 96, indices 24·8 read, dX 480.
    (("torch", "max", X, 1), {}, (0, 96 + 192 + 480)),
    # max of everything: as amax with one output: 3·20 + 1; dY 4, X 80, Y 4, dX 80.
    (("torch", "max", t(4, 5)), {}, (61, 4 + 80 + 4 + 80)),
    # var over dim 1: 4 per element (mean recomputed, subtract, times dY, scale); dY 96, X 480, dX 480.
    (("torch", "var", X, 1), {}, (480, 96 + 480 + 480)),
    # std: var's backward after dY / (2·Y) per output (2 · 24); Y 96 read too.
    (("torch", "std", X, 1), {}, (480 + 48, 96 + 480 + 96 + 480)),
    # 2-norm of [4,5] as PyTorch's four kernels (elementwise.norm_backward_stages): X / Y (20; X
    # and Y read, 80 written), Y == 0 (1; Y read, a bool written), the masked fill (X-sized read
    # and written, the bool read), dY times it (20; 4 + 80 read, 80 written).
    (("torch", "norm", t(4, 5)), {}, (41, 164 + 5 + 161 + 164)),
    # logsumexp over dim 1 of [4,5]: dY·exp(X - Y), 3 per element; dY 16, X 80, Y 16, dX 80.
    (("torch", "logsumexp", t(4, 5), 1), {}, (60, 192)),
]


@pytest.mark.parametrize("args,kwargs,expected", REDUCTIONS)
def test_reduction_backward(args, kwargs, expected):
    assert bwd(*args, **kwargs) == expected


def test_norm_backward_for_other_p():
    """Whole [4,5] (20 elements, 80 B; the norm one element, 4 B). p=1: dY·sign(X), 2 per
    element; dY and X read, dX written. p=3: dY·X·|X| / Y², 5 per element and one power of Y;
    Y read too."""
    assert bwd("torch", "norm", t(4, 5), 1) == (40, 4 + 80 + 80)
    assert bwd("torch", "norm", t(4, 5), 3) == (101, 4 + 80 + 80 + 4)


def test_reductions_without_a_gradient_or_formula_stay_na():
    assert bwd("torch", "argmax", t(4, 5), 1) == (None, None)  # no gradient
    assert bwd("torch", "norm", t(4, 5), 0) == (None, None)  # p=0: no gradient
    assert bwd("torch", "nansum", t(4, 5)) == (None, None)


POOLING = [
    # max_pool2d [2,3,9,9], k3 s2 ceil_mode -> 4x4 per plane, 96 outputs: one add per dY element
    # scattered through the indices; dY 96·4 and indices 96·8 read, dX 2·3·81·4 written.
    ((FN, "max_pool2d", t(2, 3, 9, 9)), {"kernel_size": 3, "stride": 2, "ceil_mode": True},
     (96, 384 + 768 + 1944)),
    # avg_pool2d [2,3,9,10], k2 -> 4x5, 120 outputs: dY / 4 (1) added into 4 taps (4): 120·5;
    # dY 480 read, dX 2·3·90·4 = 2160 written.
    ((FN, "avg_pool2d", t(2, 3, 9, 10)), {"kernel_size": 2}, (600, 480 + 2160)),
    # adaptive_avg_pool2d [2,3,10,7] -> (3,4): windows 4+4+4 rows, 2+3+3+2 columns, so 12·10 taps
    # per plane (6 planes: 720) plus a divide per output (72); dY 288, dX 1680.
    ((FN, "adaptive_avg_pool2d", t(2, 3, 10, 7)), {"output_size": (3, 4)}, (792, 288 + 1680)),
    # to 1x1, a global average: PyTorch's mean, whose backward multiplies dY expanded by 1/70:
    # one multiply per dX element (420); dY 24, dX 1680.
    ((FN, "adaptive_avg_pool2d", t(2, 3, 10, 7)), {"output_size": 1}, (420, 24 + 1680)),
    # adaptive_max_pool1d [2,4,10] -> 3: 24 outputs, one add each; dY 96, indices 192, dX 320.
    ((FN, "adaptive_max_pool1d", t(2, 4, 10)), {"output_size": 3}, (24, 96 + 192 + 320)),
    # bilinear [1,3,5,6] x2 -> 3·10·12 = 360 outputs, 4 taps each, dY·w added into each: 2·4·360;
    # dY 1440 read, dX 360 written.
    ((FN, "interpolate", t(1, 3, 5, 6)), {"scale_factor": 2, "mode": "bilinear"}, (2880, 1440 + 360)),
    # nearest [1,3,5,6] -> (7,9): 189 outputs, each dY added into its source; dY 756, dX 360.
    ((FN, "interpolate", t(1, 3, 5, 6)), {"size": (7, 9), "mode": "nearest"}, (189, 756 + 360)),
    # trilinear [1,2,3,4,5] x2 -> 2·6·8·10 = 960 outputs, 8 taps: 2·8·960; dY 3840, dX 480.
    ((FN, "interpolate", t(1, 2, 3, 4, 5)), {"scale_factor": 2, "mode": "trilinear"}, (15360, 3840 + 480)),
]


@pytest.mark.parametrize("args,kwargs,expected", POOLING)
def test_pooling_and_interpolation_backward(args, kwargs, expected):
    assert bwd(*args, **kwargs) == expected


def test_backward_kernels_print_numbers_not_na():
    """End to end: the bprop kernels of these ops print the backward formula on the first kernel
    of the node, where they printed na before; the node's other kernels, whose share is not
    known here, print na (never a guessed 0)."""
    ops = [
        # dX is dY itself (no kernel); dOther dY summed to [5]: 15 adds, dY read, dOther written.
        (described("Tensor", "__add__", t(4, 5), t(5)), ["reduce_kernel"], "15", "100"),
        (described("torch", "sum", t(4, 5, 6), 1), ["elementwise_kernel"], "0", "576"),
        (described(FN, "max_pool2d", t(2, 3, 9, 9), 3, 2, ceil_mode=True),
         ["vectorized_elementwise_kernel", "max_pool_backward_nchw"], "96", "3096"),
        (described(FN, "interpolate", t(1, 3, 5, 6), scale_factor=2, mode="bilinear"),
         ["upsample_bilinear2d_backward_out_frame"], "2880", "1800"),
    ]
    recs, expected = [], []
    for tid, (m, names, flops, nbytes) in enumerate(ops):
        recs += kernels(m, names, direction="bprop", tid=tid)
        expected += [["bprop", m["op"], flops, nbytes]] + [["bprop", m["op"], "na", "na"]] * (len(names) - 1)
    out, err = prof_text(recs, "dir,op,flops,bytes")
    assert [line.split() for line in out.splitlines()[1:]] == expected
    assert err.strip() == ""


def test_clamp_backward_with_number_bounds_runs_its_kernels_in_turn():
    """clamp's backward with numbers for bounds, where(x >= min [and x <= max], dY, 0) on [4, 5]
    fp32: the 0-dim zero (4 B), a compare a bound (x read, bools written), the two tests' logical
    and (both read, one written), the select (bools, dY and the zero read, dX written); a clamp
    with a tensor bound keeps the unary rule (one kernel)."""
    x = t(4, 5)
    one = lookup("Tensor", "clamp_min")(Call({"v": 1, "kind": "op", "mod": "Tensor", "op": "clamp_min",
                                             "args": [x, 1e-9]}))
    assert one.bwd_stages == (("FillFunctor", 0, 4), ("compare_scalar_kernel", 20, 100), ("where_kernel", 20, 184))
    assert (one.bwd_flops, one.bwd_bytes) == (40, 288)
    two = lookup("torch", "clamp")(Call({"v": 1, "kind": "op", "mod": "torch", "op": "clamp", "args": [x, -1.0, 1.0]}))
    assert [s[0] for s in two.bwd_stages] == ["FillFunctor", "compare_scalar_kernel", "compare_scalar_kernel",
                                              "logical_and", "where_kernel"]
    assert two.bwd_flops == 80
    tensor_bound = lookup("torch", "clamp")(Call({"v": 1, "kind": "op", "mod": "torch", "op": "clamp",
                                                  "args": [x, t(4, 5)]}))
    assert tensor_bound.bwd_stages is None and tensor_bound.bwd_flops == 20


def test_unary_backwards_of_several_kernels_run_them_in_turn():
    """derivatives.yaml's compositions on [4, 5] fp32, each kernel its reads and 20 elements
    written: sqrt's 2·result then dY / that; cos's sin, its negation, the product; sign's
    zeros_like (a fill, nothing read); exp's one product keeps the unary rule."""
    def of(op):
        return lookup("torch", op)(Call({"v": 1, "kind": "op", "mod": "torch", "op": op, "args": [t(4, 5)]}))
    assert of("sqrt").bwd_stages == (("elementwise_kernel", 20, 160), ("elementwise_kernel", 20, 240))
    assert (of("sqrt").bwd_flops, of("sqrt").bwd_bytes) == (40, 240)
    assert [s[1:] for s in of("cos").bwd_stages] == [(20, 160), (20, 160), (20, 240)]
    assert (of("sign").bwd_stages, of("sign").bwd_flops, of("sign").bwd_bytes) == (
        (("elementwise_kernel", 0, 80),), 0, 80)
    assert (of("exp").bwd_stages, of("exp").bwd_flops, of("exp").bwd_bytes) == (None, 20, 240)
