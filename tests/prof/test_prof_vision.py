"""torchvision's nms from PyTorch's ranges (pyprof/prof/pricing/ops/vision.py): a Faster R-CNN's
RPN (benchmarks/pricing_coverage.py's detection, H200, stop 51) ran torchvision::nms over 3,375
boxes, its two kernels 15% of the step's GPU time and na before. Numbers derived by hand."""
from __future__ import annotations

import pytest

from pyprof.prof.pricing.op_ranges import AtenCall, template_dtype
from pyprof.prof.pricing.registry import lookup_aten

NMS = "void vision::ops::<unnamed>::nms_kernel_impl<float>(int, double, const T1 *, unsigned long long *)"
KEEP = "vision::ops::<unnamed>::gather_keep_from_mask(bool *, const unsigned long long *, int)"


def _nms(k: int, kernel: str = NMS, dtype: str | None = None):
    return lookup_aten("torchvision::nms")(AtenCall("torchvision::nms", [[k, 4], [k], []], dtype or template_dtype(kernel),
                                                    kernel))


@pytest.mark.parametrize("k", [1, 64, 65, 3375])
def test_nms_kernels_compare_each_pair_once_and_write_the_upper_triangle(k: int) -> None:
    """k boxes in blocks of 64: nms_kernel_impl computes each pair's IoU once (19 FLOPs), reads
    the fp32 boxes, writes box i's 8-byte mask words from its own block on (3,375 boxes in 53
    blocks: 91,567 words); gather_keep_from_mask ORs them all (every box counted kept) and writes
    the k keep flags."""
    blocks = -(-k // 64)
    words = sum(blocks - i // 64 for i in range(k))
    cost = _nms(k)
    assert cost.stages == (("nms_kernel_impl", 19 * k * (k - 1) // 2, 16 * k, 8 * words),
                           ("gather_keep_from_mask", words, 0, 8 * words + k))
    assert (cost.flops, cost.bytes) == (19 * k * (k - 1) // 2 + words, 16 * k + 16 * words + k)
    if k == 3375:
        assert words == 91567


def test_nms_needs_its_boxes_dtype() -> None:
    """The keep kernel's name types nothing: with no producer of the boxes in the trace, na; a
    non-box first input, na."""
    assert _nms(100, KEEP) is None
    assert _nms(100, KEEP, "float16").stages[0][2] == 8 * 100
    assert lookup_aten("torchvision::nms")(AtenCall("torchvision::nms", [[100, 5], [100], []], "float32", NMS)) is None
