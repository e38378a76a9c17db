"""prof prices kernels of compiled graphs from the FX nodes they compute: a fused kernel's FLOPs
and bytes, decomposed nodes, and the kernels of a synthetic trace. No torch: nodes are written
as the recorder describes them (test_prof_compiled_flops checks the formulas against torch)."""
from __future__ import annotations

from pathlib import Path

from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.pricing.fx_nodes import KernelWork
from pyprof.prof.warnings_tally import Tally
from test_parse_compiled import compiled_step, node, parse_all, t


def test_decomposed_nodes_priced_by_the_torch_formula() -> None:
    """`aten.mul.Tensor` is torch.mul, `aten.sum.dim_IntList` torch.sum (64 x 32 into 64: 2048 - 64
    adds): no entry of their own."""
    work = KernelWork({"nodes": [
        node("aten.mul.Tensor", [t(64, 32, dtype="float32"), t(32, dtype="float32")], t(64, 32, dtype="float32")),
        node("aten.sum.dim_IntList", [t(64, 32, dtype="float32"), [1]], t(64, dtype="float32")),
        node("aten.rsqrt.default", [t(64, dtype="float32")], t(64, dtype="float32")),
        node("prims.convert_element_type.default", [t(64, 32, dtype="float32"), {"dtype": "bfloat16"}], t(64, 32)),
        node("aten.add.Tensor", [t(64, 32, dtype="float32"), t(64, 32, dtype="float32")], t(64, 32, dtype="float32"),
             again=True),  # another kernel carries it
    ], "bytes": 9000})
    assert work.flops == 2048 + (2048 - 64) + 64 + 0
    assert work.bytes == 9000  # Inductor's count, not the nodes' sum
    assert work.warnings == []


def test_inductor_prims_of_dropout_softmax_and_flip() -> None:
    """The prims Inductor's decompositions leave in compiled graphs, as the H200 coverage capture
    recorded them (TransformerEncoder's dropout, nn.MultiheadAttention's softmax and its backward,
    a bidirectional LSTM's flip, a select's backward): each node's own work."""
    f32 = "float32"
    nodes = {
        # the graph's seeds drawn, one looked up, 262,144 uniform values: integer work, written once
        "seeds": node("prims.inductor_seeds.default", [12, {"device": "cuda:0"}], t(12, dtype="int64")),
        "lookup": node("prims.inductor_lookup_seed.default", [t(12, dtype="int64"), 3], t(dtype="int64")),
        "random": node("prims.inductor_random.default", [[128, 8, 256], t(dtype="int64"), "rand"], t(128, 8, 256, dtype=f32)),
        # max and sum of exp(x - max) over the last dim: logsumexp's 3 per element, both results written
        "online": node("prims.prepare_softmax_online.default", [t(32, 64, 80, dtype=f32), -1],
                       [t(32, 64, 1, dtype=f32), t(32, 64, 1, dtype=f32)]),
        "fma": node("prims.fma.default", [t(32, 64, 80, dtype=f32), t(32, 64, 1, dtype=f32), t(32, 64, 80, dtype=f32)],
                    t(32, 64, 80, dtype=f32)),
        "rev": node("prims.rev.default", [t(50, 16, 1024, dtype=f32), [0]], t(50, 16, 1024, dtype=f32)),
        "select_scatter": node("aten.select_scatter.default", [t(3, 128, 8, 256, dtype=f32), t(128, 8, 256, dtype=f32), 0, 2],
                               t(3, 128, 8, 256, dtype=f32)),
    }
    costs = {k: (w.flops, w.bytes) for k, w in ((k, KernelWork({"nodes": [n]})) for k, n in nodes.items())}
    assert costs == {"seeds": (0, 96), "lookup": (0, 8), "random": (0, 262144 * 4),
                     "online": (3 * 163840, 163840 * 4 + 2 * 2048 * 4), "fma": (2 * 163840, 3 * 163840 * 4 + 2048 * 4),
                     "rev": (0, 2 * 819200 * 4), "select_scatter": (0, 2 * 786432 * 4)}


def test_unknown_node_makes_the_kernel_na() -> None:
    work = KernelWork({"nodes": [node("aten.mul.Tensor", [t(4), t(4)], t(4)),
                                 node("aten.frobnicate.default", [t(4)], t(4))], "bytes": 24})
    assert work.flops is None and work.bytes == 24
    assert work.warnings == [("unknown op", "aten.frobnicate.default")]


def test_fused_and_library_kernels_of_a_trace(tmp_path: Path) -> None:
    compiled_step(tmp_path / "c.sqlite")
    recs, _ = parse_all(tmp_path / "c.sqlite")
    tally = Tally()
    an = Analyzer(tally)
    got = []
    for r in recs:
        f = an.facts(r)
        got.append((r["kShortName"], f.flops, f.bytes, f.tc, f.dtype))
    assert got == [
        # var_mean 3 per element + sub 1 per element over 64x32; the cast 0; Inductor's bytes
        ("triton_per_fused_native_layer_norm_0", 3 * 2048 + 2048, 12544, None, "float32"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 64 * 16 * 32, (64 * 32 + 32 * 16 + 64 * 16) * 2, True, "bfloat16"),
        ("triton_poi_fused_relu_1", 1024, 4096, None, "bfloat16"),
        ("triton_poi_fused_relu_1", 1024, 6144, None, "bfloat16"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 64 * 32 * 16, (64 * 16 + 16 * 32 + 64 * 32) * 2, True, "bfloat16"),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", 2 * 32 * 16 * 64, (32 * 64 + 64 * 16 + 32 * 16) * 2, True, "bfloat16"),
        # a helper of the same mm call whose name gives no split-K tile: its work is not known
        ("splitKreduce_kernel", None, None, None, "bfloat16"),
        ("triton_red_fused_sum_2", 1024 - 16, 2112, None, "bfloat16"),
    ]
    assert tally.warnings == {}


def test_malformed_compiled_field_is_not_fatal() -> None:
    """A record file edited by hand: nodes that are not objects count nothing, a `compiled` that
    is not an object is ignored (the record is priced as any other)."""
    an = Analyzer(Tally())
    f = an.facts({"kShortName": "triton_poi_fused_0", "compiled": {"nodes": ["x", 3], "bytes": "y"}})
    assert (f.flops, f.bytes) == (0, 0)
    f = an.facts({"kShortName": "triton_poi_fused_0", "compiled": [1, 2], "marker": None})
    assert (f.flops, f.bytes) == (None, None)
