"""A dynamic-shape graph call's generated kernels sized from its library calls' ranges
(pyprof/prof/pricing/call_sizes.py): the table's symbolic dims bound by what a range ran with."""
from __future__ import annotations

import pytest

from pyprof.prof.pricing.call_sizes import _evaluate
from test_prof_helpers import analyse

BF16 = "bfloat16"


@pytest.mark.parametrize("expr,value", [
    ("s33", 125), ("2*s33", 250), ("s33 + 1", 126), ("s33*s7", 1000), ("-s7 + 9", 1), ("(s33//2)", 62),
    ("FloorDiv(s33, 2)", 62), ("CeilDiv(s33, 2)", 63), ("Max(1, s33 - 200)", 1), ("Min(s7, 4)", 4),
    # Unbound, and anything beyond integers' arithmetic: unknown, never run.
    ("s99", None), ("s33**2", None), ("__import__('os').getpid()", None), ("s33.bit_length()", None),
    ("s33 / 2", None), ("ModularIndexing(s33, 1, 4)", None), ("(", None), ("'125'", None),
    # A record's dims are data: a number or a list where an expression belongs is none.
    (125, None), (["s33"], None), ({"s33": 1}, None),
])
def test_a_symbolic_size_is_read_not_run(expr, value):
    assert _evaluate(expr, {"s33": 125, "s7": 8}) == value


def node(op: str, args: list, out: dict, dims: dict) -> dict:
    return {"op": op, "args": args, "out": out, "hinted": True, "dims": dims}


def tensor(*shape: int, dtype: str = BF16) -> dict:
    return {"shape": list(shape), "dtype": dtype}


def kernel(name: str, run: int, call: int, nodes: list, extern: bool, torch_ops: list | None = None,
           nbytes: int | None = None) -> dict:
    return {"v": 1, "kind": "kernel", "kShortName": name, "kLongName": name, "kDuration": 2000, "kStart": 1000,
            "kEnd": 3000, "device": 0, "stream": 7, "grid": [64, 1, 1], "block": [128, 1, 1], "pid": 615, "tid": 615,
            "correlationId": 16400 + call, "dir": "fprop", "mod": "aten", "op": "x", "marker": None, "fwd": None,
            "torchOps": torch_ops or [], "subSeqId": 0, "layer": [], "module": "up.0", "ranges": [],
            "gpu": {"name": "NVIDIA H200", "memoryBandwidth": 4814304000000, "smCount": 132, "clockRate": 1980000000},
            "compiled": {"graph": 11, "call": call, "name": name, "extern": extern, "bytes": nbytes, "nodes": nodes,
                         "bwd": False, "run": run, "sub": 0}}


# The MoE expert's graph (H200, compiled for dynamic rows, hint 124): x[rows] cast to bf16, then
# up's addmm, then GELU. This call ran 125 rows.
CAST = node("prims.convert_element_type.default", [tensor(124, 256, dtype="float32"), {"dtype": BF16}],
            tensor(124, 256), {"args": [["s33", None], None], "out": ["s33", None]})
ADDMM = node("aten.addmm.default", [tensor(512), tensor(124, 256), tensor(256, 512)], tensor(124, 512),
             {"args": [None, ["s33", None], None], "out": ["s33", None]})
GELU = node("aten.gelu.default", [tensor(124, 512)], tensor(124, 512), {"args": [["s33", None]], "out": ["s33", None]})
RANGE = [{"name": "aten::addmm", "opId": 3, "sizes": [[512], [125, 256], [256, 512], [], [], [125, 512]]}]


def step(run: int) -> list:
    return [kernel("triton_poi_fused__to_copy_0", run, 0, [CAST], False),
            kernel("nvjet_sm90_tst_8x64_64x16_2x1_v_bz_bias_TNN", run, 1, [ADDMM], True, RANGE),
            kernel("triton_poi_fused_gelu_1", run, 2, [GELU], False)]


def test_generated_kernels_take_the_rows_the_call_ran():
    """The cast before the library call (read ahead) and the GELU after it are sized by the 125
    rows addmm's range gave s33, not the hint's 124: the cast reads 125 x 256 fp32 and writes them
    in bf16; GELU reads and writes 125 x 512 bf16. The addmm takes its range's sizes."""
    facts, _ = analyse(step(16414))
    assert [f.bytes for f in facts] == [125 * 256 * (4 + 2), 2 * (125 * 256 + 256 * 512 + 125 * 512 + 512),
                                        125 * 512 * 2 * 2]
    assert facts[1].flops == 2 * 125 * 256 * 512


def test_each_call_binds_its_own_symbols_and_a_call_without_a_library_range_keeps_the_hint():
    """A second call of the graph with 113 rows sizes its kernels by 113; a call whose library
    kernel has no range (captured without pyprof's op ranges) leaves the hint, 124."""
    ranged = step(16414)
    second = step(16500)
    second[1] = {**second[1], "torchOps": [{**RANGE[0], "sizes": [[512], [113, 256], [256, 512], [], [], [113, 512]]}]}
    bare = step(16600)
    bare[1] = {**bare[1], "torchOps": []}
    facts, _ = analyse(ranged + second + bare)
    assert [f.bytes for f in facts[3::3]] == [113 * 256 * 6, 124 * 256 * 6]
    assert [f.bytes for f in facts[5::3]] == [113 * 512 * 4, 124 * 512 * 4]


def test_dims_no_table_writes_leave_the_hint():
    """A record's `dims` is data: lists nested 900 deep, an expression that does not parse, a
    string where a list belongs, each leave their tensors at the hint, and nothing fails."""
    deep: list = []
    inner = deep
    for _ in range(900):
        inner.append([])
        inner = inner[0]
    recs = step(16414)
    recs[0]["compiled"]["nodes"][0] = {**CAST, "dims": {"args": deep, "out": deep}}
    recs[2]["compiled"]["nodes"][0] = {**GELU, "dims": {"args": [["s33*"]], "out": "(((("}}
    facts, _ = analyse(recs)
    assert [f.bytes for f in facts[::2]] == [124 * 256 * 6, 124 * 512 * 4]
