"""parse joins kernels of compiled graphs to the compile-time table in the trace (synthetic exports)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from nsys_synth import MARK, SynthExport, marker, torch_text
from pyprof.parse import Export, Stats, records

F16 = "bfloat16"
CALL = "## Call CompiledFxGraph None ##"


def t(*shape: int, dtype: str = F16) -> dict:
    return {"shape": list(shape), "dtype": dtype}


def node(op: str, args: list, out: Any, module: str | None = None, site: str | None = None, orig: str | None = None,
         again: bool = False) -> dict:
    n: dict = {"op": op, "args": args, "out": out}
    if orig:
        n["orig"] = orig
    if module:
        n["module"] = module
    if site:
        n["site"] = site
    if again:
        n["again"] = True
    return n


LN = [node("aten.var_mean.correction", [t(64, 32, dtype="float32"), [1]], [t(64, 1, dtype="float32")] * 2, "ln",
           "m.py:5", "aten.native_layer_norm.default"),
      node("aten.sub.Tensor", [t(64, 32, dtype="float32"), t(64, 1, dtype="float32")], t(64, 32, dtype="float32"),
           "ln", "m.py:5", "aten.native_layer_norm.default"),
      node("prims.convert_element_type.default", [t(64, 32, dtype="float32"), {"dtype": F16}], t(64, 32), "fc",
           "m.py:6", "aten._to_copy.default")]
MM = node("aten.mm.default", [t(64, 32), t(32, 16)], t(64, 16), "fc", "m.py:6")
RELU = node("aten.relu.default", [t(64, 16)], t(64, 16), "act", "m.py:7")
# The backward graph numbers its kernels from 0 too: triton_poi_fused_0 is in both graphs.
BWD_A = node("aten.threshold_backward.default", [t(64, 16), t(64, 16), 0], t(64, 16), "act", "m.py:7")
DX = node("aten.mm.default", [t(64, 16), t(16, 32)], t(64, 32), "fc", "m.py:6")
DW = node("aten.mm.default", [t(32, 64), t(64, 16)], t(32, 16), "fc", "m.py:6")
BWD_C = node("aten.sum.dim_IntList", [t(64, 16), [0]], t(16), "fc", "m.py:6")

TABLE = [
    marker("graph", graph=0, bwd=False, device="cuda", cudagraphs=False, calls=3),
    marker("kernel", graph=0, call=0, name="triton_per_fused_native_layer_norm_0", extern=False, bytes=12544, nodes=LN),
    marker("kernel", graph=0, call=1, name="extern_kernels.mm", extern=True, nodes=[MM]),
    marker("kernel", graph=0, call=2, name="triton_poi_fused_relu_1", extern=False, bytes=4096, nodes=[RELU]),
    marker("graph", graph=1, bwd=True, device="cuda", cudagraphs=False, calls=4),
    marker("kernel", graph=1, call=0, name="triton_poi_fused_relu_1", extern=False, bytes=6144, nodes=[BWD_A]),
    marker("kernel", graph=1, call=1, name="extern_kernels.mm", extern=True, nodes=[DX]),
    marker("kernel", graph=1, call=2, name="extern_kernels.mm", extern=True, nodes=[DW]),
    marker("kernel", graph=1, call=3, name="triton_red_fused_sum_2", extern=False, bytes=2112, nodes=[BWD_C]),
]
GEMM = "void nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT(Params)"


def compiled_step(path: Path, table: list[str] = TABLE, graph_replay: bool = False, op_ids: bool = True,
                  numbered: bool = False, one_thread: bool = False, ops_in_calls: bool = False,
                  caller: str = "") -> None:
    """A forward (main thread) and backward (autograd thread) of a compiled graph, its table
    marked at the start. With `graph_replay`, the forward is one CUDA graph launch instead.
    `numbered`: the ranges pyprof.profiled() opens without emit_nvtx (graph_calls.TEXT), and no
    PyTorch op ranges, unless `ops_in_calls`: PyTorch's op ranges inside the graph calls only (what
    profiled() turns on there since). `one_thread`: the backward on the main thread, right after
    the forward. `caller`: the module that called the forward graph, named in its range."""
    def call(op_id: int, run: int, by: str = "") -> str:
        return f"{CALL} run {run}{by}" if numbered else torch_text(CALL, op_id=op_id if op_ids else None)

    def op_range(thread: int, start: int, end: int, text: str, in_call: bool = True) -> None:
        if not numbered or (ops_in_calls and in_call):
            syn.push(thread, start, end, text)
    syn = SynthExport(str(path))
    main = syn.thread(100, 100, "python3")
    grad = main if one_thread else syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    for i, text in enumerate(table):
        syn.event(MARK, main, 100 + i, None, text, domain=dom, registered=True)
    syn.push(main, 1000, 50000, marker("module", module="OptimizedModule", cls="OptimizedModule", repr=""),
             domain=dom, registered=True)
    syn.push(main, 1100, 40000, call(5, 0, f" in {caller}" if caller else ""))
    if graph_replay:
        corr = syn.launch(main, 2000, 3000, api="cudaGraphLaunch_v10000")
        for i, name in enumerate(["triton_per_fused_native_layer_norm_0", GEMM, "triton_poi_fused_relu_1"]):
            short = name if name.startswith("triton") else None
            syn.kernel(100, corr, 10000 + 5000 * i, 14000 + 5000 * i, name, short=short, graph_node=40 + i)
    else:
        syn.launch_kernel(main, 2000, "triton_per_fused_native_layer_norm_0")
        op_range(main, 3000, 9000, torch_text("aten::mm", op_id=6, sizes=[[64, 32], [32, 16]]))
        syn.launch_kernel(main, 4000, GEMM)
        syn.launch_kernel(main, 10000, "triton_poi_fused_relu_1")
    # backward: the compiled graph's backward node, on the autograd thread
    op_range(grad, 60000, 99000, torch_text("CompiledFunctionBackward", seq=3, op_id=8), in_call=False)
    syn.push(grad, 60100, 98000, call(9, 1))
    syn.launch_kernel(grad, 61000, "triton_poi_fused_relu_1")
    op_range(grad, 62000, 66000, torch_text("aten::mm", op_id=10, sizes=[[64, 16], [16, 32]]))
    syn.launch_kernel(grad, 63000, GEMM)
    op_range(grad, 67000, 75000, torch_text("aten::mm", op_id=11, sizes=[[32, 64], [64, 16]]))
    syn.launch_kernel(grad, 68000, GEMM)
    syn.launch_kernel(grad, 70000, "void splitKreduce_kernel<float>(Params)")
    syn.launch_kernel(grad, 80000, "triton_red_fused_sum_2")
    syn.close()


def parse_all(path: Path) -> tuple[list[dict], Stats]:
    stats = Stats()
    with Export(str(path)) as exp:
        out = list(records(exp, stats))
    return out, stats


def summary(recs: list[dict]) -> list[tuple]:
    return [(r["kShortName"], r["dir"], r["op"], r["module"], (r.get("compiled") or {}).get("graph"),
             (r.get("compiled") or {}).get("call"), (r.get("compiled") or {}).get("sub")) for r in recs]


def test_join_by_name_and_library_calls(tmp_path: Path) -> None:
    compiled_step(tmp_path / "c.sqlite")
    recs, stats = parse_all(tmp_path / "c.sqlite")
    assert summary(recs) == [
        ("triton_per_fused_native_layer_norm_0", "fprop", "native_layer_norm+_to_copy", "ln,fc", 0, 0, 0),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", "fprop", "mm", "fc", 0, 1, 0),
        ("triton_poi_fused_relu_1", "fprop", "relu", "act", 0, 2, 0),
        # same name as the forward's kernel: the backward graph is the one whose names follow
        ("triton_poi_fused_relu_1", "bprop", "threshold_backward", "act", 1, 0, 0),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", "bprop", "mm", "fc", 1, 1, 0),
        ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", "bprop", "mm", "fc", 1, 2, 0),
        ("splitKreduce_kernel", "bprop", "mm", "fc", 1, 2, 1),  # a second kernel of the same mm call
        ("triton_red_fused_sum_2", "bprop", "sum", "fc", 1, 3, 0),
    ]
    assert recs[0]["trace"] == "m.py:5,m.py:6"
    assert recs[0]["mod"] == "aten"
    assert recs[0]["compiled"]["nodes"] == LN and recs[0]["compiled"]["bytes"] == 12544
    assert recs[5]["compiled"]["nodes"] == [DW]
    assert stats.compiled.joined == 8 and stats.compiled.unexplained == 0 and stats.compiled.graphs == 2


def test_join_in_default_mode(tmp_path: Path) -> None:
    """profiled() without emit_nvtx, as captured before it turned op ranges on inside graph
    calls: runs cut by its numbered ranges, no PyTorch op ranges. Named kernels join as before;
    library kernels between two named ones join when there is one call or one kernel per call,
    or one matrix kernel per matrix call: the backward's two mm calls launched three kernels,
    two GEMMs and the second's split-K pass after them."""
    compiled_step(tmp_path / "d.sqlite", numbered=True)
    recs, stats = parse_all(tmp_path / "d.sqlite")
    assert [row[4:6] for row in summary(recs)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 2), (1, 3)]
    assert (stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (2, 8, 0)


def test_join_in_default_mode_with_op_ranges_in_calls(tmp_path: Path) -> None:
    """profiled()'s default mode now: PyTorch's op ranges inside each graph call (and nowhere
    else) tell the backward's two mm calls apart, the split-K pass going with its GEMM: every
    kernel joined."""
    compiled_step(tmp_path / "o.sqlite", numbered=True, ops_in_calls=True)
    recs, stats = parse_all(tmp_path / "o.sqlite")
    assert [(r["op"], r["module"], (r.get("compiled") or {}).get("graph"), (r.get("compiled") or {}).get("call"))
            for r in recs] == [("native_layer_norm+_to_copy", "ln,fc", 0, 0), ("mm", "fc", 0, 1), ("relu", "act", 0, 2),
                               ("threshold_backward", "act", 1, 0), ("mm", "fc", 1, 1), ("mm", "fc", 1, 2),
                               ("mm", "fc", 1, 2), ("sum", "fc", 1, 3)]
    assert (stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (2, 8, 0)


def test_fallback_op_whose_sub_ops_launch_kernels(tmp_path: Path) -> None:
    """A fallback op's sub-ops launch kernels under ranges of their own (the coverage capture's
    compiled TransformerEncoder: the efficient-attention backward's sum, contiguous copy and zero
    fill, nested under aten::_efficient_attention_backward beside its main kernel), and an mm
    follows before the next generated kernel: each kernel joins the library call whose range is
    its outermost one inside the graph call, so the four go to the attention's call site and the
    GEMM to the mm's (the innermost ranges split them five ways: none joined)."""
    q = t(8, 8, 128, 32, dtype="float32")
    sdpa = node("aten._scaled_dot_product_efficient_attention_backward.default",
                [q, q, q, q, None, q, t(8, 8, 128, dtype="float32"), t(2, dtype="int64"), t(dtype="int64"),
                 [True, True, True, False], 0.1], [q] * 3 + [None], "attn")
    table = [marker("graph", graph=0, bwd=True, device="cuda", cudagraphs=False, calls=4),
             marker("kernel", graph=0, call=0, name="triton_poi_fused_0", extern=False, bytes=4096, nodes=[BWD_A]),
             marker("kernel", graph=0, call=1, name="torch.ops.aten._scaled_dot_product_efficient_attention_backward."
                    "default", extern=True, nodes=[sdpa]),
             marker("kernel", graph=0, call=2, name="extern_kernels.mm", extern=True, nodes=[DX]),
             marker("kernel", graph=0, call=3, name="triton_red_fused_sum_1", extern=False, bytes=2112, nodes=[BWD_C])]
    syn = SynthExport(str(tmp_path / "f.sqlite"))
    main = syn.thread(100, 100, "python3")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    for i, text in enumerate(table):
        syn.event(MARK, main, 100 + i, None, text, domain=dom, registered=True)
    syn.push(main, 1000, 90000, f"{CALL} run 0")
    syn.launch_kernel(main, 2000, "triton_poi_fused_0")
    syn.push(main, 3000, 40000, torch_text("aten::_scaled_dot_product_efficient_attention_backward", op_id=82))
    syn.push(main, 3100, 39000, torch_text("aten::_efficient_attention_backward", op_id=93))
    for i, (sub, name) in enumerate([("aten::sum", "reduce_kernel"), ("aten::copy_", "elementwise_kernel"),
                                     ("aten::fill_", "vectorized_elementwise_kernel"), (None, "fmha_cutlassB_f32")]):
        if sub:
            syn.push(main, 4000 + 5000 * i, 8000 + 5000 * i, torch_text(sub, op_id=105 + i))
        syn.launch_kernel(main, 5000 + 5000 * i, f"void {name}(Params)")
    syn.push(main, 41000, 49000, torch_text("aten::mm", op_id=123))
    syn.launch_kernel(main, 42000, GEMM)
    syn.launch_kernel(main, 50000, "triton_red_fused_sum_1")
    syn.close()
    recs, stats = parse_all(tmp_path / "f.sqlite")
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 1, 1, 2, 3]
    assert [r["op"] for r in recs[1:6]] == ["_scaled_dot_product_efficient_attention_backward"] * 4 + ["mm"]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (7, 0)


def test_module_paths_under_the_calling_module(tmp_path: Path) -> None:
    """A graph Dynamo compiled from a submodule's own frame (after a graph break) records paths
    relative to that submodule; the range names the caller (`in blocks.1`), under which parse
    puts them, nodes without a module of their own going to the caller itself. The backward's
    range names no caller: its paths stay as recorded."""
    table = TABLE[:3] + [marker("kernel", graph=0, call=2, name="triton_poi_fused_relu_1", extern=False, bytes=4096,
                                nodes=[node("aten.relu.default", [t(64, 16)], t(64, 16))])] + TABLE[4:]
    compiled_step(tmp_path / "c.sqlite", table=table, numbered=True, ops_in_calls=True, caller="blocks.1")
    recs, _ = parse_all(tmp_path / "c.sqlite")
    assert [r["module"] for r in recs] == ["blocks.1.ln,blocks.1.fc", "blocks.1.fc", "blocks.1", "act", "fc", "fc",
                                           "fc", "fc"]


def test_numbered_runs_on_one_thread(tmp_path: Path) -> None:
    """Two graphs' runs back to back on one thread, both called with the key None: the run number
    keeps them apart, so each joins its own graph (the same text would read as one run)."""
    compiled_step(tmp_path / "n.sqlite", numbered=True, one_thread=True)
    recs, stats = parse_all(tmp_path / "n.sqlite")
    assert [row[4] for row in summary(recs)] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert (stats.compiled.instances, stats.compiled.joined) == (2, 8)


def test_cuda_graph_replay(tmp_path: Path) -> None:
    compiled_step(tmp_path / "g.sqlite", graph_replay=True)
    recs, stats = parse_all(tmp_path / "g.sqlite")
    fwd = summary(recs)[:3]
    assert fwd == [("triton_per_fused_native_layer_norm_0", "fprop", "native_layer_norm+_to_copy", "ln,fc", 0, 0, 0),
                   ("nvjet_sm90_tst_64x16_64x8_1x1_v_bz_TNT", "fprop", "mm", "fc", 0, 1, 0),
                   ("triton_poi_fused_relu_1", "fprop", "relu", "act", 0, 2, 0)]
    assert [r["graphNode"] for r in recs[:3]] == [40, 41, 42]
    assert stats.compiled.joined == 8


def test_runs_without_op_ids(tmp_path: Path) -> None:
    """Without op ids every compiled-graph call has the same range text; runs are still told
    apart by thread, and the library kernels by their own op ranges."""
    compiled_step(tmp_path / "n.sqlite", op_ids=False)
    recs, _ = parse_all(tmp_path / "n.sqlite")
    assert [(r["op"], (r.get("compiled") or {}).get("call")) for r in recs] == [
        ("native_layer_norm+_to_copy", 0), ("mm", 1), ("relu", 2), ("threshold_backward", 0), ("mm", 1), ("mm", 2),
        ("mm", 2), ("sum", 3)]


def replayed(path: Path, table: list[str], names: list[str]) -> tuple[list[dict], Stats]:
    """Parse an export of `table` marked, then one CUDA graph launch replaying kernels `names` in
    order (a generated kernel's name is its short name too)."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100)
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    for i, text in enumerate(table):
        syn.event(MARK, main, 100 + i, None, text, domain=dom, registered=True)
    corr = syn.launch(main, 2000, 3000, api="cudaGraphLaunch_v10000")
    for i, name in enumerate(names):
        syn.kernel(100, corr, 10000 + 5000 * i, 14000 + 5000 * i, name, short=name if name.startswith("triton") else None,
                   graph_node=i)
    syn.close()
    return parse_all(path)


def test_ambiguous_library_kernels_stay_unexplained(tmp_path: Path) -> None:
    """Two library calls between the same generated kernels, three matrix kernels and no op
    ranges to tell them apart: which kernel belongs to which call is not known, so none is
    joined."""
    recs, stats = replayed(tmp_path / "a.sqlite", TABLE[4:], ["triton_poi_fused_relu_1", GEMM, GEMM, GEMM,
                                                                "triton_red_fused_sum_2"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, None, None, None, 3]
    assert stats.compiled.unexplained == 3


def test_matrix_calls_in_a_graph_replay_take_one_matrix_kernel_each(tmp_path: Path) -> None:
    """A CUDA graph's replay has no op ranges: an attention backward and an mm back to back (the
    coverage capture's TransformerEncoder under reduce-overhead) split at their matrix kernels.
    The attention's helpers before its main kernel are its own, a split-K pass right after a GEMM
    the GEMM's; another helper between two matrix kernels may be either's and stays unexplained."""
    q = t(8, 8, 128, 32, dtype="float32")
    sdpa = node("aten._scaled_dot_product_efficient_attention_backward.default", [q, q, q, q], [q] * 3, "attn")
    table = [marker("graph", graph=0, bwd=True, device="cuda", cudagraphs=True, calls=5),
             marker("kernel", graph=0, call=0, name="triton_poi_fused_0", extern=False, bytes=4096, nodes=[BWD_A]),
             marker("kernel", graph=0, call=1, name="torch.ops.aten._scaled_dot_product_efficient_attention_backward."
                    "default", extern=True, nodes=[sdpa]),
             marker("kernel", graph=0, call=2, name="extern_kernels.mm", extern=True, nodes=[DX]),
             marker("kernel", graph=0, call=3, name="extern_kernels.mm", extern=True, nodes=[DW]),
             marker("kernel", graph=0, call=4, name="triton_red_fused_sum_1", extern=False, bytes=2112, nodes=[BWD_C])]
    names = ["triton_poi_fused_0", "void at::native::reduce_kernel<512, 1>(Params)",
             "fmha_cutlassB_f32_aligned_64x64_k32_dropout_sm80(Params)", "void at::native::vectorized_elementwise_kernel"
             "<4, at::native::FillFunctor<float>>(int)", GEMM, "void cublasLt::splitKreduce_kernel<32, 16, int, float>"
             "(Params)", GEMM, "triton_red_fused_sum_1"]
    recs, stats = replayed(tmp_path / "r.sqlite", table, names)
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, None, 2, 2, 3, 4]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (7, 1)


def test_attention_backward_preprocessing_in_a_graph_replay(tmp_path: Path) -> None:
    """An mm, then cuDNN attention's backward, in a CUDA graph's replay (the coverage capture's
    Llama block and ViT under reduce-overhead): the GEMM's split-K pass is the mm's, the
    attention's dot(dO, O) right before its kernel the attention's, its dQ conversion after the
    last matrix kernel too; so is the fill between them, since cuBLAS launches nothing after a
    GEMM but its split-K pass."""
    q = t(2, 4, 128, 64)
    sdpa = node("aten._scaled_dot_product_cudnn_attention_backward.default", [q, q, q, q], [q] * 3, "attn")
    table = [marker("graph", graph=0, bwd=True, device="cuda", cudagraphs=True, calls=4),
             marker("kernel", graph=0, call=0, name="triton_poi_fused_0", extern=False, bytes=4096, nodes=[BWD_A]),
             marker("kernel", graph=0, call=1, name="extern_kernels.mm", extern=True, nodes=[DX]),
             marker("kernel", graph=0, call=2, name="torch.ops.aten._scaled_dot_product_cudnn_attention_backward."
                    "default", extern=True, nodes=[sdpa]),
             marker("kernel", graph=0, call=3, name="triton_red_fused_sum_1", extern=False, bytes=2112, nodes=[BWD_C])]
    names = ["triton_poi_fused_0", GEMM, "void cublasLt::splitKreduce_kernel<32, 16, int, float>(Params)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)",
             "void cudnn::fusion::compute_dot_do_o_specialized<(bool)1, (int)64>(const void *)",
             "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0",
             "void cudnn::fusion::convert_dq_to_16bits<(bool)1>(const void *, void *)", "triton_red_fused_sum_1"]
    recs, stats = replayed(tmp_path / "a.sqlite", table, names)
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 2, 2, 2, 2, 3]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (8, 0)


EBB = "aten._embedding_bag_backward.default"
SORT = ["void at::native::elementwise_kernel_with_index<int, at::native::arange_cuda_out>(int)",
        "void at_cuda_detail::cub::DeviceRadixSortSingleTileKernel<Policy, false, long, long, int>(const long *)",
        "void at::native::compute_grad_weight_bags<float>(const long *)", "void at::native::sum_and_scatter<float>(int)"]


def bags_backward(graph: int, calls: list[str]) -> list[str]:
    """A backward graph's table: a generated kernel, then one library call per op in `calls`."""
    bag = node(EBB, [t(128, 16, dtype="float32"), t(1024, dtype="int64")], t(1000, 16, dtype="float32"), "bags")
    out = [marker("graph", graph=graph, bwd=True, device="cuda", cudagraphs=True, calls=len(calls) + 1),
           marker("kernel", graph=graph, call=0, name="triton_per_fused_sum_0", extern=False, bytes=4096, nodes=[BWD_C])]
    for q, op in enumerate(calls, 1):
        n = dict(bag, op=op) if op != "mm" else DW
        out.append(marker("kernel", graph=graph, call=q, name=f"torch.ops.{op}" if op != "mm" else "extern_kernels.mm",
                          extern=True, nodes=[n]))
    return out


def test_calls_of_one_op_in_a_graph_replay_split_where_their_kernels_repeat(tmp_path: Path) -> None:
    """Four embedding_bag backwards back to back in a CUDA graph's replay (the coverage capture's
    recommender under reduce-overhead): no matrix kernel tells them apart, but four calls of one
    op that launch four times the same kernels launch one sequence each."""
    recs, stats = replayed(tmp_path / "r.sqlite", bags_backward(0, [EBB] * 4), ["triton_per_fused_sum_0"] + SORT * 4)
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0] + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
    assert (stats.compiled.joined, stats.compiled.unexplained) == (17, 0)


def test_calls_whose_kernels_do_not_repeat_stay_unexplained(tmp_path: Path) -> None:
    """Two embedding_bag backwards whose kernels are not twice one sequence (one call's kernels
    differ from the other's), and two calls of different ops: which kernel is whose is not known."""
    names = ["triton_per_fused_sum_0"] + SORT + SORT[1:] + SORT[:1]
    recs, stats = replayed(tmp_path / "a.sqlite", bags_backward(0, [EBB] * 2), names)
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0] + [None] * 8
    other = "aten.index_put.default"
    recs, stats = replayed(tmp_path / "b.sqlite", bags_backward(0, [EBB, other]), ["triton_per_fused_sum_0"] + SORT * 2)
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0] + [None] * 8
    assert stats.compiled.unexplained == 8


def test_a_call_without_matrix_kernels_between_two_gemms_in_a_graph_replay(tmp_path: Path) -> None:
    """mm, embedding_bag backward, mm in a CUDA graph's replay: each mm takes its GEMM and the first
    its split-K pass; what lies between is the one call there that runs no matrix kernel. With
    two such calls between the GEMMs, their kernels stay unexplained."""
    split = "void cublasLt::splitKreduce_kernel<32, 16, int, float>(Params)"
    recs, stats = replayed(tmp_path / "a.sqlite", bags_backward(0, ["mm", EBB, "mm"]),
                           ["triton_per_fused_sum_0", GEMM, split] + SORT + [GEMM])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 2, 2, 2, 2, 3]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (8, 0)
    recs, stats = replayed(tmp_path / "b.sqlite", bags_backward(0, ["mm", EBB, EBB, "mm"]),
                           ["triton_per_fused_sum_0", GEMM, split] + SORT * 2 + [GEMM])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1] + [None] * 8 + [4]
    assert stats.compiled.unexplained == 8


def conv_backwards(masks: list[list[bool]]) -> list[str]:
    """A backward graph's table: a generated kernel, one convolution backward per output_mask of
    `masks` (channels_last, bf16), then a generated kernel."""
    out = [marker("graph", graph=0, bwd=True, device="cuda", cudagraphs=True, calls=len(masks) + 2),
           marker("kernel", graph=0, call=0, name="triton_red_fused_0", extern=False, bytes=4096, nodes=[BWD_A])]
    for q, mask in enumerate(masks, 1):
        x, w = t(8, 256, 8, 8), t(512, 256, 1, 1)
        n = node("aten.convolution_backward.default", [t(8, 512, 4, 4), x, w, [0], [2, 2], [0, 0], [1, 1], False,
                                                        [0, 0], 1, mask], [x, w, None], f"layer{q}")
        out.append(marker("kernel", graph=0, call=q, name="torch.ops.aten.convolution_backward.default", extern=True,
                          nodes=[n]))
    out.append(marker("kernel", graph=0, call=len(masks) + 1, name="triton_red_fused_1", extern=False, bytes=2112,
                      nodes=[BWD_C]))
    return out


DGRAD = "sm90_xmma_dgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x128x64_warpgroupsize1x1x1" \
    "_g1_strided_execute_kernel__5x_cudnn"
WGRAD = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816wgrad_optimized_bf16_256x64_32x4_nhwc_align8>(T1::Params)"
TO_NHWC = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, (bool)0, (bool)1>(const T1 *, T2 *)"
TO_NCHW = "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, (bool)1, (bool)0>(const T1 *, T2 *)"
WGRAD_SUM = "void cudnn::cnn::reduce_wgrad_nchw_helper<float, float>(void *, const void *, T1, int, int)"


def test_convolution_backwards_in_a_graph_replay_take_a_matrix_kernel_per_gradient(tmp_path: Path) -> None:
    """Two convolution backwards back to back in a CUDA graph's replay (the coverage capture's
    ResNet-50 under reduce-overhead: a strided 1x1 convolution on cuDNN, then a 1x1 one on
    cuBLAS): each computes its input's and its weight's gradient, one matrix kernel each, so the
    first two matrix kernels are the first call's. Helpers around them go by what they are: a split
    weight gradient's sum or an NHWC result converted back after its kernel, an NCHW operand
    converted before; between two of one call's kernels, that call's."""
    both = [True, True, False]
    recs, stats = replayed(tmp_path / "r.sqlite", conv_backwards([both, both]),
                           ["triton_red_fused_0", DGRAD, WGRAD, GEMM, GEMM, "triton_red_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 2, 2, 3]
    assert [r["module"] for r in recs[1:5]] == ["layer1", "layer1", "layer2", "layer2"]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (6, 0)
    recs, stats = replayed(tmp_path / "f.sqlite", conv_backwards([both, both]),
                           ["triton_red_fused_0", GEMM, GEMM, WGRAD_SUM, TO_NHWC, DGRAD, TO_NCHW, WGRAD,
                            "triton_red_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 1, 2, 2, 2, 2, 3]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (9, 0)


def test_convolution_backward_gradients_counted_from_the_output_mask(tmp_path: Path) -> None:
    """A first layer's convolution backward computes its weight's gradient alone (output_mask
    [False, True, False]): one matrix kernel, so the next call's two follow it. A call whose
    matrix kernels outnumber its gradients (a Winograd path, a split) leaves every kernel there
    unexplained, as does a node without its output_mask."""
    recs, stats = replayed(tmp_path / "m.sqlite", conv_backwards([[False, True, False], [True, True, False]]),
                           ["triton_red_fused_0", WGRAD, DGRAD, WGRAD, "triton_red_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 2, 2, 3]
    recs, stats = replayed(tmp_path / "w.sqlite", conv_backwards([[False, True, False], [True, True, False]]),
                           ["triton_red_fused_0", WGRAD, WGRAD, DGRAD, WGRAD, "triton_red_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, None, None, None, None, 3]
    assert stats.compiled.unexplained == 4
    recs, stats = replayed(tmp_path / "n.sqlite", conv_backwards([[True], [True, True, False]]),
                           ["triton_red_fused_0", DGRAD, DGRAD, WGRAD, "triton_red_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, None, None, None, 3]


FLIP = "void flip_filter<float, float>(T2 *, const T1 *, int, int, int, int)"
R2C = "void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>(float2 *, const T1 *, int, int)"
CGEMM = "sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x32x8_stage3_warpsize2x2x1_ffma_aligna8_alignc8_" \
    "execute_kernel__5x_cublas"
C2R = "void fft2d_c2r_32x32<float, (bool)0, (bool)0, (unsigned int)0, (bool)0, (bool)0>(T1 *, const float2 *, int)"
SEEDS = "void at::native::distribution_elementwise_grid_stride_kernel<unsigned long, (int)2, ...>(...)"


def test_fft_convolution_in_a_graph_replay_is_one_call(tmp_path: Path) -> None:
    """cuDNN's FFT path of a convolution in a CUDA graph's replay (the spatial transformer under
    reduce-overhead, H200), then the seeds of a random op, between two generated kernels: the
    filter flip and the operands' transforms are helpers before its one matrix kernel, the complex
    GEMM, and the inverse transform one after it, so all five are the convolution's; the seeds'
    kernel the next call's (the five were unexplained, the seeds with them)."""
    x, w = t(64, 16, 30, 30, dtype="float32"), t(32, 16, 5, 5, dtype="float32")
    conv = node("aten.convolution.default", [x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1],
                t(64, 32, 26, 26, dtype="float32"), "c2")
    seeds = node("prims.inductor_seeds.default", [2, {"device": "cuda:0"}], t(2, dtype="int64"))
    table = [marker("graph", graph=0, bwd=False, device="cuda", cudagraphs=True, calls=4),
             marker("kernel", graph=0, call=0, name="triton_poi_fused_0", extern=False, bytes=4096, nodes=[BWD_A]),
             marker("kernel", graph=0, call=1, name="extern_kernels.convolution", extern=True, nodes=[conv]),
             marker("kernel", graph=0, call=2, name="aten.randint.low_out", extern=True, nodes=[seeds]),
             marker("kernel", graph=0, call=3, name="triton_poi_fused_1", extern=False, bytes=2112, nodes=[BWD_C])]
    recs, stats = replayed(tmp_path / "f.sqlite", table,
                           ["triton_poi_fused_0", FLIP, R2C, R2C, CGEMM, C2R, SEEDS, "triton_poi_fused_1"])
    assert [(r.get("compiled") or {}).get("call") for r in recs] == [0, 1, 1, 1, 1, 1, 2, 3]
    assert (stats.compiled.joined, stats.compiled.unexplained) == (8, 0)


def named_runs(path: Path, table: list[str], runs: list[tuple[str, list[str]]]) -> tuple[list[dict], Stats]:
    """Parse an export of `table` marked, then one graph call per run (its range's suffix after
    the run number, the kernels it launches)."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100)
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    for i, text in enumerate(table):
        syn.event(MARK, main, 100 + i, None, text, domain=dom, registered=True)
    for r, (suffix, names) in enumerate(runs):
        t0 = 1000 + 20000 * r
        syn.push(main, t0, t0 + 15000, f"{CALL} run {r}{suffix}")
        for i, name in enumerate(names):
            syn.launch_kernel(main, t0 + 1000 + 1000 * i, name)
    syn.close()
    return parse_all(path)


CASTS = ["triton_poi_fused__to_copy_0", "triton_poi_fused__to_copy_1"]
UP = node("aten.addmm.default", [t(512), t(130, 256), t(256, 512)], t(130, 512), "up")
CONV = node("aten.convolution.default", [t(8, 3, 128, 128), t(64, 3, 7, 7), None], t(8, 64, 64, 64), "conv1")


def two_graphs_of_one_name() -> list[str]:
    """Graph 0 an expert's linear, graph 1 a convolution: both cast two tensors in kernels of the
    same names before their library kernel; graph 2 a linear of one library call alone."""
    out = []
    for gid, lib in ((0, UP), (1, CONV)):
        cast = node("prims.convert_element_type.default", [t(64, dtype="float32"), {"dtype": F16}], t(64), "m")
        out += [marker("graph", graph=gid, bwd=False, device="cuda", cudagraphs=False, calls=3),
                marker("kernel", graph=gid, call=0, name=CASTS[0], extern=False, bytes=384, nodes=[cast]),
                marker("kernel", graph=gid, call=1, name=CASTS[1], extern=False, bytes=384, nodes=[cast]),
                marker("kernel", graph=gid, call=2, name="extern_kernels.addmm" if lib is UP else
                       "extern_kernels.convolution", extern=True, nodes=[lib])]
    out += [marker("graph", graph=2, bwd=False, device="cuda", cudagraphs=False, calls=1),
            marker("kernel", graph=2, call=0, name="extern_kernels.mm", extern=True, nodes=[MM])]
    return out


def test_a_run_joins_the_graph_its_range_names(tmp_path: Path) -> None:
    """pyprof's call range names the graph's table (` graph N`): two graphs whose kernels have the
    same names (a MoE expert's linear and a convolution: casts, then the library kernel) join
    each its own, where the names alone would take the later graph for both; a graph of one
    library call, with no generated kernel to match, joins where its range names it, and stays
    unexplained where it does not."""
    runs = [(" graph 0", CASTS + [GEMM]), (" graph 1", CASTS + [GEMM]), (" graph 2 in experts.3", [GEMM]), ("", [GEMM])]
    recs, stats = named_runs(tmp_path / "n.sqlite", two_graphs_of_one_name(), runs)
    assert [((r.get("compiled") or {}).get("graph"), (r.get("compiled") or {}).get("call"), r["op"]) for r in recs] == [
        (0, 0, "convert_element_type"), (0, 1, "convert_element_type"), (0, 2, "addmm"), (1, 0, "convert_element_type"),
        (1, 1, "convert_element_type"),
        (1, 2, "convolution"), (2, 0, "mm"), (None, None, None)]
    assert recs[6]["module"] == "experts.3.fc"
    assert (stats.compiled.joined, stats.compiled.unexplained) == (7, 1)
    recs, _ = named_runs(tmp_path / "o.sqlite", two_graphs_of_one_name(), [("", CASTS + [GEMM])])
    assert [(r.get("compiled") or {}).get("graph") for r in recs] == [1, 1, 1]  # earlier captures: the names' choice


def test_no_table_leaves_records_untouched(tmp_path: Path) -> None:
    compiled_step(tmp_path / "with.sqlite")
    compiled_step(tmp_path / "without.sqlite", table=[])
    recs, stats = parse_all(tmp_path / "without.sqlite")
    assert all("compiled" not in r for r in recs)
    assert recs[1]["op"] == "mm" and recs[0]["op"] == CALL  # what attribution alone finds
    assert stats.compiled.graphs == 0


def test_malformed_table_marks_are_counted(tmp_path: Path) -> None:
    bad = ['{"v":1,"kind":"kernel","graph":0,"call":"x"}', "{not json", '{"v":1,"kind":"kernel","graph":0}']
    compiled_step(tmp_path / "m.sqlite", table=TABLE + bad)
    recs, stats = parse_all(tmp_path / "m.sqlite")
    assert stats.compiled.malformed == 3 and stats.compiled.joined == 8


def test_cli_summary_line(tmp_path: Path) -> None:
    compiled_step(tmp_path / "c.sqlite")
    out = subprocess.run([sys.executable, "-m", "pyprof.parse", str(tmp_path / "c.sqlite")], capture_output=True,
                         text=True, check=True)
    assert out.stderr.splitlines()[-1] == ("pyprof.parse: 8 kernels of 2 compiled-graph runs joined to the compile-time "
                                           "table (2 graphs); 0 left unexplained; 0 malformed table marks")


def test_parallel_parse_joins_too(tmp_path: Path) -> None:
    """Ranked exports and windows go through parallel.py's workers: they join as parse() does."""
    from pyprof.parse import parallel

    compiled_step(tmp_path / "c.sqlite")
    parts = [parallel.Part(0, str(tmp_path / "c.sqlite"), 0, "", False, True)]
    out = tmp_path / "c.dict"
    result = parallel.run([parts], str(out), 1)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["rank"], r["op"], (r.get("compiled") or {}).get("call")) for r in recs][:3] == [
        (0, "native_layer_norm+_to_copy", 0), (0, "mm", 1), (0, "relu", 2)]
    assert (result.compiled.joined, result.compiled.graphs, result.compiled.unexplained) == (8, 2, 0)
