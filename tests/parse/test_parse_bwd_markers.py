"""Backward kernels attributed through pyprof `bwd` markers (no emit_nvtx ranges at all)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsys_synth import SynthExport, marker, torch_text
from pyprof.parse import Export, Stats, records
from pyprof.parse.ranges import BWD, classify

LINEAR = marker("op", mod="torch.nn.functional", op="linear", args=[{"shape": [64, 512], "dtype": "float16"}],
                site="train.py:10", module="enc.fc")
RELU = marker("op", mod="torch.nn.functional", op="relu", args=[{"shape": [64, 512], "dtype": "float16"}],
              site="train.py:11")


def bwd(node: str, fwd: str) -> str:
    return '{"v":2,"kind":"bwd","node":' + json.dumps(node) + ',"fwd":' + fwd + "}"


def default_mode_step(path: Path) -> str:
    """Forward linear + relu on the main thread; backward on the autograd thread as pyprof's node
    hooks leave it: each bwd range open until the next one starts, the last open at capture stop.
    Correlation ids: 1 linear, 2 relu (fwd); 3 before any bwd range on the autograd thread; 4
    relu's node, 5 the gradient add after it (no node running), 6, 7 linear's node."""
    syn = SynthExport(str(path))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.domain(grad, "pyprof", t=11, registered=True)
    syn.push(main, 1000, 2000, LINEAR, domain=dom, registered=True)
    syn.launch_kernel(main, 1500, "void gemm_kernel<float>(float*)")
    syn.push(main, 3000, 4000, RELU, domain=dom, registered=True)
    syn.launch_kernel(main, 3500, "void at::native::vectorized_elementwise_kernel<4, relu>(int)")
    syn.push(main, 5000, 90000, marker("op", mod="Tensor", op="backward", args=[], site="train.py:13"),
             domain=dom, registered=True)
    syn.launch_kernel(grad, 5500, "void at::native::vectorized_elementwise_kernel<4, add>(int)")
    syn.push(grad, 6000, 8000, bwd("ReluBackward0", RELU), domain=dom, registered=True)
    syn.launch_kernel(grad, 6500, "void at::native::vectorized_elementwise_kernel<4, threshold_backward>(int)")
    syn.launch_kernel(grad, 7500, "void at::native::vectorized_elementwise_kernel<4, add>(int)")
    syn.push(grad, 8000, None, bwd("AddmmBackward0", LINEAR), domain=dom, registered=True)
    syn.launch_kernel(grad, 8500, "void gemm_kernel<float>(float*)")
    syn.launch_kernel(grad, 9500, "void gemm_kernel<float>(float*)")
    return syn.close()


def test_bwd_marker_is_classified_with_its_forward_ops_attributes() -> None:
    label = classify("pyprof", bwd("AddmmBackward0", LINEAR))
    assert label.kind == BWD and label.bwd and label.name == "AddmmBackward0"
    assert label.attrs == ('"torch.nn.functional"', '"linear"', '"train.py:10"', '"enc.fc"')
    assert json.loads(label.js) == {"seq": None, "marker": json.loads(LINEAR), "torchOp": None,
                                    "node": "AddmmBackward0"}


def test_bwd_marker_without_a_forward_op_marker_is_unknown_not_fatal() -> None:
    assert classify("pyprof", '{"v":2,"kind":"bwd","node":"X","fwd":{"v":1,"kind":"layer","name":"a"}}').kind != BWD


def test_backward_kernels_take_op_module_site_and_marker_from_the_bwd_marker(tmp_path: Path) -> None:
    stats = Stats()
    with Export(default_mode_step(tmp_path / "s.sqlite")) as exp:
        recs = {r["correlationId"]: r for r in records(exp, stats)}
    # 3: nothing yet says that thread runs backward (as with emit_nvtx's ranges).
    assert [recs[c]["dir"] for c in range(1, 8)] == ["fprop", "fprop", "fprop", "bprop", "bprop", "bprop", "bprop"]
    assert recs[3]["op"] is None and recs[3]["fwd"] is None
    relu = recs[4]
    assert (relu["mod"], relu["op"], relu["module"], relu["trace"]) == ("torch.nn.functional", "relu", None, "train.py:11")
    assert relu["fwd"] == {"seq": None, "marker": json.loads(RELU), "torchOp": None, "node": "ReluBackward0"}
    assert relu["marker"] is None and relu["torchOps"] == [] and relu["subSeqId"] == 0
    # What the engine launches after a node, before the next one starts, stays in its range.
    assert (recs[5]["op"], recs[5]["subSeqId"]) == ("relu", 1)
    for c, sub in ((6, 0), (7, 1)):
        k = recs[c]
        assert (k["op"], k["module"], k["trace"], k["subSeqId"]) == ("linear", "enc.fc", "train.py:10", sub)
        assert k["fwd"]["node"] == "AddmmBackward0"


def leaf(shape: list, param: str, module: str) -> str:
    """pyprof.nvtx.leaf_grads's forward marker of a compiled program's parameter."""
    return marker("op", mod="torch._C._functions", op="AccumulateGrad",
                  args=[{"shape": shape, "dtype": "float32", "grad": True}], kwargs={"param": param}, module=module)


LAYOUT_COPY = ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<"
               "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]>"
               "(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
ADD = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
       "std::array<char *, (unsigned long)3>>(int, T2, T3)")


def test_a_compiled_programs_leaf_gradients_are_their_parameters_and_priced(tmp_path: Path) -> None:
    """After a compiled backward, the engine stores each parameter's gradient in an AccumulateGrad
    range of its own (pyprof.nvtx.leaf_grads): the copy into blocks.0.weight's layout ([64, 32, 3,
    3] fp32, 18,432 elements: read and written once) and the add onto blocks.1.bias's gradient
    ([64]: both read, the sum written, an add each) are those parameters' kernels, not the loss's
    whose range was open before."""
    from test_prof_helpers import analyse

    loss = marker("op", mod="torch.nn.functional", op="cross_entropy",
                  args=[{"shape": [4, 10], "dtype": "float32", "grad": True}, {"shape": [4], "dtype": "int64"}])
    syn = SynthExport(str(tmp_path / "leaves.sqlite"))
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(grad, "pyprof", t=11, registered=True)
    syn.push(grad, 1000, 2000, bwd("NllLossBackward0", loss), domain=dom, registered=True)
    syn.launch_kernel(grad, 1500, "void at::native::vectorized_elementwise_kernel<4, nll_loss_backward>(int)")
    syn.push(grad, 2000, 3000, bwd("AccumulateGrad", leaf([64, 32, 3, 3], "weight", "blocks.0")), domain=dom,
             registered=True)
    syn.launch_kernel(grad, 2500, LAYOUT_COPY)
    syn.push(grad, 3000, None, bwd("AccumulateGrad", leaf([64], "bias", "blocks.1")), domain=dom, registered=True)
    syn.launch_kernel(grad, 3500, ADD)
    with Export(syn.close()) as exp:
        recs = list(records(exp, Stats()))
    copy, add = recs[1], recs[2]
    assert [(r["dir"], r["mod"], r["op"], r["module"], r["fwd"]["node"], r["subSeqId"]) for r in (copy, add)] == [
        ("bprop", "torch._C._functions", "AccumulateGrad", "blocks.0", "AccumulateGrad", 0),
        ("bprop", "torch._C._functions", "AccumulateGrad", "blocks.1", "AccumulateGrad", 0)]
    assert copy["fwd"]["marker"]["kwargs"] == {"param": "weight"}
    copy["grid"], add["grid"] = [72, 1, 1], [1, 1, 1]  # as PyTorch launches them: 256 and 512 elements a block
    facts, tally = analyse([copy, add])
    assert [(f.flops, f.bytes) for f in facts] == [(0, 2 * 18432 * 4), (64, 3 * 64 * 4)]
    assert tally.warnings == {}


LAYER_NORM = marker("op", mod="torch.nn.functional", op="layer_norm",
                    args=[{"shape": [64, 512], "dtype": "float16"}, [512]], site="model.py:20", module="ln1")


@pytest.mark.parametrize("node", ["pyprof", "emit_nvtx"])
def test_a_forward_call_inside_a_backward_node_owns_its_kernels(tmp_path: Path, node: str) -> None:
    """Activation checkpointing recomputes a block's forward when the backward first needs one of
    its tensors, inside the node that asked (here linear's AddmmBackward0, as pyprof's node hook
    or PyTorch's emit_nvtx range tells it); a custom autograd.Function's backward calls torch the
    same way. The layer_norm marker opened inside the node range owns its kernel: the layer_norm's
    forward, its module and call site; the node's own kernels before and after stay linear's
    backward."""
    syn = SynthExport(str(tmp_path / "recompute.sqlite"))
    main = syn.thread(100, 100, "python3")
    grad = syn.thread(100, 101, "pt_autograd_0")
    dom = syn.domain(main, "pyprof", t=10, registered=True)
    syn.domain(grad, "pyprof", t=11, registered=True)
    syn.push(main, 1000, 2000, LINEAR, domain=dom, registered=True)
    if node == "emit_nvtx":
        syn.push(main, 1100, 1900, torch_text("aten::linear", seq=7))
    syn.launch_kernel(main, 1500, "void gemm_kernel<float>(float*)")
    if node == "pyprof":
        syn.push(grad, 8000, 9900, bwd("AddmmBackward0", LINEAR), domain=dom, registered=True)
    else:
        syn.push(grad, 8000, 9900, torch_text("autograd::engine::evaluate_function: AddmmBackward0"))
        syn.push(grad, 8010, 9890, torch_text("AddmmBackward0", seq=7))
    syn.launch_kernel(grad, 8500, "void gemm_kernel<float>(float*)")
    syn.push(grad, 8600, 8900, LAYER_NORM, domain=dom, registered=True)
    syn.launch_kernel(grad, 8700, "void at::native::vectorized_layer_norm_kernel<float>(int)")
    syn.launch_kernel(grad, 9500, "void gemm_kernel<float>(float*)")
    stats = Stats()
    with Export(syn.close()) as exp:
        recs = [r for r in records(exp, stats)]
    assert [(r["dir"], r["op"], r["module"], r["trace"]) for r in recs] == [
        ("fprop", "linear", "enc.fc", "train.py:10"), ("bprop", "linear", "enc.fc", "train.py:10"),
        ("fprop", "layer_norm", "ln1", "model.py:20"), ("bprop", "linear", "enc.fc", "train.py:10")]
    assert recs[2]["fwd"] is None and recs[2]["marker"] == json.loads(LAYER_NORM)
