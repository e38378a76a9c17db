"""cuDNN's convolution helper kernels (issue 27): channel padding, CUTLASS's split-K reduction of a
channel-padded weight gradient, xmma's segment-K weight gradient and its split-K pass, each its
own FLOPs and bytes, held against Nsight Compute (tests/data/kernel_truth/conv_ncu_*.csv.xz,
benchmarks/conv_helpers_truth.sh on an H100: examples/resnet.py's step, conv_helpers.py's cases)."""
from __future__ import annotations

import itertools
import os
import sys
from dataclasses import replace

import pytest

import pyprof
import pyprof.prof.pricing.ops  # noqa: F401  (fills the op table)
from pyprof.prof.pricing.conv_parts import PAD, channel_pads, conv_outputs, wgrad_segments
from pyprof.prof.pricing.gemm_parts import split_k
from pyprof.prof.pricing.parts import CallParts, backward_parts, forward_parts
from test_prof_helpers import analyse, record
from pyprof.prof.pricing.registry import Call, lookup

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data", "kernel_truth")
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from tc_truth import ncu_kernels  # noqa: E402

HELPERS = ("nhwcAddPadding", "init_device_workspace", "wgrad", "ReduceSplitK", "ImplicitGemmConvolution", "first_layer")
WRITES = "lts__t_sectors_srcunit_tex_op_write.sum"
SEGMENT = "sm90_xmma_wgrad_indexed_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_warpgroupsize1x1x1_g1"


def moved(counters: dict) -> float:
    """What kernel_truth.py counts as a kernel's bytes: DRAM read plus L2 write sectors."""
    return counters["dram__bytes_read.sum"] + 32 * counters["lts__t_sectors_srcunit_tex_op_write.sum"]


@pytest.fixture(scope="module")
def resnet() -> list:
    """(record, row, ncu counters) of every helper and convolution kernel ncu was told to profile
    (benchmarks/conv_helpers_truth.sh's -k), the shipped capture's and ncu's paired in order."""
    path = os.path.join(ROOT, "examples", "resnet.sqlite")
    rows = [(r, row) for r, row in zip(pyprof.records(path), pyprof.rows(path, columns="op,dir,flops,bytes"))
            if any(h in (r.get("kLongName") or "") for h in HELPERS)]
    profiled = ncu_kernels(os.path.join(DATA, "conv_ncu_resnet.csv.xz"))
    assert [r["kShortName"] in name for (r, _), (name, _) in zip(rows, profiled)] == [True] * len(profiled) == [True] * len(rows)
    return [(r, row, counters) for (r, row), (_, counters) in zip(rows, profiled)]


def test_resnet_stem_channel_padding_forward(resnet) -> None:
    """The stem's 8x3x224x224 image and 64x3x7x7 weight padded to the 4 channels of sm90's
    image_first_layer kernel: each read in 3 channels and written in 4 (fp16), 0.89 and 0.77 of
    ncu's bytes (its write sectors count partial writes again)."""
    pads = [(row["dir"], row["flops"], row["bytes"], round(row["bytes"] / moved(c), 3)) for r, row, c in resnet
            if r["kShortName"] == "nhwcAddPaddingKernel" and row["dir"] == "fprop"]
    assert pads == [("fprop", 0, (8 * 3 + 8 * 4) * 224 * 224 * 2, 0.888), ("fprop", 0, (64 * 3 + 64 * 4) * 49 * 2, 0.771)]


def _marker(x: dict, w: dict, stride: int, pad: int) -> dict:
    return {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "conv2d",
            "args": [x, w, None, [stride, stride], [pad, pad], [1, 1], 1], "autocast": "float16"}


def _cost(marker: dict):
    """The formula's cost as the analysis has it under fp16 autocast (marker_costs.MarkerCosts)."""
    return replace(lookup("torch.nn.functional", "conv2d")(Call(marker)), dtype="float16")


def test_resnet_stem_backward_padding_is_na_where_the_marker_does_not_say_which_gradients() -> None:
    """The shipped capture's markers predate `grad`: the backward's first padding kernel could be
    the image (no input gradient) or the weight (one), which its grid (264 blocks, whatever the
    size) does not tell: na, never a guess. A marker that says so prices them in launch order."""
    x = {"shape": [8, 3, 224, 224], "dtype": "float32", "format": "channels_last"}
    w = {"shape": [64, 3, 7, 7], "dtype": "float32", "format": "channels_last"}
    marker = _marker(x, w, 2, 3)
    cost = _cost(marker)

    def pads(m: dict) -> list:
        return [p.bytes for p in backward_parts(m, cost) if p.family == PAD]
    assert pads(marker) == []
    xp, wp = (8 * 3 + 8 * 8) * 224 * 224 * 2, (64 * 3 + 64 * 8) * 49 * 2
    assert pads(_marker(x, dict(w, grad=True), 2, 3)) == [xp, wp]
    assert pads(_marker(dict(x, grad=True), dict(w, grad=True), 2, 3)) == [wp, xp, xp, wp]
    # 64 channels need none; nor does a float32 convolution.
    wide = _marker(dict(x, shape=[8, 64, 56, 56], grad=True), dict(w, shape=[64, 64, 3, 3], grad=True), 1, 1)
    assert [p for p in backward_parts(wide, _cost(wide)) + forward_parts(wide, _cost(wide)) if p.family == PAD] == []
    fp32 = replace(cost, dtype="float32")
    assert [p for p in forward_parts(marker, fp32) if p.family == PAD] == []


def test_resnet_split_k_and_segment_k_weight_gradients(resnet) -> None:
    """CUTLASS's split-K wgrad of the stem (grid z 29) over the weight padded to 8 channels, then
    ReduceSplitK sums 29 fp32 partials of 64 x 7*7*8 (ncu: 2,967,808 bytes); layer1's xmma
    segment-K wgrad (grid 117 over 9 tiles of 64x64: 13 segments) writes 13 fp32 partials of 64 x
    576 in place of the fp16 gradient, and its split-K pass sums them. init_device_workspace_kernel
    stays na: the counters it zeroes follow the segment kernel's grid, launched after it."""
    got = [(r["kShortName"][:12], r["grid"], row["flops"], row["bytes"], round(row["bytes"] / moved(c), 3) if row["bytes"] else None)
           for r, row, c in resnet if row["dir"] == "bprop" and (r["kShortName"] == "Kernel" and r["grid"][2] == 1
                                                                  or "segment_k_on" in r["kLongName"] or "split_k" in r["kLongName"]
                                                                  or r["kShortName"] == "init_device_workspace_kernel")]
    w, wide = 64 * 64 * 9, 64 * 49 * 8
    segment = ("sm90_xmma_wg", [117, 1, 1], 2 * 8 * 56 * 56 * 64 * 576, (2 * 8 * 64 * 56 * 56) * 2 + 13 * w * 4, 0.994)
    split = ("sm90_xmma_wg", [117, 1, 1], 12 * w, 13 * w * 4 + w * 2, 0.921)
    init = ("init_device_", [1, 1, 1], None, None, None)
    assert got == [("Kernel", [32, 1, 1], 245760, 1032192, 0.995)] + [init, segment, split] * 4 + [
        ("Kernel", [16, 2, 1], 28 * wide, 29 * wide * 4 + wide * 2, 0.997)]


def test_resnet_cutlass_split_k_weight_gradients_write_their_partials(resnet) -> None:
    """CUTLASS's implicit-GEMM weight gradients that split K in their grid's z (the stem's 29 over
    64 x 7·7·8, layer2's 1x1 downsample's 31 over 128 x 64): each slice writes an fp32 partial of
    the channel-padded gradient, ncu's L2 writes to the byte, in place of the fp16 gradient
    written once; what ReduceSplitK after it reads. Their reads are the formula's, the input and
    dY; the stride-2 1x1 convolution reads a quarter of its input (the rows and columns its taps
    touch: conv.touched), 0.99 of ncu's bytes (1.69x when the whole input was counted)."""
    got = [(r["grid"], row["bytes"], 32 * c[WRITES], round(row["bytes"] / moved(c), 3)) for r, row, c in resnet
           if r["dir"] == "bprop" and r["kShortName"] == "Kernel" and r["grid"][2] >= 2]
    stem = 29 * 64 * 7 * 7 * 8 * 4
    down = 31 * 128 * 64 * 4
    assert got == [([2, 1, 31], (8 * 64 * 28 * 28 + 8 * 128 * 28 * 28) * 2 + down, down, 0.99),
                   ([4, 1, 29], (8 * 3 * 224 * 224 + 8 * 64 * 112 * 112) * 2 + stem, stem, 0.817)]


def test_cutlass_wgrad_splits_need_its_wgrad_a_z_of_two_and_a_conv_weight() -> None:
    from pyprof.prof.pricing.conv_parts import cutlass_wgrad_splits
    wgrad = "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::conv::kernel::ImplicitGemmConvolution<...Conv2dWgradOutput..."
    fprop = "void cutlass__5x_cudnn::Kernel<cutlass__5x_cudnn::conv::kernel::ImplicitGemmConvolution<...Conv2dFpropActivation..."
    assert cutlass_wgrad_splits(wgrad, [2, 1, 23], [64, 3, 3, 3], 2) == (23, 64 * 8 * 9)  # C padded to 8 in 16 bits
    assert cutlass_wgrad_splits(wgrad, [2, 1, 23], [64, 3, 3, 3], 4) == (23, 64 * 3 * 9)
    assert cutlass_wgrad_splits(wgrad, [2, 1, 1], [64, 3, 3, 3], 2) is None
    assert cutlass_wgrad_splits(fprop, [2, 1, 23], [64, 3, 3, 3], 2) is None
    assert cutlass_wgrad_splits(wgrad, [2, 1, 23], [64, 3], 2) is None
    assert cutlass_wgrad_splits(SEGMENT, [117, 1, 4], [64, 64, 3, 3], 2) is None


def test_wgrad_segments_are_the_grid_over_the_weight_tiles() -> None:
    assert wgrad_segments(SEGMENT + "_execute_segment_k_on_kernel__5x_cudnn", [117, 1, 1], [64, 64, 3, 3]) == 13
    # batch 2's grid of 48 over the same 9 tiles ran no split-K pass after it (ncu): no segments.
    assert wgrad_segments(SEGMENT + "_execute_segment_k_on_kernel__5x_cudnn", [48, 1, 1], [64, 64, 3, 3]) is None
    assert wgrad_segments(SEGMENT + "_execute_segment_k_off_kernel__5x_cudnn", [117, 1, 1], [64, 64, 3, 3]) is None
    assert wgrad_segments(SEGMENT + "_execute_segment_k_on_kernel__5x_cudnn", [117, 1, 1], None) is None


def _cases() -> list:
    """conv_ncu_cases.csv.xz's kernels per case of benchmarks/conv_helpers.py (a spin_kernel opens each)."""
    cases: list = []
    for name, counters in ncu_kernels(os.path.join(DATA, "conv_ncu_cases.csv.xz")):
        if "spin_kernel" in name:
            cases.append([])
        else:
            cases[-1].append((name, counters))
    return cases


# conv_helpers.py's cases 1 and 3 as ncu ran them: (input, weight, stride, padding, whether x
# needed a gradient), the CUTLASS wgrad's grid z and ReduceSplitK's grid (ncu's Grid Size column).
UNSEEN = [(1, ([32, 3, 32, 32], [64, 3, 3, 3], 1, 1, False), 23, [16, 1, 1]),
          (3, ([4, 3, 224, 224], [64, 3, 7, 7], 2, 3, True), 29, [16, 2, 1])]


@pytest.mark.parametrize("case, conv, splits, grid", UNSEEN)
def test_unseen_convolutions_helpers_match_nsight_compute(case: int, conv: tuple, splits: int, grid: list) -> None:
    """Two convolutions no shipped capture has (a CIFAR stem, and the ResNet stem with an input
    gradient): each padding kernel of the backward takes its part in launch order (with an input
    gradient: weight, dX, x, dW), and ReduceSplitK sums the wgrad's partials of the 8-channel
    weight within 2% of ncu's bytes."""
    xs, ws, stride, pad, grad_x = conv
    marker = _marker({"shape": xs, "dtype": "float32", "grad": grad_x}, {"shape": ws, "dtype": "float32", "grad": True},
                     stride, pad)
    parts = CallParts(backward_parts(marker, _cost(marker)))
    kernels = _cases()[case]
    pads = [(parts.take(name, [264, 1, 1], [1024, 1, 1]), c) for name, c in kernels if "nhwcAddPadding" in name]
    assert len(pads) == (4 if grad_x else 2)
    # Padding and stripping alternate: what each read (ncu's L2 read sectors) is its part's tensor
    # in C channels, then in 8, to the byte; the total within 0.5-1.0 of ncu's (a small copy's DRAM
    # reads hold some KB of the kernel's own, and the write sectors count partial writes again).
    reads = [32 * c["lts__t_sectors_srcunit_tex_op_read.sum"] for _, c in pads]
    assert reads == [p.numel * 2 if i % 2 == 0 else p.bytes - p.numel * 2 for i, (p, _) in enumerate(pads)]
    assert all(0.5 <= p.bytes / moved(c) <= 1.0 for p, c in pads), [p.bytes / moved(c) for p, c in pads]
    [c] = [c for name, c in kernels if "ReduceSplitK<cutlass__5x_cudnn::MatrixShape<4, 256>" in name]
    # The same kernel as nsys names it (ncu drops the `(int)`s), from the shipped capture.
    path = os.path.join(ROOT, "examples", "resnet.sqlite")
    name = next(r["kLongName"] for r in pyprof.records(path) if "ReduceSplitK" in (r.get("kLongName") or ""))
    work = split_k(name, grid, splits, conv_outputs(xs, ws, None, True, 2), 2)
    wide = ws[0] * ws[2] * ws[3] * 8
    assert work == ((splits - 1) * wide, splits * wide * 4 + wide * 2) and 0.98 <= work[1] / moved(c) <= 1.0


def test_aten_level_prices_the_weight_gradient_splits_as_markers_do(tmp_path, resnet) -> None:
    """The same capture without pyprof's markers (PyTorch's op ranges alone, as emit_nvtx or
    nsys's own ranges give): aten::convolution_backward's shapes (dY, input, weight) price the
    segment-K wgrad, its split-K pass and the stem's ReduceSplitK as the markers do. The stem's
    channel padding: forward the image and the weight to the 4 channels of the first-layer kernel
    after them; backward, where the ranges do not say which gradients are wanted, the pair around
    the CUTLASS kernel its name calls a weight gradient (`Conv2dWgrad`): the image padded and dW
    stripped, to 8 channels (the markers of this capture predate `grad`: na there)."""
    def edit(r: dict) -> dict:
        r = {k: v for k, v in r.items() if k != "marker"}
        if isinstance(r.get("fwd"), dict):
            r["fwd"] = {k: v for k, v in r["fwd"].items() if k != "marker"}
        return r
    path = _rewritten(tmp_path, edit)
    splits = lambda r: ("segment_k_on" in r["kLongName"] or "split_k_kernel" in r["kLongName"]  # noqa: E731
                        or "ReduceSplitK" in r["kLongName"])
    want = [(row["flops"], row["bytes"]) for r, row, _ in resnet if splits(r)]
    got = [(row["flops"], row["bytes"]) for r, row in zip(pyprof.records(path), pyprof.rows(path, columns="flops,bytes"))
           if splits(r)]
    assert got == want and len(got) == 10 and None not in [b for _, b in got]
    pads = [row["bytes"] for r, row in zip(pyprof.records(path), pyprof.rows(path, columns="bytes"))
            if r.get("kShortName") == "nhwcAddPaddingKernel"]
    image, weight = 8 * 3 * 224 * 224, 64 * 3 * 7 * 7
    assert pads == [(image + image // 3 * 4) * 2, (weight + weight // 3 * 4) * 2,
                    (image + image // 3 * 8) * 2, (weight + weight // 3 * 8) * 2]


def _rewritten(tmp_path, edit) -> str:
    """examples/resnet.sqlite's records as a JSON file, each passed through `edit` first."""
    import json

    path = tmp_path / "resnet.json"
    with open(path, "w") as f:
        for r in pyprof.records(os.path.join(ROOT, "examples", "resnet.sqlite")):
            f.write(json.dumps(edit(r)) + "\n")
    return str(path)


def test_backward_padding_where_the_markers_say_which_arguments_required_grad(tmp_path, resnet) -> None:
    """The shipped capture with the stem's markers as today's pyprof writes them (`grad` on the
    weight, not on the image): the backward's two padding kernels take the image padded to 8
    channels and dW stripped back to 3, in launch order around CUTLASS's wgrad (0.89 and 0.77 of
    ncu's bytes)."""
    def edit(r: dict) -> dict:
        for m in (r.get("marker"), (r.get("fwd") or {}).get("marker")):
            if isinstance(m, dict) and m.get("module") == "conv1" and m.get("op") == "conv2d":
                m["args"][1]["grad"] = True
        return r
    path = _rewritten(tmp_path, edit)
    got = [row["bytes"] for r, row in zip(pyprof.records(path), pyprof.rows(path, columns="dir,bytes"))
           if r.get("kShortName") == "nhwcAddPaddingKernel" and row["dir"] == "bprop"]
    measured = [moved(c) for r, row, c in resnet if r["kShortName"] == "nhwcAddPaddingKernel" and row["dir"] == "bprop"]
    assert got == [(8 * 3 + 8 * 8) * 224 * 224 * 2, (64 * 3 + 64 * 8) * 49 * 2]
    assert [round(g / m, 3) for g, m in zip(got, measured)] == [0.894, 0.768]


@pytest.mark.parametrize("mode", ["default", "plain"])
def test_unet_stem_reduce_split_k_sums_the_weight_padded_to_8_channels(mode: str) -> None:
    """unet's 3-channel bf16 stem (kernel_truth capture, H100): CUTLASS's wgrad split K over 23
    partials of its 64x3x3x3 weight padded to 8 channels; ReduceSplitK sums them: 22 adds and
    23 fp32 reads per element of 64 x 3*3*8, the bf16 gradient written: 0.986 of ncu's bytes (as
    64 x 3*3*3 it read 0.37), from the marker and from aten::convolution_backward's shapes alike."""
    from test_prof_parts import measured as measured_capture

    [(flops, nbytes, ratio)] = [(f.flops, f.bytes, round(f.bytes / moved_, 3)) for r, f, moved_, _ in measured_capture("unet", mode)
                                if "ReduceSplitK" in (r.get("kLongName") or "")]
    wide = 64 * 3 * 3 * 8
    assert (flops, nbytes, ratio) == (22 * wide, 23 * wide * 4 + wide * 2, 0.986)
    # The wgrad before it wrote those 23 partials, not the gradient once: 0.923 of ncu's bytes (0.669 before).
    [(nbytes, ratio)] = [(f.bytes, round(f.bytes / moved_, 3)) for r, f, moved_, _ in measured_capture("unet", mode)
                         if r["kShortName"] == "Kernel" and r["grid"][2] == 23]
    assert (nbytes, ratio) == ((8 * 3 * 34 * 34 + 8 * 64 * 32 * 32) * 2 + 23 * wide * 4, 0.923)


@pytest.mark.parametrize("size, taps, stride, pad, dil, want", [
    (56, 1, 2, 0, 1, 28),     # ResNet's 1x1 downsample: every other row
    (56, 3, 2, 1, 1, 56),     # windows that overlap: every row
    (224, 7, 2, 3, 1, 224),
    (57, 2, 2, 0, 1, 56),     # a last row no window reaches
    (10, 1, 3, 0, 1, 4),
    (10, 3, 1, 2, 2, 10),     # dilated, stride 1: every row
    (16, 2, 4, 0, 2, 8),      # dilated taps {0, 2} every 4 rows
])
def test_a_convolution_reads_the_rows_its_taps_touch(size, taps, stride, pad, dil, want):
    from pyprof.prof.pricing.ops.conv import touched
    out = (size + 2 * pad - dil * (taps - 1) - 1) // stride + 1
    assert touched(size, out, taps, stride, pad, dil) == want


def test_strided_1x1_convolution_reads_a_quarter_of_its_input_forward():
    """layer2's downsample of examples/resnet.sqlite, 8x64x56x56 to 8x128x28x28 (fp16): the
    forward reads the 28x28 positions its taps touch, the weight, and writes the output; its
    input's other three quarters are the data gradient's to write (Cost.unread)."""
    x = {"shape": [8, 64, 56, 56], "dtype": "float32", "format": "channels_last"}
    w = {"shape": [128, 64, 1, 1], "dtype": "float32", "format": "channels_last"}
    cost = _cost(_marker(x, w, 2, 0))
    assert cost.unread == 8 * 64 * (56 * 56 - 28 * 28)
    assert cost.bytes == (8 * 64 * 28 * 28 + 128 * 64 + 8 * 128 * 28 * 28) * 4  # the formula's own fp32
    facts, _ = analyse([record(_marker(x, w, 2, 0), "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc")])
    assert facts[0].bytes == (8 * 64 * 28 * 28 + 128 * 64 + 8 * 128 * 28 * 28) * 2


def test_touched_counts_every_read_position_by_closed_form():
    """conv.touched against every position each output's taps read, over sizes, taps, strides,
    paddings and dilations (its closed forms: one run, disjoint windows clipped at the edges)."""
    from pyprof.prof.pricing.ops.conv import touched
    for size, taps, stride, pad, dil in itertools.product(range(1, 30), range(1, 5), range(1, 6), range(3), range(1, 3)):
        out = (size + 2 * pad - dil * (taps - 1) - 1) // stride + 1
        if out >= 1:
            read = {o * stride - pad + j * dil for o in range(out) for j in range(taps)} & set(range(size))
            assert touched(size, out, taps, stride, pad, dil) == len(read), (size, taps, stride, pad, dil)


def test_strided_1x1_weight_gradient_reads_a_quarter_and_data_gradient_writes_all():
    """The downsample's backward: its data gradient writes all of dX (8x64x56x56) with dY and the
    weight read; its weight gradient reads the quarter of X the forward read. Where the input
    takes no gradient, the one matrix kernel is the weight's, whatever its name."""
    x = {"shape": [8, 64, 56, 56], "dtype": "float16", "grad": True}
    w = {"shape": [128, 64, 1, 1], "dtype": "float16", "grad": True}
    marker = _marker(x, w, 2, 0)
    dy, wn, full, quarter = 8 * 128 * 28 * 28, 128 * 64, 8 * 64 * 56 * 56, 8 * 64 * 28 * 28
    facts, _ = analyse([record(marker, "sm90_xmma_dgrad_implicit_gemm_f16f16", "bprop"),
                        record(marker, "sm90_xmma_wgrad_implicit_gemm_f16f16", "bprop")])
    assert [f.bytes for f in facts] == [(dy + wn + full) * 2, (dy + wn + quarter) * 2]
    alone = _marker(dict(x, grad=False), w, 2, 0)
    facts, _ = analyse([record(alone, "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n", "bprop")])
    assert [f.bytes for f in facts] == [(dy + wn + quarter) * 2]


def test_a_transposed_convolutions_channel_pads() -> None:
    """A 64-to-3-channel ConvTranspose2d (stride 2: 32x32 to 64x64) in bf16 channels_last, as a
    compiled VQ-VAE's decoder ran it (H200, torch 2.11): cuDNN pads the output's 3 channels to 8.
    Forward (its data-gradient kernel): the weight padded, then the output stripped; backward:
    dY and the weight padded around the forward kernel that makes dX, then dY padded and dW
    stripped around the weight gradient (before, none: the pads looked for the input's channels,
    64, a multiple of 8; 2.5% of the compiled step na)."""
    x = {"shape": [32, 64, 32, 32], "dtype": "bfloat16", "format": "channels_last", "grad": True}
    w = {"shape": [64, 3, 4, 4], "dtype": "bfloat16", "grad": True}
    marker = {"v": 1, "kind": "op", "mod": "torch.nn.functional", "op": "conv_transpose2d",
              "args": [x, w, None, [2, 2], [1, 1]]}
    cost = lookup("torch.nn.functional", "conv_transpose2d")(Call(marker))
    assert cost.out_shape == (32, 3, 64, 64)
    y, wt = 32 * 3 * 64 * 64, 64 * 3 * 4 * 4
    pad_y, pad_w = (y + y // 3 * 8) * 2, (wt + wt // 3 * 8) * 2
    assert [(p.family, p.numel, p.bytes) for p in channel_pads(marker, cost, False)] == [(PAD, wt, pad_w), (PAD, y, pad_y)]
    assert [(p.numel, p.bytes) for p in channel_pads(marker, cost, True)] == [(y, pad_y), (wt, pad_w)] * 2
    marker["args"][0] = dict(x, grad=False)
    assert [p.numel for p in channel_pads(marker, cost, True)] == [y, wt]
