"""prof prices kernels of compiled graphs from the FX nodes they compute: ATen formulas checked
against torch.utils.flop_counter, and a fused kernel's FLOPs and bytes over a synthetic trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from pyprof.nvtx.marker import encode
from pyprof.prof.analysis import Analyzer
from pyprof.prof.compiled import KernelWork, node_cost
from pyprof.prof.summary import Summary
from test_parse_compiled import compiled_step, node, parse_all, t

aten = torch.ops.aten


def meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def as_node(op: torch._ops.OpOverload, *args) -> dict:
    """The node of a compiled kernel for the call op(*args), encoded as the recorder does."""
    return {"op": str(op), "args": json.loads(encode(list(args)))}


def counted(op: torch._ops.OpOverload, *args) -> int:
    with FlopCounterMode(display=False) as mode:
        op(*args)
    return mode.get_total_flops()


q = meta(2, 4, 128, 64)
x4 = meta(8, 16, 32, 32)
w4 = meta(32, 16, 3, 3)
CASES = [
    (aten.mm.default, (meta(64, 32), meta(32, 16))),
    (aten.addmm.default, (meta(16), meta(64, 32), meta(32, 16))),
    (aten.bmm.default, (meta(4, 64, 32), meta(4, 32, 16))),
    (aten.convolution.default, (x4, w4, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)),
    (aten.convolution.default, (x4, meta(16, 32, 3, 3), None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1)),
    (aten.convolution_backward.default, (meta(8, 32, 16, 16), x4, w4, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 1,
                                         [True, True, False])),
    (aten._scaled_dot_product_flash_attention.default, (q, q, q, 0.0, False)),
    (aten._scaled_dot_product_efficient_attention.default, (q, q, q, None, True, 0.0, False)),
    (aten._scaled_dot_product_cudnn_attention.default, (q, q, q, None, True, 0.0, False)),
]


@pytest.mark.parametrize("op,args", CASES, ids=[str(c[0]) for c in CASES])
def test_aten_nodes_match_flop_counter(op, args) -> None:
    cost, warning = node_cost(as_node(op, *args))
    assert warning is None
    assert cost.flops == counted(op, *args)


def test_attention_backward_matches_flop_counter() -> None:
    out = aten._scaled_dot_product_flash_attention(q, q, q, 0.0, False)
    args = (meta(2, 4, 128, 64), q, q, q, out[0], out[1], out[2], out[3], out[4], out[5], 0.0, False, out[6], out[7])
    op = aten._scaled_dot_product_flash_attention_backward.default
    cost, _ = node_cost(as_node(op, *args))
    assert cost.flops == counted(op, *args) == 83886080
    causal = list(args)
    causal[11] = True
    assert node_cost(as_node(op, *causal))[0].flops == 83886080 // 2  # flop_counter ignores is_causal


def test_decomposed_nodes_priced_by_the_torch_formula() -> None:
    """`aten.mul.Tensor` is torch.mul, `aten.sum.dim_IntList` torch.sum: no entry of their own."""
    work = KernelWork({"nodes": [
        node("aten.mul.Tensor", [t(64, 32, dtype="float32"), t(32, dtype="float32")], t(64, 32, dtype="float32")),
        node("aten.sum.dim_IntList", [t(64, 32, dtype="float32"), [1]], t(64, dtype="float32")),
        node("aten.rsqrt.default", [t(64, dtype="float32")], t(64, dtype="float32")),
        node("prims.convert_element_type.default", [t(64, 32, dtype="float32"), {"dtype": "bfloat16"}], t(64, 32)),
        node("aten.add.Tensor", [t(64, 32, dtype="float32"), t(64, 32, dtype="float32")], t(64, 32, dtype="float32"),
             again=True),  # another kernel carries it
    ], "bytes": 9000})
    assert work.flops == 2048 + 2048 + 64 + 0
    assert work.bytes == 9000  # Inductor's count, not the nodes' sum
    assert work.warnings == []


def test_unknown_node_makes_the_kernel_na() -> None:
    work = KernelWork({"nodes": [node("aten.mul.Tensor", [t(4), t(4)], t(4)),
                                 node("aten.frobnicate.default", [t(4)], t(4))], "bytes": 24})
    assert work.flops is None and work.bytes == 24
    assert work.warnings == [("unknown op", "aten.frobnicate.default")]


def test_fused_and_library_kernels_of_a_trace(tmp_path: Path) -> None:
    compiled_step(tmp_path / "c.sqlite")
    recs, _ = parse_all(tmp_path / "c.sqlite")
    summary = Summary()
    an = Analyzer(summary)
    got = []
    for r in recs:
        f = an.facts(r)
        got.append((r["kShortName"], f.flops, f.bytes, f.tc, f.dtype))
    assert got == [
        # var_mean 3 per element + sub 1 per element over 64x32; the cast 0; Inductor's bytes
        ("triton_per_fused_native_layer_norm_0", 3 * 2048 + 2048, 12544, "-", "float32"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 64 * 16 * 32, (64 * 32 + 32 * 16 + 64 * 16) * 2, "1", "bfloat16"),
        ("triton_poi_fused_relu_1", 1024, 4096, "-", "bfloat16"),
        ("triton_poi_fused_relu_1", 1024, 6144, "-", "bfloat16"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 64 * 32 * 16, (64 * 16 + 16 * 32 + 64 * 32) * 2, "1", "bfloat16"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 32 * 16 * 64, (32 * 64 + 64 * 16 + 32 * 16) * 2, "1", "bfloat16"),
        ("splitKreduce_kernel", 0, 0, "-", "bfloat16"),  # a helper of the same mm call
        ("triton_red_fused_sum_2", 1024, 2112, "-", "bfloat16"),
    ]
    assert summary.warnings == {}


def test_malformed_compiled_field_is_not_fatal() -> None:
    """A record file edited by hand: nodes that are not objects count nothing, a `compiled` that
    is not an object is ignored (the record is priced as any other)."""
    an = Analyzer(Summary())
    f = an.facts({"kShortName": "triton_poi_fused_0", "compiled": {"nodes": ["x", 3], "bytes": "y"}})
    assert (f.flops, f.bytes) == (0, 0)
    f = an.facts({"kShortName": "triton_poi_fused_0", "compiled": [1, 2], "marker": None})
    assert (f.flops, f.bytes) == (None, None)
