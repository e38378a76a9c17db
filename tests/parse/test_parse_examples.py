"""End to end over the real H100 captures in examples/ (nsys 2025.3.2, PyTorch with emit_nvtx and
pyprof.init()): concrete kernels attributed to their ops, shapes, modules, directions and sites."""
from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
H100 = {"name": "NVIDIA H100 80GB HBM3", "memoryBandwidth": 3352320000000, "smCount": 132, "clockRate": 1980000000}


def parse(name: str, *args: str) -> tuple[list[dict[str, Any]], str]:
    path = ROOT / "examples" / name
    if not path.exists():
        pytest.skip(f"{path} not captured yet")
    res = subprocess.run([sys.executable, "-m", "pyprof.parse", str(path), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()], res.stderr


@pytest.fixture(scope="module")
def lenet() -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]], str]:
    recs, err = parse("lenet.sqlite")
    return {r["correlationId"]: r for r in recs}, recs, err


def test_lenet_every_kernel_is_attributed(lenet) -> None:
    by_corr, recs, err = lenet
    assert len(recs) == 44
    assert err == ("pyprof.parse: 44 kernels written; 100.0% with an op attributed; 0 without a launch call; "
                   "0 ranges not understood; 0 malformed pyprof markers\n")
    assert [r["launch"]["start"] for r in recs] == sorted(r["launch"]["start"] for r in recs)
    assert collections.Counter(r["dir"] for r in recs) == {"fprop": 15, "bprop": 26, "optim": 3}
    # forward on the main thread; backward on PyTorch's autograd thread
    assert {r["tid"] for r in recs if r["dir"] == "bprop"} == {471, 500}
    assert all(r["tid"] == 471 for r in recs if r["dir"] != "bprop")
    assert all(r["gpu"] == H100 and r["pid"] == 471 for r in recs)


def test_lenet_first_convolution(lenet) -> None:
    k = lenet[0][167]
    assert k["kShortName"] == "implicit_convolve_sgemm" and (k["grid"], k["block"]) == ([25, 1, 1], [8, 8, 1])
    assert (k["dir"], k["mod"], k["op"], k["module"], k["seqId"], k["subSeqId"]) == (
        "fprop", "torch.nn.functional", "conv2d", "conv1", 48, 0)
    assert k["trace"].endswith("examples/lenet.py:31")
    assert k["marker"]["args"][:2] == [{"shape": [1, 1, 32, 32], "dtype": "float32"}, {"shape": [6, 1, 5, 5], "dtype": "float32"}]
    assert [o["name"] for o in k["torchOps"]] == ["aten::conv2d", "aten::convolution", "aten::_convolution",
                                                  "aten::cudnn_convolution"]
    assert k["torchOps"][0]["sizes"][:3] == [[1, 1, 32, 32], [6, 1, 5, 5], [6]]
    assert k["launch"]["api"] == "cudaLaunchKernel_v7000"
    bias = lenet[0][177]  # the bias add of the same conv2d call: first kernel of its own innermost op
    assert (bias["op"], bias["subSeqId"], bias["torchOps"][-1]["name"]) == ("conv2d", 0, "aten::add_")


def test_lenet_linear_forward_and_backward(lenet) -> None:
    fwd = lenet[0][286]
    assert (fwd["op"], fwd["module"], fwd["seqId"], fwd["altSeqId"]) == ("linear", "fc1", 56, [55])
    assert fwd["torchOps"][-1]["sizes"] == [[120], [1, 400], [400, 120], [], []]
    for corr in (450, 468):  # the two GEMMs of AddmmBackward0 for fc3
        k = lenet[0][corr]
        assert (k["dir"], k["op"], k["module"], k["tid"]) == ("bprop", "linear", "fc3", 500)
        assert (k["fwd"]["seq"], k["fwd"]["torchOp"]) == (62, "aten::addmm")
        assert k["fwd"]["marker"]["module"] == "fc3" and k["trace"].endswith("examples/lenet.py:36")
        assert [o["name"] for o in k["torchOps"][-2:]] == ["AddmmBackward0", "aten::mm"]
    # The bias gradient's sum runs inside the engine's evaluate_function range, outside the
    # AddmmBackward0 range: it still finds fc3 through the node it wraps.
    bias = lenet[0][481]
    assert (bias["kShortName"], bias["dir"], bias["op"], bias["module"]) == ("reduce_kernel", "bprop", "linear", "fc3")
    assert bias["torchOps"][0]["name"] == "autograd::engine::evaluate_function: AddmmBackward0"
    assert bias["fwd"]["seq"] == 62


def test_lenet_convolution_backward_kernels_count_up(lenet) -> None:
    ks = [lenet[0][c] for c in (715, 719, 737)]
    assert [k["subSeqId"] for k in ks] == [0, 1, 2]
    assert {(k["op"], k["module"], k["fwd"]["torchOp"]) for k in ks} == {("conv2d", "conv2", "aten::convolution")}
    assert ks[1]["kShortName"] == "dgrad2d_alg1_1"


def test_lenet_backward_seed_and_optimizer(lenet) -> None:
    seed = lenet[0][401]  # ones_like of loss.backward(), on the main thread inside the marker
    assert (seed["dir"], seed["mod"], seed["op"], seed["tid"]) == ("bprop", "Tensor", "backward", 471)
    steps = [r for r in lenet[1] if r["op"] == "SGD.step"]
    # neither forward nor backward work: the optimizer step's own direction
    assert len(steps) == 3 and all(r["mod"] == "torch.optim" and r["dir"] == "optim" for r in steps)
    assert [r["kShortName"] for r in steps] == ["multi_tensor_apply_kernel"] * 3


def test_gpt_layers_attention_and_memsets() -> None:
    recs, err = parse("gpt.sqlite", "--memcpy")
    assert err.startswith("pyprof.parse: 139 kernels + 4 memcpy/memset written; 100.0% with an op attributed;")
    assert collections.Counter(r["kind"] for r in recs) == {"kernel": 139, "memset": 4}
    # Backward kernels run on the autograd thread, outside the user's range, and take the
    # forward op's layer.
    assert all(r["layer"] == ["train_step"] for r in recs)
    attn = [r for r in recs if r["kShortName"].startswith("cudnn_generated_fort_native_sdpa_sm90_flash")]
    assert [(r["dir"], r["module"]) for r in attn] == [("fprop", "blocks.0"), ("fprop", "blocks.1"),
                                                      ("bprop", "blocks.1"), ("bprop", "blocks.0")]
    assert {r["op"] for r in attn} == {"scaled_dot_product_attention"}
    assert attn[2]["fwd"]["torchOp"] == "aten::_scaled_dot_product_cudnn_attention"
    memsets = [r for r in recs if r["kind"] == "memset"]
    assert all(r["op"] == "scaled_dot_product_attention" and r["bytes"] > 0 for r in memsets)
    assert all(r["launch"]["api"].startswith("cudaMemsetAsync") for r in memsets)
