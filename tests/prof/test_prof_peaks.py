"""GPU peak look-up, math paths, %-of-peak, bandwidth and the roofline bound."""
from __future__ import annotations

import pytest

from pyprof.prof.columns import bound
from pyprof.prof.pricing.peaks import FP16_TC, FP32, FP64, FP64_TC, INT8_TC, TF32_TC, lookup, math_path
from test_prof_helpers import H100, described, kernels, prof_text, tensor


@pytest.mark.parametrize("name,row", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("Tesla T4", "T4"),
    ("NVIDIA B200", "B200"),
])
def test_table_rows(name, row):
    assert lookup({"name": name}).name == row


@pytest.mark.parametrize("name", [
    "NVIDIA A100-PCIE-40GB",  # not in the table (40GB PCIe figures differ from both SXM rows)
    "NVIDIA H100",            # SXM or PCIe? ambiguous
    "NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GH200 480GB",
    "NVIDIA L40S", "NVIDIA A10G", "NVIDIA GeForce RTX 4090",
])
def test_ambiguous_or_unknown_gpus_have_no_compute_peak(name):
    peaks = lookup({"name": name, "memoryBandwidth": 2_000_000_000_000})
    assert peaks.flops == {} and peaks.gbps == 2000.0  # the export's own bandwidth still serves
    assert lookup({"name": name}) is None


def test_no_gpu_description():
    assert lookup(None) is None and lookup({}) is None


@pytest.mark.parametrize("tc,dtype,path", [
    (True, "float16", FP16_TC), (True, "bfloat16", FP16_TC), (True, "float32", TF32_TC),
    (True, "int8", INT8_TC), (True, "float64", FP64_TC), (True, "float8_e4m3fn", None),
    (False, "float32", FP32), (False, "float64", FP64), (False, "complex64", FP32),
    (False, "float16", None), (False, "int64", None), (False, None, None),
])
def test_math_path(tc, dtype, path):
    assert math_path(tc, dtype) == path


def test_percent_of_peak_and_bandwidth_columns():
    """An 8192^3 bf16 GEMM in 1.39 ms on an H100 SXM: 791 TFLOP/s, 80% of the 989 dense peak."""
    a = tensor(8192, 8192, dtype="bfloat16")
    m = described("torch", "mm", a, a)
    rec = kernels(m, ["nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_TNT"])[0]
    rec["kDuration"] = 1_390_000
    out, _ = prof_text([rec], "flops,tflops,peak,gbps,bw,ai,bound,path,dtype")
    row = out.splitlines()[1].split()
    assert row[0] == str(2 * 8192 ** 3) and row[1] == "791.016" and row[2] == "80.0"
    gbps = 3 * 8192 * 8192 * 2 / 1_390_000
    assert row[3] == f"{gbps:.1f}" and row[4] == f"{gbps / 3350 * 100:.1f}"
    assert row[6] == "compute" and row[7] == "fp16_tc"


def test_memory_bound_elementwise_and_unknown_gpu():
    x = tensor(1 << 20)
    m = described("torch.nn.functional", "relu", x)
    rec = kernels(m, ["void at::native::vectorized_elementwise_kernel<4>(...)"], dur=5000)[0]
    out, _ = prof_text([rec], "ai,bound,peak,bw")
    pct_fp32 = (1 << 20) / 5000 / 1000 / 67 * 100  # 1 FLOP per element against the FP32 peak
    assert out.splitlines()[1].split() == ["0.12", "memory", f"{pct_fp32:.1f}", f"{8 * (1 << 20) / 5000 / 3350 * 100:.1f}"]
    # The same bytes in 1 us would be 250% of the bandwidth: above the roof, and Bound says so
    rec["kDuration"] = 1000
    out, _ = prof_text([rec], "bound,bw")
    assert out.splitlines()[1].split() == ["over", f"{8 * (1 << 20) / 1000 / 3350 * 100:.1f}"] == ["over", "250.4"]
    rec["gpu"] = {"name": "Mystery GPU"}
    out, _ = prof_text([rec], "bound,peak,bw")
    assert out.splitlines()[1].split() == ["na", "na", "na"]


def test_bound_needs_both_numbers():
    class F:
        flops, bytes, peaks, path = None, 10, lookup(H100), FP32
    assert bound(F) == "na"
