"""--summary on the shipped real traces: exact header numbers, top groups, the three forms,
--by/--top/--sort, and the command-line errors."""
from __future__ import annotations

import csv
import io
import json

import pytest

from pyprof.prof.views.summary import collect, report
from pyprof.prof.warnings_tally import Tally
from test_views_common import numbered, prof, trace_records, write_dict


def rep(name, by="op", **kw):
    return report(collect(numbered(trace_records(name)), Tally(), by), **kw)


def with_unpriced(name):
    """The trace's records plus one kernel prof cannot price (no marker, no PyTorch ranges) that
    takes no time."""
    recs = trace_records(name)
    return recs + [dict(recs[0], op="unpriced", marker=None, torchOps=[], kDuration=0, kEnd=recs[0]["kStart"])]


def test_gpt_header_exact():
    h = rep("gpt")["header"]
    assert h["kernels"] == 139
    assert h["span_ns"] == 29828926 - 15135652 == 14693274
    assert h["gpu_time_ns"] == 509607
    # One stream, kernels never overlap: the union equals the sum.
    assert h["devices"][0]["busy_ns"] == 509607
    assert h["busy_pct"] == pytest.approx(509607 / 14693274 * 100)
    assert round(h["busy_pct"], 2) == 3.47
    assert (h["gaps"], h["gap_ns"], h["largest_gap_ns"]) == (138, 14693274 - 509607, 713897)
    assert round(h["tc_pct"], 1) == 24.2 and h["tc_missed_pct"] == 0.0
    assert h["copies"] == 0 and h["devices"][0]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_the_header_says_which_level_priced_what(tmp_path):
    """The GPT trace: 135 kernels priced by their op markers (Tensor.backward's seed fill by the
    call's own: 0 FLOPs, 4 B), 4 by PyTorch's aten ranges (the four NativeLayerNormBackward0
    gradient accumulations, aten::add_ of two fp32 [4,128,256]: 131,072 FLOPs, 3·524,288 B each),
    none by neither."""
    h = rep("gpt")["header"]
    assert h["priced_ns"] == {"marker": 504135, "aten": 5472, "compiled": 0} and h["unpriced_ns"] == 0
    assert 504135 + 5472 == h["gpu_time_ns"]
    rows = rep("gpt", by="level")["rows"]
    assert [(r["group"], r["count"], r["time_ns"]) for r in rows] == [("marker", 135, 504135), ("aten", 4, 5472)]
    assert (rows[1]["flops"], rows[1]["bytes"]) == (4 * 131072, 4 * 3 * 524288)
    rc, out, _ = prof("--summary", write_dict(tmp_path, "gpt", with_unpriced("gpt")))
    assert out.splitlines()[5] == ("priced by      marker 98.9%, aten 1.1%, compiled 0.0%, neither 0.0% of GPU time "
                                   "(op marker, PyTorch's aten ranges or compiled FX nodes; --by level, column level)")


def test_gpt_rows():
    rows = rep("gpt")["rows"]
    top = rows[0]
    assert (top["group"], top["time_ns"], top["count"], top["flops"], top["flops_na"]) == \
        ("linear", 262533, 79, 5637144576 + 2354688, 0)  # with the bias gradients' adds
    assert round(top["pct_time"], 1) == 51.5 and round(top["tc_pct"], 1) == 36.9
    assert [r["group"] for r in rows[:4]] == ["linear", "AdamW.step", "layer_norm", "scaled_dot_product_attention"]
    adam = rows[1]
    # The marker now carries weight_decay/amsgrad: AdamW with decay, 12 + 1 FLOPs per element of its
    # 2,137,088 parameters, over the time of its two kernels (66785 ns).
    # The fused math launch's 13 per element and the counter launch's 29 adds.
    assert adam["flops"] == 13 * 2137088 + 29 == 27782173 and adam["flops_na"] == 0
    assert adam["tflops"] == 27782173 / 66785 / 1000
    assert sum(r["time_ns"] for r in rows) == 509607 and sum(r["count"] for r in rows) == 139


def test_lenet_header_and_tensor_cores():
    h = rep("lenet")["header"]
    assert (h["kernels"], h["gpu_time_ns"]) == (44, 109056)
    assert h["tc_pct"] == 0.0 and h["tc_missed_pct"] == 100.0  # fp32 without TF32: every matrix kernel tc 0
    assert round(h["busy_pct"], 2) == round(109056 / h["span_ns"] * 100, 2)


def test_by_tc_and_dir_cover_everything():
    rows = rep("gpt", by="tc")["rows"]
    by = {r["group"]: r for r in rows}
    assert set(by) == {"1", "-"} and by["1"]["tc_pct"] == 100.0
    dirs = {r["group"]: r["count"] for r in rep("gpt", by="dir")["rows"]}
    assert sum(dirs.values()) == 139 and dirs == {"fprop": 51, "bprop": 86, "optim": 2}  # optim: AdamW.step


def test_by_layer_module_stream_kernel():
    assert rep("gpt", by="stream")["rows"][0]["group"] == "0:7"
    assert rep("gpt", by="layer")["rows"][0]["group"] == "train_step"
    # The full demangled name, as nsys stats: instantiations of one kernel stay apart
    assert rep("lenet", by="kernel")["rows"][0]["group"].startswith(
        "void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>")
    assert rep("gpt", by="module")["rows"]


def test_sort_and_top():
    r = rep("gpt", sort="count", top=2)
    assert [x["group"] for x in r["rows"]] == ["linear", "layer_norm"]
    assert r["more"]["groups"] == 9
    names = [x["group"] for x in rep("gpt", sort="name")["rows"]]
    assert names == sorted(names)
    flops = report(collect(numbered(with_unpriced("gpt")), Tally(), "op"), sort="flops")["rows"]
    assert flops[0]["group"] == "linear" and flops[-1]["flops"] is None  # unknown sorts last


def test_sort_by_duration_statistics():
    """--sort avg, med, max: largest first by the group's mean, median, longest kernel."""
    for key, stat in (("avg", "avg_ns"), ("med", "med_ns"), ("max", "max_ns")):
        rows = rep("gpt", sort=key)["rows"]
        values = [r[stat] for r in rows]
        assert values == sorted(values, reverse=True) and len(rows) == 11, key
    assert [r["group"] for r in rep("gpt", sort="max")["rows"][:2]] == ["AdamW.step", "cross_entropy"]


def test_text_output(tmp_path):
    rc, out, err = prof("--summary", write_dict(tmp_path, "gpt", with_unpriced("gpt")))
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("capture span   14.69 ms") and "NVIDIA H100 80GB HBM3" in lines[0]
    assert lines[1].startswith("GPU busy       3.5%")
    assert lines[2] == "idle gaps      138, 14.18 ms in all, largest 713.9 us"
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[:3] == ["Op", "Time", "%Time"]
    assert table[1].split()[:5] == ["linear", "262.5", "us", "51.5", "79"]
    assert "advice:" in out and "launch-bound" in out
    # the kernel with_unpriced() adds is the one warned about
    assert err == "pyprof.prof: 140 records; warnings:\n  no op marker: 1 kernel: torch.nn.functional.unpriced (1)\n"


def _renamed(rec: dict, old: str, new: str) -> dict:
    """`rec` with op `old` (its own, its marker's, its forward op's marker's) renamed `new`."""
    rec = json.loads(json.dumps(rec))
    for m in (rec, rec.get("marker"), (rec.get("fwd") or {}).get("marker")):
        if m and m.get("op") == old:
            m["op"] = new
    return rec


def test_partial_sums_are_marked_as_lower_bounds(tmp_path):
    rc, out, _ = prof("--summary", write_dict(tmp_path, "gpt"))
    add = next(line for line in out.splitlines() if line.startswith("__add__"))
    # Every __add__ kernel is known: 5 forward adds of 4·128·256 elements (655,360 FLOPs) and, in
    # the backward, the [128,256] operand's gradient summed over the batch of 4 (3·32,768 adds)
    assert add.split()[15] == "753.66k"  # after Time, %Time, Count and five duration statistics
    # The same trace with the adds renamed atan2 (no backward formula): its backward kernels are
    # priced from their PyTorch ranges instead; with the forward op's seq taken from its records,
    # the summed dims are in no range (the forward add's sizes are what tell them) and, without
    # its launch's grid, neither is the output's size (pricing/reduce_launch.py): the aten::sum's
    # adds and bytes unknown, so both sums are lower bounds (the forward's 655,360 FLOPs)
    recs = [_renamed(r, "__add__", "atan2") for r in trace_records("gpt")]
    for r in recs:
        if ((r.get("fwd") or {}).get("marker") or {}).get("op") == "atan2":
            r["fwd"].pop("seq", None)
            r["grid"] = None
    rc, out, _ = prof("--summary", write_dict(tmp_path, "atan2", recs))
    atan2 = next(line for line in out.splitlines() if line.startswith("atan2")).split()
    assert atan2[15] == "655.36k+" and atan2[18].endswith("+")


def test_json_output(tmp_path):
    rc, out, _ = prof("--summary", "--json", "--by", "kernel", "--top", "3", write_dict(tmp_path, "gpt"))
    d = json.loads(out)
    assert set(d) == {"by", "sort", "header", "rows", "more", "advice", "notes"}
    assert d["by"] == "kernel" and len(d["rows"]) == 3
    assert set(d["rows"][0]) == {"group", "kernel", "time_ns", "pct_time", "count", "avg_ns", "med_ns", "min_ns",
                                 "max_ns", "stddev_ns", "flops", "flops_na", "tflops", "pct_peak", "bytes",
                                 "bytes_na", "gbps", "tc_pct"}
    assert d["header"]["kernels"] == 139


def test_csv_output(tmp_path):
    rc, out, err = prof("--summary", "--csv", write_dict(tmp_path, "gpt"))
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["op"] == "linear" and rows[0]["time_ns"] == "262533"
    assert rows[1]["flops"] == "27782173"  # AdamW.step
    assert len(rows) == 11
    assert "capture span" in err and "advice:" in err  # the header goes to stderr with CSV


def test_stdin_and_width(tmp_path):
    text = open(write_dict(tmp_path, "lenet"), "rb").read()
    rc, out, _ = prof("--summary", "-w", "140", stdin=text)
    assert rc == 0 and max(len(line) for line in out.split("\n\n")[1].splitlines()) <= 140


@pytest.mark.parametrize("args,msg", [
    (["--summary", "-c", "op"], "-c selects per-kernel columns"),
    (["--plot", "x.png", "--json"], "--json does not apply to --plot"),
    (["--summary", "--top", "0"], "--top needs a positive number"),
])
def test_usage_errors(args, msg):
    rc, out, err = prof(*args)
    assert rc == 2 and out == "" and msg in err and len(err.splitlines()) == 1


def test_missing_file_and_sqlite_input():
    rc, _, err = prof("--summary", "/nonexistent.dict")
    assert rc == 3 and err.startswith("pyprof.prof: error: cannot read")
    rc, _, err = prof("--summary", "/nonexistent.sqlite")
    assert rc == 3 and err == "pyprof.prof: error: /nonexistent.sqlite: no such file\n"


def test_bad_time_fields_are_bad_lines(tmp_path):
    recs = trace_records("lenet")
    recs[3]["kStart"] = "soon"
    rc, out, err = prof("--summary", write_dict(tmp_path, "bad", recs))
    assert rc == 0 and "line 4: record fields not understood" in err
    assert "kernels        43," in out
    rc, _, err = prof("--summary", "--strict", write_dict(tmp_path, "bad", recs))
    assert rc == 7


def test_per_kernel_view_unchanged(tmp_path):
    rc, out, _ = prof("-c", "idx,op,sil", write_dict(tmp_path, "lenet"))
    assert rc == 0 and out.splitlines()[0].split() == ["Idx", "Op", "Sil(ns)"] and len(out.splitlines()) == 45


def test_kernels_above_a_roof_are_explained():
    note = rep("resnet")["notes"][0]
    # max_pool2d's backward on max_pool_backward_nhwc, not on the zero fill before it: not above.
    assert note.startswith("8 kernels above a roof (%BW or %Peak over 100; highest 126.6%, relu; Bound says "
                           "over): ")
    assert "L2 cache" in note and "the op's row is its honest rate" in note
    sgd = next(r for r in rep("resnet")["rows"] if r["group"] == "SGD.step")
    assert sgd["gbps"] / 3352.32 * 100 < 100  # the op's rate over all its kernels stays under the roof
    assert not any("above a roof" in n for n in rep("gpt")["notes"])


@pytest.mark.parametrize("view", [["--summary"], ["--summary", "--by", "call"], ["--modules"], ["--overlap"],
                                  ["--stragglers"]])
def test_json_of_a_view_is_strict_json_whatever_a_record_carries(view):
    """A NaN device (the fuzz suite drew it) reached --summary --json as `NaN`, which is no JSON:
    every view's --json writes such a value as null."""
    rec = {"v": 1, "kind": "kernel", "kShortName": "k", "kDuration": 3520, "kStart": 11850673, "kEnd": 11854193,
           "device": float("nan"), "stream": 7, "pid": 1, "tid": 1, "dir": "fprop", "op": "x"}
    status, out, err = prof(*view, "--json", "-", stdin=(json.dumps(rec) + "\n").encode())
    assert status == 0, err
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))
    if view[0] == "--summary":
        assert json.loads(out)["header"]["devices"][0]["device"] is None
