"""The backward of a backward (a gradient penalty's, create_graph=True) priced from the op that
made its node (pyprof/prof/pricing/ops/double_backward.py): with pyprof's markers, the double
backward's node ranges carry neither a marker nor shapes, but pyprof.profiled() records the
first backward's op ranges with shapes, so the op of the node's seq tells them. Numbers derived
by hand from a WGAN-GP critic's first convolution (64 x 3 x 32 x 32 fp32 images, 64 4 x 4
filters of stride 2: 64 x 64 x 16 x 16 outputs)."""
from __future__ import annotations

from test_prof_helpers import analyse, record

X, W, Y = [64, 3, 32, 32], [64, 3, 4, 4], [64, 64, 16, 16]
DGRAD = "sm80_xmma_dgrad_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
FPROP = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
LRELU = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::leaky_relu_backward_kernel("
         "at::TensorIteratorBase &, const c10::Scalar &)::[lambda() (instance 1)]::operator ()() const::[lambda() "
         "(instance 2)]::operator ()() const::[lambda(float, float) (instance 1)], std::array<char *, (unsigned long)3>>"
         "(int, T2, T3)")
FILL = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, std::array<char *, (unsigned long)1>>(int, T2, T3)"


def _node(name: str, seq: int, op_id: int) -> dict:
    return {"name": name, "seq": seq, "opId": op_id}


def _first_backward(op: dict, kernel: str) -> dict:
    """A kernel of the first backward (autograd.grad with create_graph=True): the op's range
    carries the seq of the node it makes."""
    return record(None, kernel, "bprop", torchOps=[_node("ConvolutionBackward0", 393, 1), op], tid=20, dur=20000)


def test_a_convolutions_double_backward_from_the_op_that_made_its_node() -> None:
    """ConvolutionBackwardBackward0 (seq 34, made by the first backward's convolution_backward of
    seq 34): each of its matrix kernels one forward of the convolution, 2 x 64 x 64 x 16 x 16 x 3
    x 4 x 4 FLOPs; the input, weight and output read or written once; before, na."""
    made = {"name": "aten::convolution_backward", "seq": 34, "opId": 2,
            "sizes": [Y, X, W, [64], [], [], [], [], [], [], []]}
    second = record(None, FPROP, "bprop", torchOps=[_node("ConvolutionBackwardBackward0", 34, 9)], tid=20, dur=20000,
                    fwd={"seq": 34, "marker": None, "torchOp": "aten::convolution_backward"})
    facts, _ = analyse([_first_backward(made, DGRAD), second])
    elems = 64 * 3 * 32 * 32 + 64 * 3 * 4 * 4 + 64 * 64 * 16 * 16
    assert (facts[1].flops, facts[1].bytes, facts[1].level) == (2 * 64 * 64 * 16 * 16 * 3 * 4 * 4, elems * 4, "aten")
    alone, _ = analyse([second])  # the first backward's op ranges not in the trace: na, as before
    assert (alone[0].flops, alone[0].bytes) == (None, None)


def test_a_leaky_relus_double_backward_is_its_op_again_and_a_zero_fill() -> None:
    """LeakyReluBackwardBackward0: leaky_relu_backward of the incoming gradient (1 FLOP an
    element, two read and one written) and self's gradient zero-filled (written)."""
    made = {"name": "aten::leaky_relu_backward", "seq": 33, "opId": 3, "sizes": [Y, Y, [], []]}
    node = {"torchOps": [_node("LeakyReluBackwardBackward0", 33, 10)], "tid": 20,
            "fwd": {"seq": 33, "marker": None, "torchOp": "aten::leaky_relu_backward"}}
    facts, _ = analyse([_first_backward(made, LRELU), record(None, LRELU, "bprop", **node),
                        record(None, FILL, "bprop", subSeqId=1, **node)])
    n = 64 * 64 * 16 * 16
    assert [(f.flops, f.bytes) for f in facts[1:]] == [(n, 3 * n * 4), (0, n * 4)]
