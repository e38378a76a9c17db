"""torchvision's deform_conv2d (DCNv2) kernel by kernel (benchmarks/pricing_coverage.py's
deformable, captured on an H200 at stop 52 before any change for it: 23.9% of its GPU time known
with pyprof's markers, 31.4% from PyTorch's ranges; 99.3% and 98.9% after). The first block's
shapes: 16 images of 64 channels at 64 x 64, a 64 x 64 x 3 x 3 weight, the offsets a strided slice
of a 27-channel conv's output, the mask its sigmoid. Every number derived by hand."""
from __future__ import annotations

from pyprof.prof.pricing.op_ranges import AtenCall
from pyprof.prof.pricing.ops.vision import deform_conv2d_stages
from pyprof.prof.pricing.registry import Call, lookup, lookup_aten
from pyprof.prof.pricing.values import Tensor

X, W, OFFSET, MASK = [16, 64, 64, 64], [64, 64, 3, 3], [16, 18, 64, 64], [16, 9, 64, 64]
PIXELS = 16 * 64 * 64          # the 16 images' output positions: one block of P = 16 images
COLS = 64 * 9 * PIXELS         # the columns: a sample per input channel, tap and position
OUT = 16 * 64 * 64 * 64
F = 4


def _marker() -> dict:
    t = lambda shape, **kw: {"shape": shape, "dtype": "float32", **kw}  # noqa: E731
    return {"v": 1, "kind": "op", "mod": "torch.ops.torchvision", "op": "deform_conv2d", "kwargs": {},
            "args": [t(X, grad=True), t(W, grad=True), t(OFFSET, strides=[110592, 4096, 64, 1], grad=True),
                     t(MASK, grad=True), t([64]), 1, 1, 1, 1, 1, 1, 1, 1, True]}


def test_the_forward_samples_then_multiplies_in_one_block():
    """The strided offsets copied, the output and its buffer and the columns zero-filled, im2col
    (9 FLOPs a column element: a bilinear sample of 4 taps, 2 each, and the mask's product; the
    block's input, offsets and mask read, the columns written), the GEMM into the buffer (2 FLOPs
    a multiply-add; the weight and columns read, the buffer read and written), the buffer copied
    out, the bias added."""
    cost = lookup("torch.ops.torchvision", "deform_conv2d")(Call(_marker()))
    offsets, masks = 16 * 18 * 64 * 64, 16 * 9 * 64 * 64
    assert cost.stages == (
        ("direct_copy_kernel", 0, 2 * offsets * F), ("FillFunctor", 0, OUT * F), ("FillFunctor", 0, OUT * F),
        ("FillFunctor", 0, COLS * F),
        ("deformable_im2col_kernel", 9 * COLS, (16 * 64 * 64 * 64 + offsets + masks + COLS) * F),
        ("gemm:", 2 * 64 * 576 * PIXELS, (64 * 576 + COLS + 2 * 64 * PIXELS) * F),
        ("direct_copy_kernel", 0, 2 * OUT * F), ("CUDAFunctor_add", OUT, (2 * OUT + 64) * F))
    assert cost.flops == 9 * COLS + 2 * 64 * 576 * PIXELS + OUT


def test_the_backward_walks_the_columns_twice():
    """Backward: the offsets copied again, the input's, offsets' and mask's gradients zero-filled,
    the columns zeroed, dY's block made contiguous (16 images' [64, 64 x 64] planes viewed as one
    [64, 16 x 64 x 64] matrix), Wᵀ·dY into the columns, col2im's coordinates (30 FLOPs a column
    element) and col2im (9), the weight's gradient zero-filled, dY permuted contiguous, im2col
    again, dY·colsᵀ; the bias's sum, ones and product: the H200 capture's kernels in order."""
    bwd = lookup("torch.ops.torchvision", "deform_conv2d")(Call(_marker())).bwd_stages
    assert [s[0] for s in bwd] == [
        "direct_copy_kernel", "FillFunctor", "FillFunctor", "FillFunctor", "FillFunctor", "direct_copy_kernel", "gemm:",
        "deformable_col2im_coord_kernel", "deformable_col2im_kernel", "FillFunctor", "direct_copy_kernel",
        "deformable_im2col_kernel", "gemm:", "sum_functor", "FillFunctor", "MulFunctor"]
    assert [s[1] for s in bwd if s[0].startswith("deformable_col2im")] == [30 * COLS, 9 * COLS]


def test_blocks_of_images_and_weight_groups_repeat_their_kernels():
    """48 images run as two blocks of 24 (the greatest divisor of 48 up to 32), two weight groups
    as two GEMMs a block: im2col twice, four GEMMs, each a group's and a block's share."""
    x = Tensor((48, 64, 8, 8), "float16")
    fwd, _ = deform_conv2d_stages(x, Tensor((32, 32, 3, 3), "float16"), Tensor((48, 18, 8, 8), "float16"), None)
    names = [s[0] for s in fwd]
    assert names.count("deformable_im2col_kernel") == 2 and names.count("gemm:") == 4
    assert {s[1] for s in fwd if s[0] == "gemm:"} == {2 * 16 * 32 * 9 * 24 * 64}
    assert deform_conv2d_stages(x, Tensor((32, 7, 3, 3), "float16"), Tensor((48, 18, 8, 8), "float16"), None) is None


def test_from_pytorchs_ranges_only_its_own_kernels():
    """torchvision::deform_conv2d's range holds im2col alone (its fills, copies and addmm_ are
    ranges of their own); its backward's, col2im's two kernels and im2col."""
    sizes = [X, W, OFFSET, MASK, [64]] + [[]] * 9
    fwd = lookup_aten("torchvision::deform_conv2d")(AtenCall("torchvision::deform_conv2d", sizes, "float32", None))
    assert [s[0] for s in fwd.stages] == ["deformable_im2col_kernel"]
    bwd = lookup_aten("torchvision::_deform_conv2d_backward")(
        AtenCall("torchvision::_deform_conv2d_backward", [[16, 64, 64, 64]] + sizes, "float32", None))
    assert [s[0] for s in bwd.stages] == ["deformable_col2im_coord_kernel", "deformable_col2im_kernel",
                                          "deformable_im2col_kernel"]
