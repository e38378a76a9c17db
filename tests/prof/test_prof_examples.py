"""End to end over real H100 captures: parse's records of examples/*.sqlite and of the Tensor
Core zoo (tests/data/tc_zoo.sqlite) through prof, checked against Nsight Compute counters
(tests/data/tc_ground_truth.csv: one row per zoo kernel, in launch order)."""
from __future__ import annotations

import csv
import json
import pathlib
import subprocess
import sys

import pytest

from test_prof_helpers import analyse

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def parsed(export: pathlib.Path) -> list:
    out = subprocess.run([sys.executable, "-m", "pyprof.parse", str(export)], check=True,
                         capture_output=True).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def zoo():
    recs = parsed(DATA / "tc_zoo.sqlite")
    truth = list(csv.DictReader(open(DATA / "tc_ground_truth.csv", newline="")))
    assert len(recs) == len(truth)
    assert [r["kShortName"] for r in recs] == [t["kernel"] for t in truth]
    facts, summary = analyse(recs)
    return recs, truth, facts, summary


def test_tensor_core_verdicts_match_nsight_compute(zoo):
    """tc 1 exactly for the kernels whose MMA counters are above zero."""
    recs, truth, facts, _ = zoo
    wrong = [(t["name"], f.tc, t["tc"]) for t, f in zip(truth, facts) if (f.tc is True) != (t["tc"] == "1")]
    assert wrong == []


def test_every_zoo_kernel_is_recognised(zoo):
    assert "kernel not recognised (tc -, work na)" not in zoo[3].warnings


def _ratio(f, t):
    """prof's FLOPs over the counter's; None where the counter is 0 (FP64 Tensor Core kernels:
    the table has no DMMA ops-path sum, only the instruction count behind tc)."""
    ref = float(t["mma_ops"] if t["tc"] == "1" else t["core_flops"])
    return f.flops / ref if ref else None


def test_algorithmic_flops_never_exceed_the_hardware_count(zoo):
    """Hardware pads tiles, recomputes halos and runs whole causal blocks: it does at least the
    algorithmic work. CUDA-core matrix kernels stay within 10% of their FFMA count. Except the
    GEMM between Winograd transforms (the fp32 weight gradient): Winograd computes the same
    convolution with fewer multiplies (here 231,837,696 for the algorithmic 924,844,032)."""
    recs, truth, facts, _ = zoo
    for i, (_, t, f) in enumerate(zip(recs, truth, facts)):
        if any("winograd" in recs[j]["kShortName"].lower() for j in (i - 1, i + 1) if 0 <= j < len(recs)):
            continue
        ratio = _ratio(f, t) if f.flops else None
        if ratio is not None and f.tc is True:
            assert ratio <= 1.0, t["name"]
        if ratio is not None and f.tc is False:
            assert 0.9 <= ratio <= 1.0, t["name"]


EXACT = ["mm_1024x1024x1024_tf32", "mm_1024x1024x1024_bf16", "bmm_8x256x256x128_tf32",
         "bmm_8x256x256x128_bf16", "bmm_8x256x256x128_fp16", "mm_1024x1024x1024_fp16",
         "conv2d_3x3_nchw_tf32", "conv2d_3x3_nhwc_tf32", "conv2d_3x3_nchw_bf16", "conv2d_3x3_nhwc_bf16",
         "linear_fwd_bwd_bf16", "conv2d_fwd_bwd_bf16", "conv2d_3x3_nchw_fp16", "conv2d_3x3_nhwc_fp16",
         "conv2d_fwd_bwd_fp16"]
# Not linear_fwd_bwd_fp16: its forward GEMM runs 72-wide tiles over N=768, so the hardware
# computes 12.5% padding (905969664 MMA ops for 805306368 algorithmic FLOPs).


@pytest.mark.parametrize("case", EXACT)
def test_aligned_mma_kernels_match_the_counter_exactly(zoo, case):
    """For aligned GEMM/conv shapes the Tensor Core ops-path sum is the algorithmic 2*M*N*K;
    a conv data gradient computes a halo and is excluded."""
    recs, truth, facts, _ = zoo
    rows = [(t, f) for t, f in zip(truth, facts) if t["case"] == case and t["tc"] == "1" and "dgrad" not in t["name"]]
    assert rows
    for t, f in rows:
        assert f.flops == int(t["mma_ops"]), t["name"]


def test_linear_forward_and_backward_sum_to_three_gemms(zoo):
    recs, truth, facts, _ = zoo
    for prec in ("fp16", "bf16", "fp32"):
        flops = [f.flops for t, f in zip(truth, facts) if t["case"] == f"linear_fwd_bwd_{prec}" and f.tc is not None]
        assert sum(flops) == 3 * 2 * 512 * 768 * 1024, prec


def test_helper_kernels_carry_no_matrix_work(zoo):
    """cuBLASLt's split-K reductions of the 1000 x 1000 x 999 products (tf32, fp16, bf16: the GEMM
    before each ran 4 splits, its grid's z) carry their sums, no matrix work: 3 adds per output
    element, the 4 partial products read (fp32, fp32, bf16, as their names say) and the output
    written once (4, 2, 2 bytes): their reads are what Nsight Compute counted from DRAM, to 0.3%
    (the output stays in L2). cuDNN's layout conversions no FLOPs but the tensor they move, read
    and written once (pricing/parts.py): 1.3-2.1x the DRAM bytes Nsight Compute counted (it read the
    tensor from DRAM; the copy it wrote stayed in L2)."""
    recs, truth, facts, _ = zoo
    layouts, splits = 0, []
    for r, f, t in zip(recs, facts, truth):
        if "splitKreduce" in r["kShortName"]:
            splits.append((f.flops, f.bytes, f.tc))
        if any(h in r["kShortName"] for h in ("nchwToNhwc", "nhwcToNchw")):
            layouts += 1
            assert (f.flops, f.tc) == (0, None) and 1.3 <= f.bytes / int(t["dram_bytes"]) <= 2.1
    assert layouts == 38
    out = 1000 * 1000
    assert splits == [(3 * out, out * (4 * 4 + 4), None), (3 * out, out * (4 * 4 + 2), None), (3 * out, out * (4 * 2 + 2), None)]
    reads = [int(t["dram_bytes"]) / (out * 4 * size) for t, size in
             zip([t for r, t in zip(recs, truth) if "splitKreduce" in r["kShortName"]], (4, 4, 2))]
    assert all(1.0 <= x <= 1.003 for x in reads), reads


@pytest.mark.slow
@pytest.mark.parametrize("example", ["lenet", "gpt"])
def test_examples_print_every_column(example):
    """Every column, every form, on a real capture: no crash, one row per record, fixed field count."""
    export = ROOT / "examples" / f"{example}.sqlite"
    dict_lines = subprocess.run([sys.executable, "-m", "pyprof.parse", str(export)], check=True,
                                capture_output=True).stdout
    from pyprof.prof.columns import COLUMNS
    cols = ",".join(c.name for c in COLUMNS)
    p = subprocess.run([sys.executable, "-m", "pyprof.prof", "-c", cols], input=dict_lines, capture_output=True)
    assert p.returncode == 0
    rows = p.stdout.decode().splitlines()
    assert len(rows) == 1 + len(dict_lines.splitlines())
    assert {len(r.split(" ")) for r in rows} == {len(COLUMNS)}
    for form in (["--csv"], ["-w", "160"]):
        assert subprocess.run([sys.executable, "-m", "pyprof.prof", *form], input=dict_lines,
                              capture_output=True).returncode == 0


def test_gpt_autocast_gemms_are_bf16_tensor_core_kernels():
    """examples/gpt.py runs its linears under bf16 autocast on fp32 weights: the marker says fp32,
    the nvjet kernel's name says bf16, so bytes and the peak are bf16 ones."""
    recs = parsed(ROOT / "examples" / "gpt.sqlite")
    facts, _ = analyse(recs)
    gemms = [(r, f) for r, f in zip(recs, facts) if r["op"] == "linear" and f.tc is True and r["dir"] == "fprop"]
    assert gemms
    for _, f in gemms:
        assert f.dtype == "bfloat16" and f.path == "fp16_tc" and f.flops > 0
