"""The ATen formulas that price compiled graphs' FX nodes, checked against torch.utils.flop_counter
on the same ops and meta tensors, encoded as the recorder encodes them."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="compared with torch.utils.flop_counter on real ATen ops: needs torch")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from pyprof.nvtx.marker import encode  # noqa: E402
from pyprof.prof.pricing.fx_nodes import node_cost  # noqa: E402

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


def test_strided_1x1_convolution_nodes_read_the_input_their_taps_touch() -> None:
    """ResNet's downsample compiled: the forward node reads a quarter of the 8x64x56x56 bf16
    input, and its backward node's weight gradient too, while its data gradient writes all of dX."""
    x, w, dy = meta(8, 64, 56, 56), meta(128, 64, 1, 1), meta(8, 128, 28, 28)
    quarter, full, out, wn = 8 * 64 * 28 * 28, 8 * 64 * 56 * 56, 8 * 128 * 28 * 28, 128 * 64
    fwd, _ = node_cost(as_node(aten.convolution.default, x, w, None, [2, 2], [0, 0], [1, 1], False, [0, 0], 1))
    assert fwd.bytes == (quarter + wn + out) * 2
    bwd, _ = node_cost(as_node(aten.convolution_backward.default, dy, x, w, None, [2, 2], [0, 0], [1, 1], False,
                               [0, 0], 1, [True, True, False]))
    assert bwd.bytes == (full + wn + out) * 2 + (quarter + wn + out) * 2
