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
    stages = dict((st[0], st[1:]) for st in cost.stages)
    assert stages["nms_kernel_impl"] == (19 * k * (k - 1) // 2, 16 * k, 8 * words)
    assert stages["gather_keep_from_mask"] == (words, 0, 8 * words + k)
    # Around them, what torchvision's nms runs inside its call (with markers their stages too):
    # the scores' sort (k log2 k comparisons; fp32 keys and int64 positions read and written), the
    # boxes gathered, the keep flags filled, the kept positions found and taken.
    log = max(1, (k - 1).bit_length())
    assert stages["radixSortKVInPlace"] == (k * log, 8 * k, 16 * k)
    assert [st[0] for st in cost.stages] == [
        "elementwise_kernel_with_index", "radixSortKVInPlace", "vectorized_gather_kernel", "nms_kernel_impl", "FillFunctor",
        "gather_keep_from_mask", "DeviceReduceSingleTileKernel", "DeviceSelectSweepKernel", "index_elementwise_kernel"]
    assert cost.flops == sum(st[1] for st in cost.stages) == 19 * k * (k - 1) // 2 + words + k * log + k - 1
    if k == 3375:
        assert words == 91567


def test_nms_needs_its_boxes_dtype() -> None:
    """The keep kernel's name types nothing: with no producer of the boxes in the trace, na; a
    non-box first input, na."""
    assert _nms(100, KEEP) is None
    assert dict((st[0], st[2]) for st in _nms(100, KEEP, "float16").stages)["nms_kernel_impl"] == 8 * 100
    assert lookup_aten("torchvision::nms")(AtenCall("torchvision::nms", [[100, 5], [100], []], "float32", NMS)) is None


def _marker(op: str, args: list) -> dict:
    return {"v": 1, "kind": "op", "mod": "torch.ops.torchvision", "op": op, "args": args}


def test_a_custom_ops_marker_is_priced_by_its_aten_formula() -> None:
    """pyprof's marker of torch.ops.torchvision.nms (pyprof/nvtx/custom_ops.py) has no formula of
    its own: the aten level's, over the marker's arguments as a range's sizes (the boxes' dtype
    from the marker), prices it: one definition for both levels."""
    from pyprof.prof.pricing.marker_costs import _compute

    cost, why = _compute(_marker("nms", [{"shape": [3375, 4], "dtype": "float32"}, {"shape": [3375], "dtype": "float32"}, 0.7]))
    assert why is None and cost.stages == _nms(3375).stages
    assert _compute(_marker("ps_roi_pool", [{"shape": [1, 2], "dtype": "float32"}]))[1] == (
        "unknown op", "torch.ops.torchvision.ps_roi_pool")


def test_roi_align_from_its_marker() -> None:
    """Faster R-CNN's box head pools 2,048 boxes of a [4, 256, 10, 10] fp32 level into 7 x 7 with
    sampling_ratio 2: 25,690,112 outputs, each 4 bilinear samples of 4 taps (2 FLOPs a tap) and a
    divide; the output zero-filled first (its own kernel), then the rois read, the output written,
    the input read (no more than it holds). Backward: the input's gradient zero-filled, 2 FLOPs a
    tap. An adaptive ratio (-1, torchvision's default): na."""
    from pyprof.prof.pricing.marker_costs import _compute

    x, rois = {"shape": [4, 256, 10, 10], "dtype": "float32"}, {"shape": [2048, 5], "dtype": "float32"}
    cost, _ = _compute(_marker("roi_align", [x, rois, 0.03125, 7, 7, 2, False]))
    out, inp = 2048 * 256 * 7 * 7, 4 * 256 * 10 * 10
    work = (out * 33, (2048 * 5 + out + inp) * 4)
    assert cost.stages == (("FillFunctor", 0, out * 4), ("roi_align_forward",) + work)
    assert (cost.flops, cost.bytes) == (work[0], work[1] + out * 4)
    assert (cost.bwd_flops, cost.bwd_bytes, cost.grad_fill) == (2 * out * 16, (out + 2048 * 5 + 2 * inp) * 4, inp)
    assert _compute(_marker("roi_align", [x, rois, 0.03125, 7, 7, -1, False]))[0] is None


def test_a_detection_models_torchvision_ops_with_markers() -> None:
    """benchmarks/pricing_coverage.py's detection (torchvision Faster R-CNN, fp32) captured with
    pyprof.init() on an H200 (stop 51): every kernel has an op; RoIAlign's forward and backward
    kernels (its backward a C++ autograd node, torch::autograd::CppNode<...ROIAlignFunction>)
    and nms's, its score sort and the rest of its call's kernels too, priced; 97.2% of the GPU
    time known (57.8% before: no torchvision op had a marker)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import kernel_truth as kt

    path = Path(__file__).resolve().parents[1] / "data" / "detection_default.sqlite.xz"
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        kernels = kt.analysed_kernels(kt._unpacked(str(path), tmp), ("detection",))["detection"]
    assert all(r.get("op") for r, _ in kernels)
    vision = [(r["dir"], r["op"], r["kShortName"], f.flops) for r, f in kernels
              if r["kShortName"] in ("roi_align_forward_kernel_impl", "roi_align_backward_kernel_impl", "nms_kernel_impl")]
    assert {(d, op, k) for d, op, k, _ in vision} == {("fprop", "roi_align", "roi_align_forward_kernel_impl"),
                                                      ("bprop", "roi_align", "roi_align_backward_kernel_impl"),
                                                      ("fprop", "nms", "nms_kernel_impl")}
    assert all(f for *_, f in vision)
    share, _ = kt.known_share(kernels)
    assert round(share, 1) == 97.2
