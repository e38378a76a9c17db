"""Attribution of kernels to launches and ranges, over synthetic exports of every schema variant."""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from nsys_synth import H100, SynthExport, marker, torch_text
from pyprof.parse import Export, Stats, records

A100 = {"name": "NVIDIA A100-SXM4-80GB", "memoryBandwidth": 2039000000000, "smCount": 108, "clockRate": 1410000000}


def parse_all(path: str | Path, memcpy: bool = False) -> tuple[list[dict[str, Any]], Stats]:
    stats = Stats()
    with Export(str(path)) as exp:
        out = list(records(exp, stats, memcpy))
    return out, stats


def by_corr(recs: list[dict[str, Any]], pid: int = 100) -> dict[int, dict[str, Any]]:
    return {r["correlationId"]: r for r in recs if r["pid"] == pid}


def training_step(path: Path, **variant: Any) -> SynthExport:
    """One forward (main thread) and backward (autograd thread) step of a linear layer.

    Correlation ids of process 100: 1, 2 GEMM + bias kernels of addmm (fwd), 3 relu (fwd),
    4 threshold_backward (bwd), 5, 6 the two mm of AddmmBackward0 (bwd), 7 a kernel on the
    autograd thread outside any range (bwd by thread).
    """
    syn = SynthExport(str(path), **variant)
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 90000, "layer:encoder")
    syn.push(main, 1100, 40000, marker("module", module="enc.fc", cls="Linear", repr="in_features=512"), domain=dom,
             registered=True)
    syn.push(main, 1200, 30000, marker("op", mod="torch.nn.functional", op="linear",
                                       args=[{"shape": [64, 512], "dtype": "float16"}], site="train.py:10",
                                       module="enc.fc"), domain=dom, registered=True)
    syn.push(main, 1300, 29000, torch_text("aten::linear", seq=7, op_id=20, sizes=[[64, 512], [512, 512], [512]]))
    syn.push(main, 1400, 1900, torch_text("aten::t", seq=7, op_id=21, sizes=[[512, 512]]))
    syn.push(main, 2000, 28000, torch_text("aten::addmm", seq=7, op_id=22, sizes=[[512], [64, 512], [512, 512]],
                                           input_op_ids=[(21, 0), (0, -1)]))
    syn.launch_kernel(main, 3000, "void cutlass::Kernel<cutlass_80_tensorop_f16_s16816gemm>(Params)",
                      short="cutlass_80_tensorop_f16_s16816gemm", grid=(4, 2, 1), block=(128, 1, 1), regs=230,
                      static_shared=1024, dynamic_shared=65536)
    syn.launch_kernel(main, 6000, "void splitKreduce_kernel<float>(Params)")
    syn.push(main, 41000, 60000, marker("op", mod="torch.nn.functional", op="relu", args=[], site="train.py:11"),
             domain=dom, registered=True)
    syn.push(main, 41500, 59000, torch_text("aten::relu", seq=8, op_id=23, sizes=[[64, 512]]))
    syn.launch_kernel(main, 42000, "void at::native::vectorized_elementwise_kernel<4, relu>(int)")
    syn.push(main, 100000, 300000, marker("op", mod="Tensor", op="backward", args=[], site="train.py:13"),
             domain=dom, registered=True)
    # backward, on the autograd thread
    syn.push(grad, 110000, 130000, "autograd::engine::evaluate_function: ReluBackward0")
    syn.push(grad, 111000, 129000, torch_text("ReluBackward0", seq=8, op_id=30))
    syn.push(grad, 112000, 128000, torch_text("aten::threshold_backward", op_id=31, sizes=[[64, 512], [64, 512], []]))
    syn.launch_kernel(grad, 113000, "void at::native::threshold_backward_kernel(int)")
    syn.push(grad, 140000, 190000, "autograd::engine::evaluate_function: AddmmBackward0")
    syn.push(grad, 141000, 189000, torch_text("AddmmBackward0", seq=7, op_id=32))
    syn.push(grad, 142000, 160000, torch_text("aten::mm", op_id=33, sizes=[[64, 512], [512, 512]]))
    syn.launch_kernel(grad, 143000, "ampere_fp16_s16816gemm_fp16_128x64_nn")
    syn.push(grad, 161000, 180000, torch_text("aten::mm", op_id=34, sizes=[[512, 64], [64, 512]]))
    syn.launch_kernel(grad, 162000, "ampere_fp16_s16816gemm_fp16_64x64_tn")
    syn.launch_kernel(grad, 200000, "void at::native::reduce_kernel<512>(int)")
    syn.map_device(100, 0, 0)
    return syn


@pytest.fixture
def step_records(tmp_path: Path) -> tuple[dict[int, dict[str, Any]], Stats]:
    recs, stats = parse_all(training_step(tmp_path / "step.sqlite").close())
    return by_corr(recs), stats


def test_forward_gemm_kernel_is_attributed_to_its_op_marker_shapes_layer_and_module(step_records) -> None:
    k = step_records[0][1]
    assert k["kind"] == "kernel" and k["v"] == 1
    assert k["kShortName"] == "cutlass_80_tensorop_f16_s16816gemm"
    assert k["kLongName"] == "void cutlass::Kernel<cutlass_80_tensorop_f16_s16816gemm>(Params)"
    assert (k["grid"], k["block"], k["regs"], k["staticShared"], k["dynamicShared"]) == ([4, 2, 1], [128, 1, 1], 230, 1024, 65536)
    assert (k["pid"], k["tid"], k["device"], k["stream"]) == (100, 100, 0, 7)
    assert k["launch"] == {"api": "cudaLaunchKernel_v7000", "start": 3000, "duration": 2000}
    assert (k["kStart"], k["kEnd"], k["kDuration"]) == (13000, 18000, 5000)
    assert k["dir"] == "fprop"
    assert (k["mod"], k["op"]) == ("torch.nn.functional", "linear")
    assert k["marker"]["args"] == [{"shape": [64, 512], "dtype": "float16"}]
    assert k["torchOps"] == [
        {"name": "aten::linear", "seq": 7, "opId": 20, "sizes": [[64, 512], [512, 512], [512]]},
        {"name": "aten::addmm", "seq": 7, "opId": 22, "sizes": [[512], [64, 512], [512, 512]], "inputOpIds": [[21, 0], [0, -1]]},
    ]
    assert (k["seqId"], k["altSeqId"], k["subSeqId"]) == (7, [7], 0)
    assert k["layer"] == ["encoder"]
    assert k["module"] == "enc.fc"
    assert k["trace"] == "train.py:10"
    assert k["ranges"] == []
    assert k["fwd"] is None
    assert k["gpu"] == H100


def test_second_kernel_of_the_same_op_gets_the_next_sub_sequence_id(step_records) -> None:
    recs = step_records[0]
    assert recs[2]["subSeqId"] == 1 and recs[2]["op"] == "linear"
    relu = recs[3]
    assert (relu["op"], relu["subSeqId"], relu["seqId"], relu["altSeqId"]) == ("relu", 0, 8, [])
    assert relu["module"] is None  # outside the module marker, and its op marker names none
    assert relu["layer"] == ["encoder"] and relu["trace"] == "train.py:11"


def test_backward_kernel_takes_op_module_and_site_from_the_forward_marker_by_seq(step_records) -> None:
    recs = step_records[0]
    for corr, mm in ((5, "aten::mm"), (6, "aten::mm")):
        k = recs[corr]
        assert k["dir"] == "bprop"
        assert k["tid"] == 101
        assert (k["mod"], k["op"]) == ("torch.nn.functional", "linear")
        assert k["fwd"]["seq"] == 7 and k["fwd"]["torchOp"] == "aten::addmm"
        assert k["fwd"]["marker"]["site"] == "train.py:10"
        assert k["module"] == "enc.fc" and k["trace"] == "train.py:10"
        assert k["marker"] is None  # no op marker encloses the launch on the autograd thread
        assert [o["name"] for o in k["torchOps"]] == ["autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", mm]
        assert k["seqId"] == 7 and k["layer"] == ["encoder"]  # the forward op's layer: none is open on this thread
    assert recs[5]["torchOps"][-1]["sizes"] == [[64, 512], [512, 512]]
    relu_bwd = recs[4]
    assert relu_bwd["dir"] == "bprop" and relu_bwd["op"] == "relu" and relu_bwd["fwd"]["torchOp"] == "aten::relu"
    assert relu_bwd["trace"] == "train.py:11"


def test_kernel_on_the_autograd_thread_outside_any_range_is_bprop(step_records) -> None:
    k = step_records[0][7]
    assert k["dir"] == "bprop" and k["fwd"] is None and k["op"] is None and k["torchOps"] == []


def test_forward_op_on_a_thread_that_ran_backward_is_fprop(tmp_path: Path) -> None:
    """CPU autograd runs backward on the calling thread: that thread's later forward ops stay fprop,
    and only a launch that no op range explains is taken as backward by the thread rule."""
    syn = SynthExport(str(tmp_path / "one_thread.sqlite"))
    main = syn.thread(100, 100, "python3")
    syn.push(main, 1000, 5000, torch_text("MulBackward0", seq=3, op_id=10))
    syn.launch_kernel(main, 2000, "void at::native::vectorized_elementwise_kernel<4, mul>(int)")
    syn.push(main, 10000, 20000, torch_text("aten::mul", seq=4, op_id=11, sizes=[[8], [8]]))
    syn.launch_kernel(main, 11000, "void at::native::vectorized_elementwise_kernel<4, mul>(int)")
    syn.launch_kernel(main, 30000, "void at::native::vectorized_elementwise_kernel<4, fill>(int)")
    recs = by_corr(parse_all(syn.close())[0])
    assert [(recs[c]["dir"], recs[c]["op"]) for c in (1, 2, 3)] == [("bprop", "MulBackward0"), ("fprop", "mul"),
                                                                      ("bprop", None)]


def test_summary_counts(step_records) -> None:
    stats = step_records[1]
    assert (stats.kernels, stats.records, stats.no_launch, stats.malformed, stats.not_understood) == (7, 7, 0, 0, 0)
    assert stats.with_op == 6


@pytest.mark.parametrize("variant", [
    {"text_id": False}, {"mangled_name": False}, {"end_global_tid": False}, {"graph_node_id": False},
    {"version": None}, {"target_info": False},
    {"text_id": False, "mangled_name": False, "end_global_tid": False, "graph_node_id": False, "target_info": False},
])
def test_schema_variants_keep_the_attribution(tmp_path: Path, variant: dict[str, Any]) -> None:
    recs, stats = parse_all(training_step(tmp_path / "v.sqlite", **variant).close())
    ks = by_corr(recs)
    assert len(ks) == 7 and stats.malformed == 0
    assert (ks[1]["op"], ks[1]["module"], ks[1]["layer"], ks[1]["seqId"]) == ("linear", "enc.fc", ["encoder"], 7)
    assert (ks[6]["dir"], ks[6]["op"], ks[6]["fwd"]["torchOp"]) == ("bprop", "linear", "aten::addmm")
    assert ks[1]["gpu"] == (None if variant.get("target_info") is False else H100)
    assert ks[1]["graphNode"] is None


def test_export_without_string_table_degrades_to_null_names(tmp_path: Path) -> None:
    path = training_step(tmp_path / "s.sqlite", text_id=False).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE StringIds")
    db.commit()
    db.close()
    recs, _ = parse_all(path)
    ks = by_corr(recs)
    assert ks[1]["kShortName"] is None and ks[1]["launch"]["api"] is None
    # inline text needs no StringIds: PyTorch ranges and layers still attribute; the domain name
    # "pyprof" was registered and is lost, so markers are not recognised.
    assert ks[1]["torchOps"][-1]["name"] == "aten::addmm" and ks[1]["layer"] == ["encoder"]


def test_export_without_runtime_or_nvtx_tables_keeps_every_kernel(tmp_path: Path) -> None:
    path = training_step(tmp_path / "r.sqlite").close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    db.execute("DROP TABLE NVTX_EVENTS")
    db.commit()
    db.close()
    recs, stats = parse_all(path)
    assert len(recs) == 7 and stats.no_launch == 7
    assert [r["kStart"] for r in recs] == sorted(r["kStart"] for r in recs)
    assert all(r["launch"] is None and r["tid"] is None and r["op"] is None for r in recs)


def test_correlation_ids_repeat_across_processes(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "mp.sqlite"), gpus=(H100, A100))
    a, b = syn.thread(100, 100), syn.thread(200, 200)
    # Both processes number their launches from 1; the same domain id means different domains.
    dom_a = syn.domain(a, "pyprof")
    dom_b = syn.domain(b, "nccl")
    assert dom_a == dom_b == 1
    syn.push(a, 1000, 9000, marker("op", mod="torch", op="matmul", args=[], site="a.py:1"), domain=dom_a)
    syn.push(b, 1500, 9500, marker("op", mod="torch", op="add", args=[], site="b.py:1"), domain=dom_b)
    syn.push(b, 1600, 9400, torch_text("aten::add", seq=3, op_id=4))
    assert syn.launch_kernel(a, 2000, "gemm_a", gpu_start=50000) == 1
    assert syn.launch_kernel(b, 3000, "add_b", gpu_start=40000) == 1
    syn.map_device(100, 0, 1)   # process 100's cuda:0 is the A100 (GPU 1), process 200's the H100
    syn.map_device(200, 0, 0)
    recs, stats = parse_all(syn.close())
    assert [(r["pid"], r["kShortName"], r["launch"]["start"]) for r in recs] == [(100, "gemm_a", 2000), (200, "add_b", 3000)]
    assert recs[0]["op"] == "matmul" and recs[0]["gpu"] == A100
    assert recs[1]["op"] == "add" and recs[1]["mod"] == "aten" and recs[1]["marker"] is None
    assert recs[1]["ranges"] == ['nccl:{"v":1,"kind":"op","mod":"torch","op":"add","args":[],"site":"b.py:1"}']
    assert recs[1]["gpu"] == H100
    assert stats.no_launch == 0


def test_kernels_without_launch_and_graph_kernels(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "g.sqlite"))
    t = syn.thread(100, 100)
    syn.push(t, 1000, 20000, "layer:decode")
    graph = syn.launch(t, 2000, 4000, api="cudaGraphLaunch_v10000")
    for node, start in ((11, 30000), (12, 36000)):
        syn.kernel(100, graph, start, start + 3000, "void flash_fwd_kernel<Flash_fwd_kernel_traits>(Params)", graph_node=node)
    syn.kernel(100, 9999, 25000, 26000, "void replayed_kernel(int)", graph_node=13)  # no launch row at all
    syn.launch_kernel(t, 22000, "after_graph", gpu_start=40000)
    recs, stats = parse_all(syn.close())
    names = [(r["kShortName"], r["graphNode"]) for r in recs]
    assert names == [("flash_fwd_kernel", 11), ("flash_fwd_kernel", 12), ("after_graph", None), ("replayed_kernel", 13)]
    g1, g2, after, orphan = recs
    assert g1["launch"]["api"] == "cudaGraphLaunch_v10000" and g1["layer"] == ["decode"]
    assert (g1["subSeqId"], g2["subSeqId"]) == (0, 0)  # no op range: each is first of nothing
    assert after["layer"] == []
    assert orphan["launch"] is None and orphan["tid"] is None and orphan["layer"] == [] and orphan["pid"] == 100
    assert orphan["dir"] == "fprop" and orphan["gpu"] == H100
    assert stats.no_launch == 1


def test_start_end_ranges_span_threads_within_their_process(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "se.sqlite"))
    t1, t2, t3 = syn.thread(100, 100), syn.thread(100, 101), syn.thread(100, 102)
    other = syn.thread(200, 200)
    syn.start_end(t1, 1000, 50000, "epoch 3", end_thread=t2)
    syn.push(t3, 1500, 9000, torch_text("aten::mul", seq=2, op_id=9))
    syn.launch_kernel(t3, 2000, "mul_kernel")
    syn.launch_kernel(other, 3000, "other_process_kernel")
    syn.launch_kernel(t2, 60000, "after_epoch")
    recs, _ = parse_all(syn.close())
    k, o, after = recs
    assert k["ranges"] == ["epoch 3"] and k["op"] == "mul" and k["torchOps"][0]["name"] == "aten::mul"
    assert o["ranges"] == [] and after["ranges"] == []


def test_ranges_still_open_at_capture_stop_enclose_everything_after(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "open.sqlite"))
    t = syn.thread(100, 100)
    other = syn.thread(100, 101)
    syn.push(t, 1000, None, "layer:model")
    syn.start_end(t, 1200, None, "warmup done")
    syn.push(t, 1500, 3000, "layer:stem")
    syn.launch_kernel(t, 2000, "k1")
    syn.launch_kernel(t, 900000, "k2")
    syn.launch_kernel(other, 900001, "k3")
    recs, _ = parse_all(syn.close())
    assert [(r["layer"], r["ranges"]) for r in recs] == [
        (["model", "stem"], ["warmup done"]), (["model"], ["warmup done"]), ([], ["warmup done"])]


def test_old_pytorch_range_text(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "old.sqlite"))
    main, grad = syn.thread(100, 100), syn.thread(100, 101)
    syn.push(main, 1000, 9000, "addmm, seq = 33")
    syn.launch_kernel(main, 2000, "sgemm")
    syn.push(grad, 20000, 29000, "AddmmBackward, seq = 33")
    syn.launch_kernel(grad, 21000, "sgemm_bwd")
    recs, _ = parse_all(syn.close())
    fwd, bwd = recs
    assert (fwd["dir"], fwd["mod"], fwd["op"], fwd["seqId"]) == ("fprop", None, "addmm", 33)
    assert fwd["torchOps"] == [{"name": "addmm", "seq": 33}]
    assert (bwd["dir"], bwd["op"], bwd["fwd"]) == ("bprop", "addmm", {"seq": 33, "marker": None, "torchOp": "addmm"})


def test_malformed_and_unknown_markers_are_counted_not_fatal(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "bad.sqlite"))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    syn.push(t, 1000, 9000, '{"v":1,"kind":"op","mod":"torch","op":"add"', domain=dom)      # cut short
    syn.push(t, 1100, 8000, "__import__('os').system('echo pwned')", domain=dom)            # never executed
    syn.push(t, 1200, 7000, '{"v":1,"kind":"op","op":"x","args":[NaN]}', domain=dom)       # not JSON we write
    syn.push(t, 1300, 6000, '{"v":2,"kind":"future"}', domain=dom)
    syn.push(t, 1400, 5000, "plain user text")
    syn.launch_kernel(t, 2000, "k")
    recs, stats = parse_all(syn.close())
    (k,) = recs
    assert k["marker"] is None and k["op"] is None
    assert k["ranges"] == ['pyprof:{"v":2,"kind":"future"}', "plain user text"]
    assert (stats.malformed, stats.not_understood) == (3, 1)


def test_layer_markers_and_layer_ranges_in_any_domain_nest(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "layers.sqlite"))
    t = syn.thread(100, 100)
    dom = syn.domain(t, "pyprof")
    mine = syn.domain(t, "myapp", registered=True)
    syn.push(t, 1000, 9000, marker("layer", name="encoder"), domain=dom, registered=True)
    syn.push(t, 1100, 8000, "layer:block1", domain=mine, registered=True)
    syn.push(t, 1200, 7000, "attention", domain=mine)
    syn.push(t, 1300, 6000, "layer:qkv")
    syn.launch_kernel(t, 2000, "k")
    recs, _ = parse_all(syn.close())
    assert recs[0]["layer"] == ["encoder", "block1", "qkv"]
    assert recs[0]["ranges"] == ["myapp:attention"]


def test_memcpy_and_memset_records_are_merged_in_launch_order(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "mc.sqlite"))
    t = syn.thread(100, 100)
    syn.push(t, 1000, 9000, torch_text("aten::copy_", seq=1, op_id=2, sizes=[[64], [64]]))
    c = syn.launch(t, 2000, api="cudaMemcpyAsync_v3020")
    syn.memcpy(100, c, 20000, 21000, 256, 1)
    syn.launch_kernel(t, 3000, "k", gpu_start=22000)
    c = syn.launch(t, 4000, api="cudaMemsetAsync_v3020")
    syn.memset(100, c, 30000, 30500, 1024)
    c = syn.launch(t, 50000, api="cudaMemcpyAsync_v3020")
    syn.memcpy(100, c, 60000, 61000, 128, 2)
    path = syn.close()
    plain, _ = parse_all(path)
    assert [r["kind"] for r in plain] == ["kernel"]
    recs, stats = parse_all(path, memcpy=True)
    assert [(r["kind"], r["kShortName"]) for r in recs] == [
        ("memcpy", "memcpy HtoD"), ("kernel", "k"), ("memset", "memset"), ("memcpy", "memcpy DtoH")]
    h2d, kern, mset, d2h = recs
    assert (h2d["bytes"], h2d["copyKind"], h2d["op"], h2d["seqId"], h2d["subSeqId"]) == (256, "HtoD", "copy_", 1, 0)
    assert kern["subSeqId"] == 1 and mset["subSeqId"] == 2 and mset["bytes"] == 1024
    assert d2h["op"] is None and d2h["launch"]["api"] == "cudaMemcpyAsync_v3020"
    assert (stats.kernels, stats.records) == (1, 4)


def test_equal_start_ranges_order_longer_outside(tmp_path: Path) -> None:
    syn = SynthExport(str(tmp_path / "tie.sqlite"))
    t = syn.thread(100, 100)
    # Inserted inner first: parse must not depend on the table's row order.
    syn.push(t, 1000, 5000, torch_text("aten::addmm", seq=5, op_id=6))
    syn.push(t, 1000, 9000, torch_text("aten::linear", seq=5, op_id=5))
    syn.launch_kernel(t, 2000, "k")
    recs, _ = parse_all(syn.close())
    assert [o["name"] for o in recs[0]["torchOps"]] == ["aten::linear", "aten::addmm"]
    assert recs[0]["op"] == "addmm"


@pytest.mark.parametrize("node,engine", [("CopySlices", True), ("torch::autograd::CopySlices", False)])
def test_copyslices_node_kernels_are_the_backward_of_the_op_that_copied_into_a_view(tmp_path: Path, node: str,
                                                                                    engine: bool) -> None:
    """An in-place op on a view (`out[:2].copy_(x)`, inside torch._pad_packed_sequence) gives the
    view's base a CopySlices node, an autograd node whose name has no "Backward": its kernels are
    the op's backward (bprop, the op's marker by the node's seq), as a ...Backward0 node's are;
    also under the namespaced name PyTorch's node ranges give it, without the engine's range (as
    pricing_coverage.py's rnn_packed capture has it)."""
    syn = SynthExport(str(tmp_path / "copyslices.sqlite"))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 30000, marker("op", mod="torch", op="_pad_packed_sequence", args=[], site="train.py:5"),
             domain=dom, registered=True)
    syn.push(main, 1100, 29000, torch_text("aten::copy_", seq=9, op_id=20, sizes=[[2, 3, 8], [2, 3, 8], []]))
    syn.launch_kernel(main, 2000, "void at::native::elementwise_kernel<128, 2>(int)")
    if engine:
        syn.push(grad, 110000, 130000, "autograd::engine::evaluate_function: CopySlices")
    syn.push(grad, 111000, 129000, torch_text(node, seq=9, op_id=30))
    syn.launch_kernel(grad, 112000, "void at::native::elementwise_kernel<128, 2>(int)")
    syn.map_device(100, 0, 0)
    recs = by_corr(parse_all(syn.close())[0])
    fwd, bwd = recs[1], recs[2]
    assert (fwd["dir"], fwd["op"]) == ("fprop", "_pad_packed_sequence")
    assert (bwd["dir"], bwd["mod"], bwd["op"], bwd["seqId"]) == ("bprop", "torch", "_pad_packed_sequence", 9)
    assert bwd["fwd"]["marker"]["op"] == "_pad_packed_sequence"
    assert bwd["torchOps"][-1] == {"name": node, "seq": 9, "opId": 30}


def test_a_custom_ops_cpp_autograd_node_is_its_backward(tmp_path: Path) -> None:
    """A custom op's autograd Function written in C++ (torchvision's RoIAlign) runs its backward
    as `torch::autograd::CppNode<...ROIAlignFunction>`, as PyTorch's node ranges name it: an
    autograd node, whose kernels are the backward (bprop) of the op whose marker made it (a
    detection model's roi_align backward kernels were `fprop`, op `ROIAlignFunction>`, before)."""
    syn = SynthExport(str(tmp_path / "cppnode.sqlite"))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.push(main, 1000, 30000, marker("op", mod="torch.ops.torchvision", op="roi_align", args=[], site="train.py:5"),
             domain=dom, registered=True, payload=9)
    syn.launch_kernel(main, 2000, "void vision::ops::roi_align_forward_kernel_impl<float>(int)")
    node = "torch::autograd::CppNode<vision::ops::(anonymous namespace)::ROIAlignFunction>"
    syn.push(grad, 111000, 129000, torch_text(node, seq=9, op_id=30))
    syn.launch_kernel(grad, 112000, "void vision::ops::roi_align_backward_kernel_impl<float>(int)")
    syn.map_device(100, 0, 0)
    recs = by_corr(parse_all(syn.close())[0])
    bwd = recs[2]
    assert (bwd["dir"], bwd["mod"], bwd["op"], bwd["seqId"]) == ("bprop", "torch.ops.torchvision", "roi_align", 9)
    assert bwd["torchOps"][-1] == {"name": node, "seq": 9, "opId": 30}
