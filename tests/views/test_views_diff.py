"""--diff: two real captures by op, the same capture with one kernel slowed down, exact totals."""
from __future__ import annotations

import csv
import io
import json

from pyprof.prof.views.diff import compare, totals
from pyprof.prof.warnings_tally import Tally
from test_views_common import numbered, prof, trace_records, write_dict


def diff(base, new, by="op"):
    return compare(totals(numbered(base), by, Tally()), totals(numbered(new), by, Tally()))


def test_lenet_vs_gpt_by_op():
    d = diff(trace_records("lenet"), trace_records("gpt"))
    assert d["total"] == {"base_ns": 109056, "new_ns": 509607, "delta_ns": 400551,
                          "ratio": 509607 / 109056, "base_count": 44, "new_count": 139}
    first = d["rows"][0]
    assert (first["group"], first["base_ns"], first["new_ns"], first["delta_ns"]) == ("linear", 28480, 262533, 234053)
    conv = next(r for r in d["rows"] if r["group"] == "conv2d")
    assert conv["new_ns"] is None and conv["ratio"] is None and conv["delta_ns"] == -conv["base_ns"]
    adam = next(r for r in d["rows"] if r["group"] == "AdamW.step")
    assert adam["base_ns"] is None and adam["ratio"] is None
    deltas = [abs(r["delta_ns"]) for r in d["rows"]]
    assert deltas == sorted(deltas, reverse=True)


def test_one_kernel_slower():
    base = trace_records("gpt")
    new = [dict(r) for r in base]
    i = next(i for i, r in enumerate(new) if r["op"] == "layer_norm")
    new[i]["kDuration"] += 100_000
    d = diff(base, new)
    top = d["rows"][0]
    assert (top["group"], top["delta_ns"], top["base_ns"], top["new_ns"]) == ("layer_norm", 100000, 50432, 150432)
    assert all(r["delta_ns"] == 0 for r in d["rows"][1:])
    assert d["total"]["delta_ns"] == 100000 and d["total"]["new_ns"] == 609607


def test_by_kernel_and_layer():
    d = diff(trace_records("gpt"), trace_records("gpt"), by="kernel")
    assert d["total"]["delta_ns"] == 0 and all(r["ratio"] == 1.0 for r in d["rows"])
    d = diff(trace_records("lenet"), trace_records("gpt"), by="layer")
    assert {r["group"] for r in d["rows"]} >= {"train_step"}


def test_cli_forms(tmp_path):
    a, b = write_dict(tmp_path, "lenet"), write_dict(tmp_path, "gpt")
    rc, out, _ = prof("--diff", a, b)
    lines = out.splitlines()
    assert rc == 0 and lines[0].split() == ["Op", "Base", "New", "Delta", "Ratio", "Count"]
    assert lines[1].split() == ["linear", "28.5", "us", "262.5", "us", "+234.1", "us", "9.22x", "12>79"]
    assert lines[-1].split()[0] == "(total)" and "4.67x" in lines[-1]
    assert next(x for x in lines if x.startswith("conv2d")).split()[3] == "-"  # absent on the new side
    rc, out, _ = prof("--diff", a, b, "--csv", "--top", "1")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["op"] for r in rows] == ["linear", "(total)"] and rows[1]["delta_ns"] == "400551"
    rc, out, _ = prof("--diff", a, b, "--json")
    assert json.loads(out)["total"]["delta_ns"] == 400551


def test_cli_errors(tmp_path):
    a = write_dict(tmp_path, "lenet")
    rc, _, err = prof("--diff", a, "/nonexistent.dict")
    assert rc == 3 and "cannot read /nonexistent.dict" in err
    rc, _, err = prof("--diff", a, a, "--summary")
    assert rc == 2 and "--diff takes its two files" in err
