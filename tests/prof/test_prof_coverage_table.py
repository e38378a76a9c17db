"""benchmarks/pricing_coverage.py's table over compiled captures: several captures' records in one
table (a model in several: the last one's), each model's matrix and RNN FLOPs against the eager
capture's (`--eager`), on the H200 records the benchmark keeps (benchmarks/results/coverage_h200_records/)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
RECORDS = os.path.join(ROOT, "benchmarks", "results", "coverage_h200_records")


def test_compiled_captures_against_the_eager_one() -> None:
    """The first compiled capture (transformer_encoder, mha_weights, lstm, gru) was parsed before
    this stop's join fixes: its transformer_encoder lost the efficient-attention backward (0.9097
    of eager's matrix FLOPs); its gru comes from the later capture. The unrolled LSTM and GRU skip
    the first layer's input gradient that cuDNN's eager backward computes (results/coverage_compiled_h200.txt)."""
    first = os.path.join(RECORDS, "compiled", "compiled_1_fada1c0.jsonl.xz")
    later = os.path.join(RECORDS, "compiled", "compiled_4b_960284c.jsonl.xz")
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "pricing_coverage.py"), "table",
                          f"{first},{later}", os.path.join(RECORDS, "flops_default.json"), "--missing", "0",
                          "--eager", os.path.join(RECORDS, "cov_default.jsonl.xz")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:6]}
    assert out.splitlines()[1].split()[-3:] == ["kernel%", "vs", "eager"]
    assert {name: (row[1], row[-2], row[-1]) for name, row in rows.items()} == {
        "transformer_encoder": ("212", "79.9", "0.9097"), "mha_weights": ("50", "100.0", "1.0000"),
        "lstm": ("2637", "100.0", "0.8827"), "gru": ("976", "100.0", "0.9596")}
    assert out.splitlines()[6] == "all 4 models: kernel% 97.5 of 8.73 GPU ms; at least 99 on 3 (below: transformer_encoder)"


def test_a_compiled_moe_with_graph_breaks_matches_its_eager_step() -> None:
    """The top-2 MoE under torch.compile (its torch.where(idx == e) breaks the graph; its experts'
    graph compiled for dynamic rows): each expert call's GEMMs sized from their op ranges, the
    nonzero kernels marked through the break, the runs joined to the graph their ranges name:
    matrix FLOPs equal the eager step's (4.12x before the runs named their graph), 99.8% of GPU
    time in kernels with FLOPs and bytes known."""
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "pricing_coverage.py"), "table",
                          os.path.join(RECORDS, "compiled", "compiled_7_4cb45ec.jsonl.xz"),
                          os.path.join(RECORDS, "added", "flops_default_c2088f6.json"), "--missing", "0",
                          "--eager", os.path.join(RECORDS, "added", "cov_default_c2088f6.jsonl.xz")],
                         capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    row = out.splitlines()[2].split()
    assert (row[0], row[1], row[-2], row[-1]) == ("moe", "371", "99.8", "1.0000")
