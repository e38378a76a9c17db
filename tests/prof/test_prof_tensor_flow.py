"""Tensor flow between PyTorch's op ranges (pyprof/prof/pricing/tensor_flow.py): what the aten
level learns of an op's inputs and output from the other ranges of the trace, on synthetic
records and on the real H100 captures made without pyprof.init() (tests/data/kernel_truth:
`plain` emit_nvtx, `nsyspt` Nsight Systems' own PyTorch ranges), held against Nsight Compute."""
from __future__ import annotations

from math import prod

import pytest

from pyprof.prof.pricing.tensor_flow import TensorFlow, node_range
from pyprof.prof.pricing.values import reduces_to
from test_prof_parts import analysed_capture, measured


def _rec(op: int, name: str = "aten::mul", sizes: list | None = None, inputs: list | None = None,
         seq: int | None = None, outer: list | None = None) -> dict:
    r = {"name": name, "opId": op, "sizes": sizes or [[4, 4]], "inputOpIds": inputs or [[0, -1]]}
    if seq is not None:
        r["seq"] = seq
    return {"pid": 1, "torchOps": (outer or []) + [r]}


def test_an_op_output_dtype_is_what_its_last_kernel_wrote_else_its_inputs():
    flow = TensorFlow()
    flow.wrote(_rec(5, outer=[{"name": "aten::linear", "opId": 4}]), "bfloat16")
    flow.wrote(_rec(6, outer=[{"name": "aten::linear", "opId": 4}]), "float32")
    assert flow.dtype_of(1, (4, 0)) == "float32" and flow.dtype_of(1, (5, 0)) == "bfloat16"
    # A kernel whose name tells no dtype: its op's output is in its first known input's dtype.
    flow.wrote(_rec(7, inputs=[[9, 0], [5, 0]]), None)
    assert flow.dtype_of(1, (7, 0)) == "bfloat16" and not flow.asked
    assert flow.dtype_of(2, (7, 0)) is None and flow.asked  # another process's op 7


def test_the_flow_keeps_the_last_ops_only():
    """Past 2 x held ops, the oldest are dropped down to `held`."""
    flow = TensorFlow(held=2)
    for op in (1, 2, 3, 4):
        flow.wrote(_rec(op), "float16")
    assert [flow.dtype_of(1, (op, 0)) for op in (1, 2, 3, 4)] == ["float16"] * 4
    flow.wrote(_rec(5), "float16")
    assert [flow.dtype_of(1, (op, 0)) for op in (1, 2, 3, 4, 5)] == [None, None, None, "float16", "float16"]


def test_a_forward_op_gives_its_node_the_gradient_dtype_and_the_input_shapes():
    flow = TensorFlow()
    flow.wrote(_rec(3, "aten::addmm", [[64], [8, 32], [32, 64]], seq=11), "bfloat16")
    assert flow.grad_dtype(1, 11) == "bfloat16" and flow.forward_sizes(1, 11) == [[64], [8, 32], [32, 64]]
    node = {"name": "AddmmBackward0", "seq": 11, "opId": 21}
    flow.wrote({"pid": 1, "torchOps": [{"name": "autograd::engine::evaluate_function: AddmmBackward0", "opId": 20},
                                       node, {"name": "aten::mm", "opId": 22}]}, "bfloat16")
    assert flow.node_seq(1, 20) == 11
    assert node_range(node) and node_range({"name": "torch::autograd::CopyBackwards", "seq": 3})
    assert not node_range({"name": "aten::mul", "seq": 3}) and not node_range({"name": "MulBackward0"})


def test_reductions_reach_dropped_or_kept_dims_only():
    assert reduces_to((8, 3, 32, 32), (3,)) and reduces_to((8, 1152, 4, 4), (8, 1152, 1, 1))
    assert reduces_to((8, 64), (64,)) and not reduces_to((8, 64), (8, 64)) and not reduces_to((8, 64), (32,))


def test_a_consumer_read_ahead_within_the_window_gives_an_output_shape():
    recs = [_rec(10, sizes=[[2, 3]]), _rec(11), _rec(12, sizes=[[2, 6]], inputs=[[10, 0]]),
            _rec(13, sizes=[[5]], inputs=[[11, 0]]), _rec(14), _rec(15), _rec(16, sizes=[[7]], inputs=[[13, 0]])]
    flow = TensorFlow()
    seen = {}
    for _, rec in flow.ahead(enumerate(recs), window=2):
        op = rec["torchOps"][-1]["opId"]
        seen[op] = flow.shape_of(1, op)
    # 13's consumer comes 3 records after it: past the window.
    assert seen == {10: (2, 6), 11: (5,), 12: None, 13: None, 14: None, 15: None, 16: None}
    assert not flow._window  # nothing held once every record went by


def test_a_reading_that_asks_for_more_reads_on_past_the_window_and_every_record_comes_once_in_order():
    """upcoming(further) reads records past the window from the input (a cuDNN RNN chunk's steps,
    rnn_kernels.py), up to `further` in all; those stay in the window, so the records still come
    one by one in their order, each once."""
    recs = [_rec(op) for op in range(10, 20)]
    flow = TensorFlow()
    came, seen = [], {}
    for _, rec in flow.ahead(enumerate(recs), window=2):
        op = rec["torchOps"][-1]["opId"]
        came.append(op)
        if op in (10, 17):
            seen[op] = [r["torchOps"][-1]["opId"] for r in flow.upcoming(5)]
        if op == 11:
            seen[op] = [r["torchOps"][-1]["opId"] for r in flow.upcoming()]
    assert came == list(range(10, 20))
    # 10 sees 5 ahead (3 read past its window of 2); 11 sees its window, now those 4; 17, the last 2.
    assert seen == {10: [11, 12, 13, 14, 15], 11: [12, 13, 14, 15], 17: [18, 19]}
    assert not flow._window


@pytest.fixture(scope="module")
def plain():
    return analysed_capture("plain")


def _kernels(per_model: dict, model: str, op: str, kernel: str = "", sizes: list | None = None) -> list:
    return [(r, f) for r, f in per_model[model] if r["torchOps"] and r["torchOps"][-1]["name"] == op
            and kernel in r["kShortName"] and (sizes is None or r["torchOps"][-1]["sizes"] == sizes)]


def _work(pairs: list) -> list:
    return [(f.flops, f.bytes) for _, f in pairs]


@pytest.mark.parametrize("mode", ["plain", "nsyspt"])
def test_a_gradient_cast_back_reads_what_its_producer_wrote(mode):
    """ToCopyBackward0's cast (direct_copy_kernel_cuda, lambda(float), LoadWithCast) of the
    classifier's weight gradient: its source is the float16 the forward cast wrote (the node's
    incoming gradient has its forward op's output dtype): 1000 x 1280 read in 2 bytes, written in 4."""
    per_model = analysed_capture(mode)
    casts = _kernels(per_model, "efficientnet_b0", "aten::copy_", "unrolled_elementwise",
                     [[1000, 1280], [1000, 1280], []])
    assert [(f.flops, f.bytes, f.dtype) for _, f in casts] == [(0, 1000 * 1280 * (2 + 4), "float16")]


def test_gradient_casts_match_nsight_compute(plain):
    """llama's ToCopyBackward0 casts (bfloat16 gradients of views no kernel wrote, to float32)."""
    rows = [(f.bytes, moved) for r, f, moved, _ in measured("llama_block", "plain")
            if r["dir"] == "bprop" and r["torchOps"][-1]["name"] == "aten::copy_" and "unrolled" in r["kShortName"]]
    assert len(rows) == 30 and rows[0] == (4 * 256 * 512 * 6, 3177984)
    assert all(0.92 < b / m <= 1.0 for b, m in rows)


def test_upsample_takes_its_output_from_its_consumer(plain):
    """aten::upsample_bilinear2d(x, output_size, ...): the size is an int list, not in the range;
    the consumer's range gives (8, 128, 32, 32): 4 taps x 2 FLOPs per output element; x read
    and the output written in float32 (autocast runs it so); the backward likewise."""
    out = 8 * 128 * 32 * 32
    fwd = _kernels(plain, "unet", "aten::upsample_bilinear2d", "upsample")
    bwd = _kernels(plain, "unet", "aten::upsample_bilinear2d_backward", "upsample")
    assert _work(fwd) == _work(bwd) == [(8 * out, (out + out // 4) * 4)]
    ncu = [moved for r, f, moved, _ in measured("unet", "plain") if "upsample_bilinear2d" in r["kShortName"]]
    assert ncu == [5251840, 5252096]


def test_a_fused_adam_step_from_its_functor_matches_nsight_compute(plain):
    """llama's AdamW (FusedAdamMathFunctor<float, 4, ADAMW, amsgrad 0>): 12 + 1 (decay) FLOPs
    and 7 float32 lists moved per parameter element, in one launch."""
    [(rec, f)] = _kernels(plain, "llama_block", "aten::_fused_adamw_")
    n = sum(prod(s) for s in rec["torchOps"][-1]["sizes"][:21])
    assert (f.flops, f.bytes) == (13 * n, 7 * 4 * n) == (126550528, 272570368)
    [moved] = [m for r, _, m, _ in measured("llama_block", "plain") if r["torchOps"][-1]["name"] == "aten::_fused_adamw_"]
    assert moved == 272613120


def test_a_fused_adam_steps_launches_add_up_to_its_formula(plain):
    """efficientnet's Adam (no decay counted: Adam's default) over 213 tensors in six launches."""
    steps = _kernels(plain, "efficientnet_b0", "aten::_fused_adam_")
    n = sum(prod(s) for s in steps[0][0]["torchOps"][-1]["sizes"][:213])
    assert len(steps) == 6 and [sum(w) for w in zip(*_work(steps))] == [12 * n, 7 * 4 * n]


def test_a_convolution_forward_and_its_layout_conversions_from_the_consumer_shape(plain):
    """unet's 3x3 convolution, 64 -> 64 channels at 32 x 32 (stride and padding not in the
    range: the output's shape from its consumer): input and weight converted to NHWC, the
    convolution, the output converted back, in bfloat16."""
    conv = _kernels(plain, "unet", "aten::cudnn_convolution", sizes=[[8, 64, 32, 32], [64, 64, 3, 3]] + [[]] * 7)
    x, w = 8 * 64 * 32 * 32, 64 * 64 * 9
    assert _work(conv[:4]) == [(0, 4 * x), (0, 4 * w), (2 * 8 * 64 * 32 * 32 * 64 * 9, 2 * (2 * x + w)), (0, 4 * x)]


def test_bias_gradients_reduce_to_the_one_forward_input_they_fit(plain):
    """The bias gradient of a convolution (inside ConvolutionBackward0) and of a linear layer
    (AddmmBackward0's sum runs under the engine's range alone): their output is the one input
    shape of the node's forward op the summed gradient reduces to, the bias; an add for each
    element summed beyond the bias's."""
    conv = _kernels(plain, "unet", "aten::sum", "reduce", [[8, 3, 32, 32], [], [], []])
    linear = _kernels(plain, "unet", "aten::sum", "reduce", [[8, 64], [], [], []])[:2]
    assert _work(conv) == [(8 * 3 * 32 * 32 - 3, (8 * 3 * 32 * 32 + 3) * 2)]
    assert _work(linear) == [(512 - 64, (512 + 64) * 2)] * 2


def test_a_mean_over_dims_takes_its_output_from_its_consumer(plain):
    """efficientnet's adaptive_avg_pool2d -> mean over H, W of (8, 32, 64, 64) in float16."""
    [first] = _kernels(plain, "efficientnet_b0", "aten::mean", "reduce", [[8, 32, 64, 64], [], [], []])[:1]
    assert (first[1].flops, first[1].bytes) == (8 * 32 * 64 * 64, (8 * 32 * 64 * 64 + 8 * 32) * 2)


def test_cudnn_sums_the_per_sample_weight_gradients_as_nsight_compute_counted(plain):
    """reduce_wgrad_nchw_helper<float, __half> after a 1x1 convolution's batched wgrad GEMM: 8
    float32 partials of the 64 x 192 weight read, the bfloat16 gradient written."""
    w = 64 * 192
    assert _work(_kernels(plain, "unet", "aten::convolution_backward", "reduce_wgrad"))[0] == (7 * w, 8 * w * 4 + w * 2)
    rows = [(f.bytes, moved) for r, f, moved, _ in measured("unet", "plain") if "reduce_wgrad" in r["kShortName"]]
    assert len(rows) == 7 and all(0.97 < b / m < 1.0 for b, m in rows)


def test_group_norm_kernels_run_the_family_formulas_stages(plain):
    """native_group_norm (8 groups: its moments kernel's grid, 64 blocks for 8 samples) and its
    backward (groups from mean's (8, 8)) run nn.group_norm_cost's stages, kernel by kernel."""
    sizes = [[8, 64, 32, 32], [64], [64]] + [[]] * 5
    fwd = _kernels(plain, "unet", "aten::native_group_norm", sizes=sizes)[:3]
    e, nc, ng = 8 * 64 * 32 * 32, 8 * 64, 8 * 8
    assert _work(fwd) == [(8 * e - 3 * nc - 2 * e, (e + 2 * ng) * 4), (3 * nc, (2 * ng + 2 * 64 + 2 * nc) * 4),
                          (2 * e, (2 * e + 2 * nc) * 4)]
    bwd = _kernels(plain, "unet", "aten::native_group_norm_backward")[:5]
    assert sum(f.flops for _, f in bwd) == 2 * e * 8


def test_a_record_whose_pid_is_no_key_is_left_out_of_the_flow():
    """Valid JSON parse never writes (the fuzzer's `"pid": []`): the flow neither keeps nor reads
    ahead for it, and the scan goes on."""
    odd = dict(_rec(3, sizes=[[2]], inputs=[[1, 0]]), pid=[])
    flow = TensorFlow()
    flow.wrote(odd, "float32")
    assert [r for _, r in flow.ahead(enumerate([_rec(1), odd]))] == [_rec(1), odd]
    assert flow._dtypes == {}


def test_an_embedding_bag_counts_its_adds_and_its_bags_from_the_consumer(plain):
    """aten::_embedding_bag (mode a scalar the range does not carry; the kernel's name says
    sum_mean): 1022 indices into 64-wide float32 rows, 256 bags (the consumer's (256, 64)): one
    add per gathered element; indices, offsets, the rows read and the bags written."""
    bags = _kernels(plain, "recommender", "aten::_embedding_bag", "EmbeddingBag")
    gathered = 1022 * 64
    assert _work(bags) == [(gathered, 1022 * 8 + 256 * 8 + (gathered + 256 * 64) * 4)] * 4
    ncu = [m for r, _, m, _ in measured("recommender", "plain") if "EmbeddingBag" in r["kShortName"]]
    assert [round(337392 / m, 2) for m in ncu] == [0.82, 0.83, 0.83, 0.83]
