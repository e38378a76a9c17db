"""End to end over examples/resnet.sqlite: ResNet-18, batch 8, fp16 AMP, channels_last, SGD with
momentum and weight decay, GradScaler; one training step captured on an H100."""
from __future__ import annotations

import pathlib
import sys

import pytest

from test_prof_examples import parsed
from test_prof_helpers import analyse

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
PARAMETERS = 11689512  # of examples/resnet.py's ResNet18 (test_parameter_count)


def conv_flops(n, c, k, p, q, r, s):
    return 2 * n * k * p * q * c * r * s


@pytest.fixture(scope="module")
def resnet():
    recs = parsed(ROOT / "examples" / "resnet.sqlite")
    facts, summary = analyse(recs)
    return recs, facts, summary


def test_every_kernel_has_an_op_and_a_direction(resnet):
    recs, _, _ = resnet
    assert len(recs) == 259
    assert sum(r["dir"] == "fprop" for r in recs) == 123 and sum(r["dir"] == "bprop" for r in recs) == 131
    assert [r["op"] for r in recs if r["dir"] == "optim"] == ["SGD.step"] * 5  # neither forward nor backward
    assert all(r["op"] for r in recs)


def test_every_kernel_name_is_recognised(resnet):
    assert "kernel not recognised (tc -, work na)" not in resnet[2].warnings


def test_first_conv_under_autocast_runs_fp16_on_tensor_cores(resnet):
    recs, facts, _ = resnet
    main = [(r, f) for r, f in zip(recs, facts) if r["module"] == "conv1" and r["dir"] == "fprop" and f.tc is True]
    assert [r["kShortName"] for r, _ in main] == [
        "sm90_xmma_fprop_image_first_layer_f16f16_f32_f16_nhwckrsc_nhwc_hmma_k64c4r7s7_stride2x2_tile16x64x64_"
        "tensor1688_execute_kernel_kernel__5x_cudnn"]
    r, f = main[0]
    assert r["marker"]["autocast"] == "float16" and r["marker"]["args"][0]["format"] == "channels_last"
    assert f.dtype == "float16"
    assert f.flops == conv_flops(8, 3, 64, 112, 112, 7, 7) == 1888223232


def test_conv_backward_data_and_weight_gradients_each_carry_one_forward(resnet):
    """layer1.0.conv1 (8x64x56x56, 64 3x3 filters): dgrad and wgrad carry 2*N*K*P*Q*C*R*S each;
    the wgrad's split-K pass sums the partials of its segment-K split (grid (117,1,1) over the
    weight's 9 64x64 tiles: 13 segments): 12 adds per weight element."""
    recs, facts, _ = resnet
    rows = [(r["kShortName"], f.tc, f.flops) for r, f in zip(recs, facts)
            if r["module"] == "layer1.0.conv1" and r["dir"] == "bprop" and ("grad" in r["kShortName"])]
    work = conv_flops(8, 64, 64, 56, 56, 3, 3)
    assert work == 1849688064
    assert [(name.split("_implicit")[0], tc, flops) for name, tc, flops in rows] == [
        ("sm90_xmma_dgrad", True, work), ("sm90_xmma_wgrad_indexed", True, work), ("sm90_xmma_wgrad_indexed", None, 12 * 64 * 64 * 9)]
    assert rows[2][0].endswith("execute_split_k_kernel__5x_cudnn")


def test_parameter_count():
    pytest.importorskip("torch", reason="builds examples/resnet.py's model: needs torch")
    from resnet import ResNet18
    assert sum(p.numel() for p in ResNet18().parameters()) == PARAMETERS


def test_sgd_step_with_momentum_and_weight_decay(resnet):
    """A foreach step is priced kernel by kernel from its PyTorch ranges (aten level): grads +
    wd·params (_foreach_add, out of place: 2 lists read, 1 written; launched as two kernels, each
    its own tensors), momentum buffers scaled (_foreach_mul_: read, written), buffers +=
    grads and params -= lr·buffers (_foreach_add_: 2 read, 1 written). 1 FLOP per element each
    (the aten level counts add as 1: alpha is not in the trace): 4 per parameter; 3 + 2 + 3 + 3
    passes over fp32 memory."""
    recs, facts, _ = resnet
    numel = PARAMETERS
    steps = [(r, f) for r, f in zip(recs, facts) if r["op"] == "SGD.step"]
    kw = steps[0][0]["marker"]["kwargs"]
    assert (kw["momentum"], kw["weight_decay"], kw["params"]["numel"]) == (0.9, 0.0001, numel)
    assert [r["torchOps"][-1]["name"] for r, _ in steps] == \
        ["aten::_foreach_add", "aten::_foreach_add", "aten::_foreach_mul_", "aten::_foreach_add_", "aten::_foreach_add_"]
    # The out-of-place add walks 3 lists, 48 tensors a launch: its two launches, each its own
    # tensors' elements (multitensor.launch_elements over the range's sizes).
    first, second = 3963456, 7726056
    assert first + second == numel
    assert [f.flops for _, f in steps] == [first, second, numel, numel, numel]
    assert [f.bytes for _, f in steps] == [12 * first, 12 * second, 8 * numel, 12 * numel, 12 * numel]
    assert {f.level for _, f in steps} == {"aten"}
