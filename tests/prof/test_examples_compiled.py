"""The shipped H100 captures of examples/compiled.py (torch 2.11): GPT under torch.compile's default
mode and mode="reduce-overhead" (CUDA graphs, nsys --cuda-graph-trace=node), ResNet-18 in default
mode. Concrete kernels' ops, module paths and FLOPs, the share of GPU time prof explains, and the
step's FLOPs against the eager captures of the same models."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import unpacked
from pyprof.parse import Export, Stats, records
from pyprof.prof.pricing.analysis import Analyzer
from pyprof.prof.views.advice import Evidence, advise
from pyprof.prof.warnings_tally import Tally

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def analysed(path: Path) -> list:
    stats = Stats()
    with Export(str(path)) as exp:
        recs = list(records(exp, stats))
    an = Analyzer(Tally())
    return [(r, an.facts(r)) for r in recs], stats


@pytest.fixture(scope="module")
def gpt():
    return analysed(EXAMPLES / "gpt_compiled.sqlite")


@pytest.fixture(scope="module")
def graphs():
    return analysed(EXAMPLES / "gpt_graphs.sqlite")


@pytest.fixture(scope="module")
def autotune():
    return analysed(EXAMPLES / "gpt_autotune.sqlite")


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    return analysed(unpacked(EXAMPLES / "resnet_compiled.sqlite.xz", tmp_path_factory.mktemp("resnet")))


def total_flops(rows) -> int:
    return sum(f.flops or 0 for _, f in rows)


def time_share(rows, known) -> float:
    total = sum(r["kDuration"] for r, _ in rows)
    return sum(r["kDuration"] for r, f in rows if known(r, f)) / total


def find(rows, kernel: str, module: str, direction: str = "fprop") -> list:
    return [(r, f) for r, f in rows if r["kShortName"].startswith(kernel) and r["module"] == module
            and r["dir"] == direction]


def test_gpt_kernels(gpt) -> None:
    rows, stats = gpt
    assert stats.compiled.joined == 109 and stats.compiled.unexplained == 0 and stats.compiled.graphs == 2
    # The qkv projection: cuBLAS with the bias fused, [512, 256] x [256, 768] in bf16.
    [(r, f)] = find(rows, "nvjet", "blocks.0.qkv")
    assert (r["op"], r["mod"], f.flops, f.tc, f.dtype) == ("addmm", "aten", 2 * 512 * 256 * 768, True, "bfloat16")
    assert f.bytes == (768 + 512 * 256 + 256 * 768 + 512 * 768) * 2
    # Its two backward GEMMs (dX, dW), each one forward's FLOPs.
    assert [(r["op"], f.flops) for r, f in find(rows, "nvjet", "blocks.0.qkv", "bprop")] == [("mm", 2 * 512 * 256 * 768)] * 2
    # GELU (tanh), decomposed by Inductor into 9 element-wise ops over [4, 128, 1024], fused into
    # one Triton kernel that reads the bf16 input and writes the bf16 output.
    [(r, f)] = find(rows, "triton_poi_fused_gelu", "blocks.0")
    assert (r["op"], f.flops, f.bytes) == ("gelu", 9 * 4 * 128 * 1024, 2 * 2 * 4 * 128 * 1024)
    assert r["trace"].endswith("examples/gpt.py:39")
    # cuDNN attention, causal: half of 2*B*H*L*S*(E+Ev), forward and backward.
    [(r, f)] = find(rows, "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "blocks.1")
    assert (r["op"], f.flops) == ("_scaled_dot_product_cudnn_attention", 2 * 16 * 128 * 128 * 128 // 2)
    bwd = find(rows, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", "blocks.1", "bprop")
    assert [f.flops for _, f in bwd] == [16 * (6 * 128 * 128 * 64 + 4 * 128 * 128 * 64) // 2]


def explained(r: dict, f) -> bool:
    """Op, module path, FLOPs and bytes all known (the issue's coverage goal, as
    benchmarks/compiled_coverage.py counts it: a kernel outside every module, the loss or the
    optimizer step, has its module known; the compiled wrapper's name is not a module path)."""
    return r["op"] not in (None, "-") and r["module"] != "OptimizedModule" and f.flops is not None and f.bytes is not None


def test_gpt_coverage_and_flops(gpt) -> None:
    rows, _ = gpt
    assert time_share(rows, lambda r, f: f.flops is not None and f.bytes is not None and r["op"]) >= 0.99
    assert time_share(rows, lambda r, f: r["module"] != "OptimizedModule") >= 0.99
    assert time_share(rows, explained) >= 0.99
    eager, _ = analysed(EXAMPLES / "gpt.sqlite")
    # Fusion moves FLOPs; element-wise ops count per decomposed ATen op (9 for a tanh GELU, 1 in
    # an eager marker), which is all of the difference.
    assert abs(total_flops(rows) / total_flops(eager) - 1) < 0.005


def test_gpt_cuda_graphs(graphs, gpt) -> None:
    rows, stats = graphs
    replayed = [(r, f) for r, f in rows if r["graphNode"] is not None]
    assert len(replayed) == 109 and all(r.get("compiled") for r, _ in replayed)
    assert {r["launch"]["api"] for r, _ in replayed} == {"cudaGraphLaunch_v10000"}
    # The same kernels as without CUDA graphs, the same FLOPs.
    assert total_flops(rows) == total_flops(gpt[0])
    assert time_share(rows, explained) >= 0.95
    [(r, f)] = find(rows, "nvjet", "blocks.1.fc")
    assert (r["op"], f.flops, r["graphNode"] is not None) == ("addmm", 2 * 512 * 256 * 1024, True)


def test_gpt_max_autotune(autotune, gpt) -> None:
    """mode="max-autotune": Triton GEMM templates with fused epilogues, replayed from CUDA graphs."""
    rows, stats = autotune
    templates = [(r, f) for r, f in rows if r["kShortName"].startswith("triton_tem_")]
    assert len(templates) == 27 and all(f.tc is True and f.flops for _, f in templates)
    # The fc projection's template, with the LayerNorm of its input fused in front (its name
    # says native_layer_norm, which the name rules alone would take for a normalization kernel).
    [(r, f)] = find(rows, "triton_tem_fused__to_copy_addmm_native_layer_norm", "blocks.0.fc")
    assert (r["op"], f.flops, r["graphNode"] is not None) == ("addmm", 2 * 512 * 256 * 1024, True)
    assert total_flops(rows) == total_flops(gpt[0])
    assert time_share(rows, explained) >= 0.95


def _launch_advice(rows) -> str:
    ev = Evidence()
    for r, f in rows:
        ev.kernel(r, f, r["kDuration"])
    [a] = [a for a in advise(ev, len(rows), sum(r["kDuration"] for r, _ in rows), 5.0) if a.kind == "launch-bound"]
    return a.text


def test_advice_knows_compile_and_graphs(gpt, graphs) -> None:
    assert "torch.compile(mode='reduce-overhead') replays them as CUDA graphs" in _launch_advice(gpt[0])
    text = _launch_advice(graphs[0])
    assert "109 of the 121 kernels already replay from CUDA graphs" in text and "reduce-overhead" not in text


def test_resnet(resnet) -> None:
    rows, stats = resnet
    assert stats.compiled.joined == 285 and stats.compiled.unexplained == 0
    # The stem: 7x7/2 convolution of 8x3x224x224 into 64 channels, on Tensor Cores.
    [(r, f)] = [(r, f) for r, f in find(rows, "sm90_xmma_fprop", "conv1")]
    assert (r["op"], f.flops, f.tc) == ("convolution", 2 * 8 * 64 * 112 * 112 * 3 * 7 * 7, True)
    # A 3x3 convolution's backward: dgrad and wgrad kernels, one forward's work each.
    grads = [(r["kShortName"].split("_")[2], f.flops) for r, f in find(rows, "sm90_xmma", "layer4.1.conv2", "bprop")]
    assert grads == [("dgrad", 2 * 8 * 512 * 7 * 7 * 512 * 9), ("wgrad", 2 * 8 * 512 * 7 * 7 * 512 * 9)]
    # cuDNN's helpers as in eager (conv_parts.py): the stem's channel padding (3 -> 4 forward, x and w;
    # backward, output_mask [False, True, False]: x padded to 8, dW's 8 stripped to 3), CUTLASS's
    # split-K wgrad of the padded weight and its ReduceSplitK (29 partials of 64 x 7*7*8), and
    # layer1's segment-K wgrad's split-K pass (13 segments of 64 x 64*3*3).
    pads = [(r["dir"], f.flops, f.bytes) for r, f in find(rows, "nhwcAddPaddingKernel", "conv1", "fprop")
            + find(rows, "nhwcAddPaddingKernel", "conv1", "bprop")]
    assert pads == [("fprop", 0, (8 * 3 * 224 * 224 + 8 * 4 * 224 * 224) * 2), ("fprop", 0, (64 * 3 * 49 + 64 * 4 * 49) * 2),
                    ("bprop", 0, (8 * 3 * 224 * 224 + 8 * 8 * 224 * 224) * 2), ("bprop", 0, (64 * 3 * 49 + 64 * 8 * 49) * 2)]
    [f] = [f for r, f in find(rows, "Kernel", "conv1", "bprop") if "ReduceSplitK" in r["kLongName"]]
    assert (f.flops, f.bytes) == (28 * 64 * 392, 29 * 64 * 392 * 4 + 64 * 392 * 2)
    passes = [(f.flops, f.bytes) for r, f in find(rows, "sm90_xmma_wgrad", "layer1.0.conv1", "bprop")
              if "split_k_kernel" in r["kLongName"]]
    assert passes == [(12 * 64 * 576, 13 * 64 * 576 * 4 + 64 * 576 * 2)]
    # init_device_workspace_kernel alone is na: what it zeroes follows the segment kernel's grid,
    # launched after it (docs/prof.md).
    assert round(time_share(rows, lambda r, f: f.flops is not None), 3) == 0.991
    assert {r["kShortName"] for r, f in rows if f.flops is None} == {"init_device_workspace_kernel"}
    eager, _ = analysed(EXAMPLES / "resnet.sqlite")
    assert abs(total_flops(rows) / total_flops(eager) - 1) < 0.005


def test_summary_groups_by_aten_op() -> None:
    import pyprof

    rows = {r["group"]: r for r in pyprof.summary(str(EXAMPLES / "gpt_compiled.sqlite"), by="op")["rows"]}
    assert not [g for g in rows if g.startswith(("triton_", "## Call"))]
    assert (rows["gelu"]["count"], rows["gelu"]["flops"]) == (2, 2 * 9 * 4 * 128 * 1024)
    assert (rows["addmm"]["count"], rows["addmm"]["flops"]) == (8, 2 * 2 * 512 * 256 * (768 + 256 + 1024 + 1024))


def example(tmp_path_factory, name: str) -> Path:
    return unpacked(EXAMPLES / f"{name}.sqlite.xz", tmp_path_factory.mktemp(name))


@pytest.fixture(scope="module")
def eager():
    return analysed(EXAMPLES / "gpt.sqlite")


def test_hand_captured_cuda_graph(tmp_path_factory, eager) -> None:
    """examples/compiled_more.py --variant graphed: the whole step captured with torch.cuda.graph
    inside the profiled range, replayed twice. Every replayed kernel is explained by the op
    recorded when its node was captured."""
    rows, _ = analysed(example(tmp_path_factory, "gpt_graphed"))
    replayed = [(r, f) for r, f in rows if r["graphNode"] is not None]
    assert len(replayed) == 422 and {r["launch"]["api"] for r, _ in replayed} == {"cudaGraphLaunch_v10000"}
    assert time_share(rows, explained) >= 0.99
    # Two replays of one step: twice the eager step's FLOPs, to the FLOP, and the step counters'
    # scalar work. Captured, AdamW is
    # capturable and priced kernel by kernel from its aten ranges; eager (fused), its math launch
    # from its marker: both 13 per parameter element (2,137,088). Both increment the 29 step
    # counters on the GPU (eager: the fused step's one counter launch, 29 FLOPs); the capturable
    # step also runs its bias corrections there, 8 more scalar ops on each counter, which the
    # fused kernel does per tensor and the marker does not count.
    assert total_flops(rows) == 2 * (total_flops(eager[0]) + 8 * 29)
    assert total_flops([(r, f) for r, f in rows if r["op"] == "AdamW.step"]) == 2 * (13 * 2137088 + 9 * 29)
    assert total_flops([(r, f) for r, f in eager[0] if r["op"] == "AdamW.step"]) == 13 * 2137088 + 29
    gemms = [(r["dir"], r["op"], f.flops, f.tc) for r, f in find(rows, "nvjet", "blocks.0.fc", "fprop")
             + find(rows, "nvjet", "blocks.0.fc", "bprop")]
    assert gemms == [("fprop", "linear", 2 * 512 * 256 * 1024, True)] * 2 + [("bprop", "linear", 2 * 512 * 256 * 1024, True)] * 4
    assert [(r["op"], r["trace"].endswith("examples/gpt.py:54")) for r, _ in find(rows, "vectorized_gather_kernel", "tok")
            ] == [("embedding", True)] * 2


def test_graphed_callables(tmp_path_factory) -> None:
    """--variant callables: make_graphed_callables (its warm-up runs eager, then the captures) and
    two steps replaying the model's forward and backward graphs; loss and optimizer eager."""
    rows, _ = analysed(example(tmp_path_factory, "gpt_callables"))
    replayed = [r for r, _ in rows if r["graphNode"] is not None]
    assert len(replayed) == 210 and all(r["op"] for r in replayed)
    assert time_share(rows, explained) >= 0.95
    fc = [(r["dir"], f.flops) for r, f in find(rows, "sm80_xmma_gemm", "blocks.0.fc", "fprop")
          + find(rows, "sm80_xmma_gemm", "blocks.0.fc", "bprop") if r["graphNode"] is not None]
    # fp32 cuBLAS splits the backward GEMMs along K: each split-K pass sums its GEMM's grid-z
    # partials, (z - 1) adds per output element: dX (512 x 256) from 8 partials, dW (1024 x 256)
    # from 4.
    assert sorted(fc) == sorted([("fprop", 2 * 512 * 256 * 1024)] * 2 + [("bprop", 2 * 512 * 256 * 1024)] * 4
                                + [("bprop", 7 * 512 * 256)] * 2 + [("bprop", 3 * 1024 * 256)] * 2)


def test_graph_breaks_and_compiled_optimizer(tmp_path_factory) -> None:
    """--variant break: a graph break in every block and the AdamW step compiled: 11 graphs, every
    compiled kernel joined. Sizes Dynamo made symbolic (automatic dynamic shapes after the
    recompiles) were recorded as unknown by this capture's pyprof (before sizes were recorded
    by their hints): exactly those kernels have FLOPs na."""
    rows, stats = analysed(example(tmp_path_factory, "gpt_break"))
    assert (stats.compiled.graphs, stats.compiled.joined, stats.compiled.unexplained) == (11, 117, 0)
    na = [r for r, f in rows if r.get("compiled") and f.flops is None]
    assert len(na) == 11
    assert [r["kShortName"] for r in na if '"FakeTensor"' not in json.dumps(r["compiled"]["nodes"])] == [
        "triton_for_fused_0"]  # the step counters' add_: a list of 29 cut to 16 + {"more": 13}
    # The compiled optimizer step's other foreach kernels, the math over the parameters: no nodes
    # recorded then (their fused nodes were not unpacked), so 0 FLOPs.
    step = [(r["compiled"]["bytes"], f.flops) for r, f in rows if r["kShortName"].startswith("triton_for_fused_")][1:]
    assert step == [(59838580, 0), (59838580, 0)]


def test_reduce_overhead_in_default_mode(tmp_path_factory, eager) -> None:
    """examples/compiled.py --mode reduce-overhead captured under profiled()'s default mode (no
    emit_nvtx): a CUDA graph launch delimits each run, so the join needs no PyTorch range. The
    graph trees' copies of inputs into static buffers (_foreach_copy_, eager kernels inside the
    graph calls) are the 2 kernels of call runs without a call site, and most of the 3.2% left."""
    rows, stats = analysed(example(tmp_path_factory, "gpt_graphs_default"))
    assert (stats.compiled.graphs, stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (
        2, 4, 109, 2)
    assert round(time_share(rows, explained), 3) == 0.968
    # The step's FLOPs and its fused AdamW's counter launch (29 1-element adds).
    assert total_flops(rows) == 5949644928 + 29 + 524288 and abs(total_flops(rows) / total_flops(eager[0]) - 1) < 0.005
    copies = [r for r, f in rows if r["op"] in ("_foreach_copy_", "view") and f.flops is None]
    assert [[o["name"] for o in r["torchOps"]] for r in copies] == [["aten::_foreach_copy_"]] * 2


def matrix_flops(rows) -> int:
    """FLOPs of the Tensor Core kernels: GEMMs, convolutions, attention."""
    return sum(f.flops for _, f in rows if f.tc is True)


def test_default_mode_gpt_and_resnet(tmp_path_factory, eager) -> None:
    """examples/compiled.py, GPT and ResNet-18 under torch.compile's default mode, captured in
    profiled()'s default mode: runs cut by pyprof's numbered call ranges, library kernels told
    apart by the op ranges it turns on inside each call. Every kernel of every run joined, and
    the matrix FLOPs are the eager captures' to the FLOP (for ResNet-18, FlopCounterMode's total
    for the same step: 85,187,297,280; for the GPT, its GEMMs plus causal attention's half)."""
    rows, stats = analysed(example(tmp_path_factory, "gpt_compiled_default"))
    assert (stats.compiled.graphs, stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (
        2, 2, 109, 0)
    assert round(time_share(rows, explained), 3) == 0.997
    assert total_flops(rows) == 5949644928 + 29 + 524288 and matrix_flops(rows) == matrix_flops(eager[0]) == 5872025600
    bwd = find(rows, "cudnn_generated_fort_native_sdpa_sm90_flash_bprop", "blocks.0", "bprop")
    assert [(r["op"], f.flops) for r, f in bwd] == [("_scaled_dot_product_cudnn_attention_backward",
                                                   16 * (6 * 128 * 128 * 64 + 4 * 128 * 128 * 64) // 2)]
    # The library call's helpers carry the parts an eager call of the op has (attention_parts.py): D =
    # rowsum(dO * O) over 4 x 4 x 128 rows of 64 (dO and O read in bf16, D written in fp32, dQ's
    # fp32 accumulator zeroed), and dQ cast from that accumulator.
    rows_, out = 4 * 4 * 128, 4 * 4 * 128 * 64
    helpers = [(r["kShortName"], f.flops, f.bytes) for r, f in find(rows, "", "blocks.0", "bprop")
               if r["kShortName"] in ("compute_dot_do_o_specialized", "convert_dq_to_16bits")]
    assert helpers == [("compute_dot_do_o_specialized", 2 * out, 2 * out * 2 + rows_ * 4 + out * 4),
                       ("convert_dq_to_16bits", 0, out * (4 + 2))]
    rows, stats = analysed(example(tmp_path_factory, "resnet_compiled_default"))
    assert (stats.compiled.graphs, stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (
        2, 2, 285, 0)
    # The eager SGD step's first op (the weight decay, 3 lists, 48 tensors a launch) runs as two
    # launches before any launch holds the whole list: without op ranges their shares are na; so
    # is cuDNN's init_device_workspace_kernel (1.3% of the time), while its channel padding, split-K
    # reductions and segment-K passes carry their parts.
    assert round(time_share(rows, explained), 3) == 0.922
    resnet_eager, _ = analysed(EXAMPLES / "resnet.sqlite")
    assert matrix_flops(rows) == matrix_flops(resnet_eager) == 85187297280
    # A convolution's backward: one call, its data-gradient and weight-gradient kernels.
    conv = [(r["op"], r["compiled"]["call"]) for r, _ in rows if r["dir"] == "bprop" and r["module"] == "layer4.1.conv2"
            and r.get("compiled") and r["op"] == "convolution_backward"]
    assert len(conv) == 2 and conv[0] == conv[1]


def table_work(path: Path) -> list:
    """(entry, KernelWork) for every call site of the compile-time table in a trace."""
    from pyprof.parse.compiled_kernels import CompiledStats, load
    from pyprof.prof.pricing.fx_nodes import KernelWork

    with Export(str(path)) as exp:
        tables = load(exp, CompiledStats())
    return [(e, KernelWork(e)) for graphs in tables.values() for g in graphs for e in g.calls if e]


def hinted(entry: dict) -> bool:
    return any(n.get("hinted") for n in entry["nodes"])


def test_dynamic_shapes_priced_by_hints(tmp_path_factory, eager) -> None:
    """--variant dynamic (torch.compile(dynamic=True)), captured in default mode: 81 of the 109
    call sites have symbolic sizes, recorded by their hints; every call site is priced, and the
    table's FLOPs are the static graph's (examples/gpt_compiled.sqlite: 105 call sites). Every
    kernel of both runs joined; the step's FLOPs are the static compiled step's but for its eager
    AdamW: a foreach step (no counter launch), whose 8 launches carry what each does, 12 FLOPs
    per parameter element, one division fewer than the formula's capturable path counts."""
    path = example(tmp_path_factory, "gpt_dynamic")
    work = table_work(path)
    static = table_work(EXAMPLES / "gpt_compiled.sqlite")
    assert (len(work), sum(hinted(e) for e, _ in work), len(static)) == (109, 81, 105)
    assert all(w.flops is not None and w.warnings == [] for _, w in work)
    assert sum(w.flops for _, w in work) == sum(w.flops for _, w in static) == 5917143168
    rows, stats = analysed(path)
    assert (stats.compiled.graphs, stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (
        2, 2, 113, 0)
    assert round(time_share(rows, explained), 3) == 0.998
    assert total_flops(rows) == 5949644928 - 2137088 + 524288 and matrix_flops(rows) == matrix_flops(eager[0])


def test_graph_breaks_priced_by_hints(tmp_path_factory, eager) -> None:
    """--variant break captured in default mode: every call site of the 11 graphs priced by
    hints, the compiled AdamW's foreach kernels with their fused nodes (the step counters' add_
    over all 29), and every kernel of the 13 runs joined. Dynamo compiled each block's call (and
    tok, pos, ln, head's) as a frame of its own, one graph for both blocks: the call ranges name
    the calling module, so paths are absolute. What is left: GPT.forward's own eager ops (arange,
    the embeddings' sum) and the embeddings' backward graph (no caller on the autograd thread)."""
    path = example(tmp_path_factory, "gpt_break_default")
    work = table_work(path)
    assert (len(work), sum(hinted(e) for e, _ in work)) == (67, 12)
    assert all(w.flops is not None for _, w in work)
    step = {e["name"]: (len(e["nodes"]), w.flops) for e, w in work if e["name"].startswith("triton_for_fused_")}
    assert step == {"triton_for_fused_0": (1, 29), "triton_for_fused_1": (79, 29919464), "triton_for_fused_2": (79, 0)}
    [counters] = [e for e, _ in work if e["name"] == "triton_for_fused_0"]
    assert len(counters["nodes"][0]["args"][0]) == 29
    rows, stats = analysed(path)
    assert (stats.compiled.graphs, stats.compiled.instances, stats.compiled.joined, stats.compiled.unexplained) == (
        11, 13, 117, 0)
    assert round(time_share(rows, explained), 3) == 0.962
    assert [(r["module"], f.flops) for r, f in rows if r["kShortName"].startswith("nvjet") and r["dir"] == "fprop"] == [
        (f"blocks.{i}.{m}", 2 * 512 * 256 * n) for i in (0, 1) for m, n in (("qkv", 768), ("proj", 256), ("fc", 1024),
                                                                            ("out", 1024))] + [("head", 2 * 512 * 256 * 1024)]
    assert [r["op"] for r, f in rows if not explained(r, f)] == ["arange", "__add__", "__add__"] + [
        "embedding_dense_backward"] * 4
    assert total_flops(rows) == 5953158917 + 524288 and matrix_flops(rows) == matrix_flops(eager[0])
