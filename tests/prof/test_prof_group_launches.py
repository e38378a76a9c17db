"""A grouped convolution cuDNN runs a group at a time (StyleGAN2's modulated convolution: each
sample's weights its own group, groups = batch): the same CUTLASS kernel once a group, forward
and backward, each launch a group's share (matrix_chain.group_launch). The capture: benchmarks/
pricing_coverage.py's stylegan on an H200 at stop 52, where the first launch carried all 16
groups' FLOPs (4x what ncu saw its Tensor Cores execute) and the other 15 were na."""
from __future__ import annotations

from test_prof_helpers import analyse, kernels

# The generator's first modulated convolution: 16 samples of 128 channels at 4 x 4, a 3x3 weight
# each, as one conv2d of groups 16 under fp16 autocast.
MARKER = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "conv2d",
          "args": [{"shape": [1, 2048, 4, 4], "dtype": "float32", "grad": True},
                   {"shape": [2048, 128, 3, 3], "dtype": "float32", "grad": True}],
          "kwargs": {"padding": 1, "groups": 16}, "autocast": "float16"}
FPROP = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816fprop_optimized_f16_64x64_64x5_nhwc_align8>(T1::Params)"
DGRAD = "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_f16_s16816dgrad_optimized_f16_64x64_64x5_nhwc_unity_stride_align8>" \
        "(T1::Params)"
GROUP_FLOPS = 2 * 128 * 16 * 128 * 9  # a group: 128 outputs a pixel, 16 pixels, 128 x 9 taps each
# A group's operands in fp16: its input slice, its weights, its output.
GROUP_BYTES = (128 * 16 + 128 * 128 * 9 + 128 * 16) * 2


def test_each_of_the_groups_launches_carries_its_group():
    """16 launches of the fprop kernel in the call: each one group's FLOPs and operands."""
    facts, _ = analyse(kernels(MARKER, [FPROP] * 16))
    assert {(f.flops, f.bytes) for f in facts} == {(GROUP_FLOPS, GROUP_BYTES)}
    assert sum(f.flops for f in facts) == 16 * GROUP_FLOPS


def test_the_data_gradients_launches_each_carry_a_group():
    """Backward: the data gradient's dgrad kernel once a group, each a group's share of one
    gradient (dY and W read, dX written: the forward's operand sizes)."""
    facts, _ = analyse(kernels(MARKER, [DGRAD] * 16, "bprop"))
    assert {(f.flops, f.bytes) for f in facts} == {(GROUP_FLOPS, GROUP_BYTES)}


def test_one_kernel_for_all_groups_carries_them_all():
    """A grouped convolution run as one kernel (the usual case: no other launch of its name in
    the call) carries the whole op, as before; a count of launches that is not the groups' is
    not read as one a group (the second launch na)."""
    whole, _ = analyse(kernels(MARKER, [FPROP]))
    assert (whole[0].flops, whole[0].bytes) == (16 * GROUP_FLOPS, 16 * GROUP_BYTES)
    two, _ = analyse(kernels(MARKER, [FPROP, FPROP]))
    assert [(f.flops, f.bytes) for f in two] == [(16 * GROUP_FLOPS, 16 * GROUP_BYTES), (None, None)]
