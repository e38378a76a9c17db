"""cuDNN's Winograd transforms and GEMMs, a grouped convolution's per-group CUTLASS weight gradients
and a 16-bit weight gradient's padded split-K reduction (issue 27), each kernel its own FLOPs and
bytes, on real records of the H100 coverage captures of benchmarks/pricing_coverage.py
(tests/data/kernel_truth/conv_cov_calls.jsonl.xz: whole op calls of SqueezeNet 1.1, Wide
ResNet-50-2, DenseNet-121, RegNetY-400MF and ShuffleNet v2, pyprof.init()'s markers and the plain
emit_nvtx ranges), held against Nsight Compute on the same models' steps
(conv_ncu_winograd.csv.xz, benchmarks/conv_winograd_truth.sh: the bytes each kernel's loads and
stores moved, its FP32 instructions)."""
from __future__ import annotations

import csv
import io
import lzma
import os

import pytest

from pyprof.prof.io.reader import records
from pyprof.prof.pricing.conv_parts import winograd_transform
from pyprof.prof.scan import analysed
from pyprof.prof.warnings_tally import Tally

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "kernel_truth")
LD, ST = "smsp__sass_data_bytes_mem_global_op_ld.sum", "smsp__sass_data_bytes_mem_global_op_st.sum"
FFMA = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"


@pytest.fixture(scope="module")
def calls() -> list:
    """(dir, op, short name, grid, FLOPs, bytes, whole-call work) of every record, in order."""
    with lzma.open(os.path.join(DATA, "conv_cov_calls.jsonl.xz"), "rb") as stream:
        return [(r["dir"], r["op"], r["kShortName"], r["grid"], f.flops, f.bytes, f.call_work)
                for r, f, _ in analysed(records(stream, Tally()), Tally())]


@pytest.fixture(scope="module")
def ncu() -> dict:
    """ncu's rows by ID: (kernel name, grid, {metric: value})."""
    with lzma.open(os.path.join(DATA, "conv_ncu_winograd.csv.xz"), "rt") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows: dict = {}
    for row in csv.DictReader(io.StringIO("".join(lines))):
        name, grid, metrics = rows.setdefault(int(row["ID"]), (row["Kernel Name"], row["Grid Size"], {}))
        metrics[row["Metric Name"]] = int(row["Metric Value"].replace(",", ""))
    return rows


def _moved(ncu: dict, ids: range) -> list:
    """(grid, bytes loaded + stored) of ncu's rows `ids`."""
    return [(ncu[i][1], ncu[i][2][LD] + ncu[i][2][ST]) for i in ids]


def test_winograd_weight_gradient_each_kernel_its_tensors(calls, ncu) -> None:
    """SqueezeNet's 8x64x7x7 input, 256x64x3x3 weight: 32 tiles of 4x4 over dY. Data reads X and
    writes 36 x 64 x 32 fp32, Delta reads dY and writes 36 x 256 x 32, the GEMM writes 36 x 256 x
    64 and Output reads them and writes dW: each equal to what ncu's loads and stores moved. The
    GEMM's FLOPs are the 36 products it runs (a quarter of the convolution's 115,605,504, which
    whole-call sums keep), its reads the two tile sets (ncu's loads are asynchronous copies, not
    counted there), its stores to the byte. Markers and plain ranges alike (the plain ranges' dX
    zeroing too, priced from the range's shapes)."""
    gemm = 2 * 36 * 256 * 64 * 32
    tiles_read = 36 * (256 + 64) * 32 * 4
    want = [("winogradWgradData4x4", 0, 395264, None), ("winogradWgradDelta4x4", 0, 1581056, None),
            ("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
             "kernel__5x_cublas", gemm, tiles_read + 2359296, (115605504, tiles_read + 2359296)),
            ("winogradWgradOutput4x4", 0, 2949120, None)]
    for start in (2, 9):
        assert [(c[2], c[4], c[5], c[6]) for c in calls[start:start + 4]] == want
    # cuDNN's zeroing of dX before its dgrad kernel: from the marker, and from the plain range's shapes.
    assert calls[0][2:6] == calls[7][2:6] == ("scalePackedTensor_kernel", [98, 1, 1], 0, 8 * 64 * 49 * 4)
    assert _moved(ncu, range(3, 7)) == [("(2, 8, 1)", 395264), ("(8, 8, 1)", 1581056), ("(8, 2, 36)", 2359296),
                                        ("(2, 32, 1)", 2949120)]
    assert ncu[5][2][LD] == 0 and ncu[5][2][ST] == 36 * 256 * 64 * 4


def test_wide_winograd_gemm_is_not_above_its_peak(calls, ncu) -> None:
    """Wide ResNet-50-2's 4x256x16x16 input, 256x256x3x3 weight: the SIMT GEMM between the
    transforms (15 µs) was given the convolution's 1.21 GFLOP, above fp32's peak in its time, so
    beyond_peak withheld it (na); its own 36 products are 2 x ncu's FFMAs exactly, and the whole
    call still sums to the convolution's FLOPs. X was read 1.17x (overlapping tiles), the rest to the byte."""
    data, delta, gemm, out = calls[18:22]
    assert (gemm[2], gemm[3], gemm[4], gemm[6][0]) == ("Kernel2", [16, 1, 36], 301989888, 1207959552)
    assert gemm[4] == 2 * ncu[242][2][FFMA]
    assert [c[5] for c in (data, delta, out)] == [1048576 + 2359296, 1048576 + 2359296, 9437184 + 2359296]
    assert [(ncu[i][2][LD], ncu[i][2][ST]) for i in (240, 241, 243)] == [
        (1224704, 2359296), (1048576, 2359296), (9437184, 2359296)]


def test_winograd_forward_path_of_a_data_gradient(calls, ncu) -> None:
    """DenseNet-121's 4x128x4x4 fp16 data gradient run as a Winograd forward of dY: the filter
    transform reads the fp16 32x128x3x3 weight and writes 36 x 32 x 128 fp32; the data transform
    reads dY (4x32x4x4 fp16) and writes 36 x 32 rows of 16 tiles, the output transform reads 36 x
    128 rows of 16 tiles and writes dX (4x128x4x4 fp16): dX has 4 tiles, the tile sets 16 (one row
    of tiles, at most 16 images: 16 a tile column; conv_parts._forward_tiles). Each ncu's loads and
    stores to the byte. dY's two contiguous copies each their own."""
    assert [(c[2], c[4], c[5]) for c in calls[23:27]] == [
        ("winogradForwardData4x4", 0, 4096 + 36 * 32 * 16 * 4), ("winogradForwardFilter4x4", 0, 73728 + 589824),
        ("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize32x32x8_stage3_warpsize1x2x1_ffma_aligna4_alignc4_execute_"
         "kernel__5x_cublas", 4718592, 94208), ("winogradForwardOutput4x4", 0, 36 * 128 * 16 * 4 + 16384)]
    assert [(ncu[i][2][LD], ncu[i][2][ST]) for i in (972, 973, 975)] == [(4096, 36 * 32 * 16 * 4),
                                                                         (73728, 589824), (36 * 128 * 16 * 4, 16384)]
    # dY arrives strided (a slice of a cat's gradient): the data and the weight gradient's cuDNN
    # calls each copy it contiguous, 4x32x4x4 fp16 read and written.
    assert calls[22][2:6] == calls[27][2:6] == ("elementwise_kernel", [4, 1, 1], 0, 2 * 4 * 32 * 16 * 2)


def test_grouped_weight_gradient_run_a_group_at_a_time(calls, ncu) -> None:
    """RegNetY-400MF's 6-group 8x48x64x64 convolution (48x8x3x3 weight, stride 2): cuDNN converts
    each group's X and dY slices, runs CUTLASS's wgrad (no group mode) split 13 ways and a
    ReduceSplitK of its 8 x 72 gradient, six times. Each launch a sixth of the gradient's FLOPs;
    its stores, and the reduction's loads and stores, equal ncu's to the byte. Markers and
    plain ranges alike."""
    group = [("nchwToNhwcKernel", [128, 1, 8], 0, 2 * 8 * 8 * 64 * 64 * 4),
             ("nchwToNhwcKernel", [32, 1, 8], 0, 2 * 8 * 8 * 32 * 32 * 4),
             ("Kernel", [2, 1, 13], 56623104 // 6, (8 * 48 * 64 * 64 + 8 * 48 * 32 * 32) // 6 * 4 + 13 * 576 * 4),
             ("Kernel", [2, 1, 1], 12 * 576, 13 * 576 * 4 + 576 * 4),
             ("nhwcToNchwKernel", [1, 1, 8], 0, 2 * 576 * 4)]
    for start in (36, 70):
        assert [(c[2], c[3], c[4], c[5]) for c in calls[start:start + 30]] == group * 6
    assert ncu[616][2][ST] == 13 * 576 * 4 and ncu[617][2][LD] + ncu[617][2][ST] == 13 * 576 * 4 + 576 * 4


def test_bf16_weight_gradient_padded_in_filters_too(calls, ncu) -> None:
    """ShuffleNet v2's 58-filter 58-channel 1x1 convolution under bf16 autocast: CUTLASS's wgrad
    wrote 9 partials of 64 x 64 fp32 (filters and channels each padded to 8) and the ReduceSplitK
    (one block per 4 rows: 16) summed them into the 64 x 64 bf16 gradient: its bytes are ncu's
    loads and stores exactly. Forward, the strided input (a channel split) is made contiguous
    before cuDNN reads it: 8x58x16x16 bf16 read and written."""
    assert calls[104][2:6] == ("Kernel", [16, 1, 1], 8 * 4096, 9 * 4096 * 4 + 4096 * 2)
    assert (ncu[773][1], ncu[773][2][ST], ncu[774][1], ncu[774][2][LD] + ncu[774][2][ST]) == \
        ("(1, 1, 9)", 9 * 4096 * 4, "(16, 1, 1)", 9 * 4096 * 4 + 4096 * 2)
    assert calls[107][2:6] == ("elementwise_kernel", [232, 1, 1], 0, 2 * 8 * 58 * 16 * 16 * 2)


def test_winograd_transforms_the_shapes_do_not_say_are_na() -> None:
    """A 5x5 filter (F(4x4, 3x3) is for 3x3), a Forward Data or Output, shapes that are not
    (N, C, H, W): None, never a guess."""
    data = "void cudnn::winograd_nonfused::winogradWgradData4x4<float, float>(p)"
    x, y = (8, 64, 7, 7), (8, 256, 7, 7)
    assert winograd_transform(data, x, (256, 64, 3, 3), y) == (0, 8 * 64 * 49 * 4 + 36 * 64 * 32 * 4)
    assert winograd_transform(data, x, (256, 64, 5, 5), y) is None
    assert winograd_transform(data, (8, 64, 49), (256, 64, 3, 3), y) is None
    fwd = "void cudnn::winograd_nonfused::winogradForwardData4x4<float, __half>(p)"
    assert winograd_transform(fwd, x, (256, 64, 3, 3), y) is None
    assert winograd_transform(fwd.replace("Data", "Output"), x, (256, 64, 3, 3), y) is None


def ncu_configs(name: str) -> list:
    """ncu's rows of tests/data/kernel_truth/`name` (benchmarks/cov_default_truth.py) per
    configuration, split at each `spin_kernel`: [[(kernel name, grid, {metric: value}), ...], ...]."""
    with lzma.open(os.path.join(DATA, name), "rt") as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows: dict = {}
    for row in csv.DictReader(io.StringIO("".join(lines))):
        _, _, metrics = rows.setdefault(int(row["ID"]), (row["Kernel Name"], row["Grid Size"], {}))
        metrics[row["Metric Name"]] = int(row["Metric Value"].replace(",", ""))
    configs: list = []
    for i in sorted(rows):
        if "spin_kernel" in rows[i][0]:
            configs.append([])
        else:
            configs[-1].append(rows[i])
    return configs


def test_winograd_forward_path_tiles_of_16_a_tile_column() -> None:
    """Data gradients of 3x3 convolutions (fp16, padding 1) on an H100 (winograd_fwd_ncu.csv.xz,
    benchmarks/cov_default_truth.py): cuDNN ran 13 of 36 shapes as its Winograd forward path, all
    of one row of tiles (H at most 4), and each tile set held 16 tiles a column of tiles whatever
    the images (1 to 8) and the tiles they need (1 to 8): 32 for 4x128x4x8's two columns. Each data
    and output transform's loads plus stores are these bytes exactly. A result of more than one
    row of tiles, or of more than 16 images (not measured): na."""
    import itertools

    shapes = [(n, 128, hw, hw, 32) for n, hw in itertools.product((1, 2, 4, 8), (2, 3, 4, 5, 7, 8, 12))]
    shapes += [(4, c, hw, hw, 64) for hw, c in itertools.product((4, 8), (64, 256))]
    shapes += [(4, 128, 4, 8, 32), (4, 128, 8, 4, 32), (4, 128, 5, 9, 32), (3, 128, 6, 10, 32)]
    configs = ncu_configs("winograd_fwd_ncu.csv.xz")
    assert len(configs) == len(shapes) == 36
    ran = 0
    for (n, c, h, w, k), rows in zip(shapes, configs):
        moved = {name.split("(")[0].split("::")[-1].split("<")[0]: m[LD] + m[ST] for name, _, m in rows}
        if "winogradForwardData4x4" not in moved:
            continue
        ran += 1
        x, wt, y = (n, c, h, w), (k, c, 3, 3), (n, k, h, w)
        for part in ("Data", "Output"):
            kernel = f"void cudnn::winograd_nonfused::winogradForward{part}4x4<float, __half>(p)"
            assert winograd_transform(kernel, x, wt, y, True) == (0, moved[f"winogradForward{part}4x4"])
    assert ran == 13
    fwd = "void cudnn::winograd_nonfused::winogradForwardData4x4<float, __half>(p)"
    assert winograd_transform(fwd, (4, 128, 4, 8), (32, 128, 3, 3), (4, 32, 4, 8), True) == (0, 8192 + 36 * 32 * 32 * 4)
    assert winograd_transform(fwd, (4, 128, 8, 4), (32, 128, 3, 3), (4, 32, 8, 4), True) is None
    assert winograd_transform(fwd, (32, 128, 4, 4), (32, 128, 3, 3), (32, 32, 4, 4), True) is None
