"""A compiled program's leaf gradients stored by the autograd engine (pyprof.nvtx.leaf_grads):
the kernel of each AccumulateGrad range priced from the leaf's marker (ops/autograd.py)."""
from __future__ import annotations

from test_prof_helpers import analyse, described, record
from test_prof_helpers import tensor as t

LEAF = ("torch._C._functions", "AccumulateGrad")
# The copy into the leaf's layout, and the add onto the gradient left by the pass before, as
# PyTorch names them (an H200 capture of a compiled wide_resnet50_2, and of gradient accumulation).
LAYOUT_COPY = ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<"
               "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()"
               "() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>"
               "(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
ADD = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, "
       "std::array<char *, (unsigned long)3>>(int, T2, T3)")


def leaf(*shape: int, **layout) -> dict:
    return described(*LEAF, t(*shape, grad=True, **layout), param="weight")


def test_a_gradient_copied_into_the_leaf_layout_is_read_and_written_once():
    # 256x128x3x3 fp32 channels_last weight: 294,912 elements; 2,304 blocks of 128 threads, 1 each.
    n = 256 * 128 * 9
    facts, tally = analyse([record(leaf(256, 128, 3, 3, format="channels_last"), LAYOUT_COPY, "bprop",
                                   grid=[2304, 1, 1], block=[128, 1, 1])])
    assert (facts[0].flops, facts[0].bytes) == (0, 2 * n * 4)
    assert tally.warnings == {}


def test_a_gradient_added_to_the_one_an_earlier_pass_left():
    # 1000x2048 fp32: one add an element; both read, the sum written. 2,000 blocks of 128 x 8.
    n = 1000 * 2048
    facts, _ = analyse([record(leaf(1000, 2048), ADD, "bprop", grid=[2000, 1, 1], block=[128, 1, 1])])
    assert (facts[0].flops, facts[0].bytes) == (n, 3 * n * 4)


def test_each_leaf_range_prices_its_own_kernel_and_an_unknown_kernel_is_na():
    """Back-to-back ranges of two leaves (each numbers its kernels from 0): each copy takes its own
    leaf's size; a second kernel in a range, one no storing runs, is na, never 0."""
    a, b = 64 * 64, 512
    recs = [record(leaf(64, 64), LAYOUT_COPY, "bprop", grid=[32, 1, 1], subSeqId=0),
            record(leaf(512), LAYOUT_COPY, "bprop", grid=[4, 1, 1], subSeqId=0),
            record(leaf(512), "void unknown_kernel<float>(float *)", "bprop", subSeqId=1)]
    facts, _ = analyse(recs)
    assert [(f.flops, f.bytes) for f in facts] == [(0, 2 * a * 4), (0, 2 * b * 4), (None, None)]
