"""--summary's groups as nsys stats and torch.profiler users expect: per-group duration
statistics, --by kernel on the full demangled name, --by shape and combined keys (op,shape)."""
from __future__ import annotations

import csv
import io
import json
import statistics
from collections import defaultdict

import pytest

from pyprof.prof.groups import GROUP_WIDTH, by_keys, input_shapes
from pyprof.prof.pricing.analysis import Facts
from pyprof.prof.units import kernel_label
from pyprof.prof.views import modules
from pyprof.prof.views.summary import collect, report
from pyprof.prof.warnings_tally import Tally
from test_views_common import prof, stream, trace_records, write_dict
from pyprof.prof.io.reader import records


def rep(name, by, **kw):
    return report(collect(records(stream(trace_records(name)), Tally()), Tally(), by), **kw)


@pytest.mark.parametrize("by", ["op", "kernel", "op,shape"])
def test_duration_statistics_match_the_statistics_module(by):
    durations = defaultdict(list)
    keys = by_keys(by)
    for r in trace_records("gpt"):
        name = " ".join({"op": r["op"], "kernel": r["kLongName"], "shape": input_shapes(r)}[k] for k in keys)
        durations[name].append(r["kDuration"])
    rows = rep("gpt", by)["rows"]
    assert {r["group"] for r in rows} == set(durations)
    for r in rows:
        d = durations[r["group"]]
        assert (r["count"], r["time_ns"], r["min_ns"], r["max_ns"]) == (len(d), sum(d), min(d), max(d))
        assert r["avg_ns"] == pytest.approx(statistics.mean(d)) and r["med_ns"] == statistics.median(d)
        assert r["stddev_ns"] == pytest.approx(statistics.stdev(d) if len(d) > 1 else 0.0)


@pytest.mark.parametrize("numpy", [True, False])
def test_duration_statistics_with_and_without_numpy(numpy, monkeypatch):
    """Group.stats' median, least and greatest come from a numpy partition of the durations, or,
    without numpy (prof needs none), from their sorted list: the same values and types, for one,
    two and many durations (odd and even counts, repeats, negatives)."""
    import random
    import sys

    from pyprof.prof.groups import Group

    if not numpy:
        monkeypatch.setitem(sys.modules, "numpy", None)
    rng = random.Random(5)
    for n in (1, 2, 3, 4, 7, 10, 1001):
        g = Group("g")
        for _ in range(n):
            g.add(rng.choice([-3, 0, 5, 5, 2**40, rng.randrange(10**9)]), Facts())
        d = sorted(g.durations)
        got = g.stats()
        assert (got["min_ns"], got["max_ns"], got["med_ns"]) == (d[0], d[-1], statistics.median(d)), n
        assert type(got["min_ns"]) is type(got["max_ns"]) is int and type(got["med_ns"]) is (int if n % 2 else float)
        assert got["stddev_ns"] == pytest.approx(statistics.stdev(d) if n > 1 else 0.0)


def test_duration_statistics_hold_no_python_int_per_duration():
    """A group of a million kernels: its statistics take an int64 copy of the durations (8 MB; 13 MB
    at the peak), not a sorted list of Python ints (40 MB a million: most of --summary's peak at 10M kernels)."""
    import tracemalloc
    from array import array

    from pyprof.prof.groups import Group

    g = Group("g")
    g.durations = array("q", range(10**6, 0, -1))
    g.time, g.count = sum(g.durations), len(g.durations)
    tracemalloc.start()
    try:
        stats = g.stats()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (stats["min_ns"], stats["max_ns"], stats["med_ns"]) == (1, 10**6, 500000.5)
    assert peak < 20 * 2**20, peak


def test_by_kernel_keeps_template_instantiations_apart():
    rows = rep("gpt", "kernel")["rows"]
    short = {r["kShortName"] for r in trace_records("gpt")}
    assert len(rows) > len(short)
    copies = [r["group"] for r in rows if "elementwise_kernel<" in r["group"]]
    assert len({kernel_label(g).split("<")[0] for g in copies}) < len(copies)  # one name, several instantiations


def test_by_shape_is_torch_profiler_s_input_shapes():
    rows = {r["group"]: r for r in rep("gpt", "op,shape")["rows"]}
    qkv = rows["linear [4,128,256],[768,256],[768]"]
    assert (qkv["op"], qkv["shape"]) == ("linear", "[4,128,256],[768,256],[768]")
    # 2 blocks x (forward: cast + GEMM kernels; backward: data and weight GEMMs, bias reduce, casts)
    assert qkv["count"] == sum(1 for r in trace_records("gpt") if r["op"] == "linear"
                               and input_shapes(r) == "[4,128,256],[768,256],[768]")
    assert rows["AdamW.step -"]["shape"] == "-"  # its marker has no tensors, only the parameter summary
    assert {r["shape"] for r in rep("gpt", "shape")["rows"]} >= {"[4,128,256],[768,256],[768]"}


def test_input_shapes_fall_back_to_pytorch_s_sizes():
    rec = {"dir": "fprop", "marker": None, "torchOps": [{"name": "aten::mm", "sizes": [[64, 32], [32, 16]]}]}
    assert input_shapes(rec) == "[64,32],[32,16]"
    assert input_shapes({"dir": "fprop", "marker": None, "torchOps": []}) == "-"


def test_combined_keys_in_csv_and_text(tmp_path):
    path = write_dict(tmp_path, "gpt")
    rc, out, _ = prof("--summary", "--csv", "--by", "op,shape", "--top", "2", path)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rc == 0 and list(rows[0])[:3] == ["op", "shape", "time_ns"]
    assert rows[0]["op"] == "AdamW.step" and rows[0]["shape"] == "-"
    rc, out, _ = prof("--summary", "--by", "kernel", "--top", "3", "-w", "200", path)
    table = out.split("\n\n")[1].splitlines()
    assert table[0].split()[:9] == ["Kernel", "Time", "%Time", "Count", "Avg", "Med", "Min", "Max", "StdDev"]
    # No void, no namespaces; cut in the middle: the end tells instantiations apart.
    assert table[1].startswith("reduce_kernel<(int)128, (int)4, ReduceO\u2026unsigned int, BFloat16, (int)4, (int)8>> ")


def test_kernel_label():
    assert kernel_label("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(T3)") == \
        "reduce_kernel<512, 1, ReduceOp<float>>"
    assert kernel_label("void (anonymous namespace)::softmax_warp_forward<float, 8, false>(T2 *, const T1 *, int)") \
        == "softmax_warp_forward<float, 8, false>"
    assert kernel_label("nvjet_sm90_tst_32x64_64x16_4x2_h_bz_NNN") == "nvjet_sm90_tst_32x64_64x16_4x2_h_bz_NNN"




@pytest.mark.parametrize("view", [["--summary"], ["--diff", "BASE", "BASE"], ["--modules"]])
def test_view_tables_into_a_pipe_cut_no_name_and_fit_w_when_given(tmp_path, view):
    """A view knows all its names before its first row: into a pipe (no width to fit) its name
    column is as wide as the longest; with -w the table fits and long names end in '…'."""
    path = write_dict(tmp_path, "gpt")
    args = [path if a == "BASE" else a for a in view] + ([] if view == ["--modules"] else ["--by", "kernel"])
    args += [] if view[0] == "--diff" else [path]  # --diff takes its two files itself
    if view == ["--modules"]:
        tree = json.loads(prof(*args, "--json")[1])["rows"]
        names = {"  " * r["depth"] + r["module"].rsplit(".", 1)[-1] for r in tree}
    else:
        names = {kernel_label(r["kLongName"]) for r in trace_records("gpt")}
    rc, out, _ = prof(*args)
    header = next(line for line in out.splitlines() if line.startswith(("Kernel ", "Module ")))
    second = header.index(header.split()[1])  # where the name column ends
    start = modules.TEXT_COLUMNS[0].width if view == ["--modules"] else GROUP_WIDTH  # never narrower than that
    assert rc == 0 and "\u2026" not in out and second == max(start, *map(len, names)) + 1
    assert all(any(line.startswith(n.ljust(second)) for line in out.splitlines()) for n in names)  # all whole
    rc, out, _ = prof("-w", "150", *args)
    table = out.split("\n\n")[1] if view == ["--summary"] else out
    assert rc == 0 and all(len(line) <= 150 for line in table.splitlines())
    assert ("\u2026" in table) == (max(map(len, names)) > 150 - (len(header) - second))


def test_optimizer_steps_are_their_own_direction(tmp_path):
    """SGD.step and AdamW.step kernels are neither forward nor backward work: dir optim."""
    for name, step, n in (("lenet", "SGD.step", 3), ("gpt", "AdamW.step", 2), ("resnet", "SGD.step", 5)):
        recs = trace_records(name)
        assert {r["dir"] for r in recs if r["op"] == step} == {"optim"} and \
            sum(r["dir"] == "optim" for r in recs) == n
    rc, out, _ = prof("--summary", "--by", "dir", "--csv", write_dict(tmp_path, "gpt"))
    rows = {r["dir"]: r for r in csv.DictReader(io.StringIO(out))}
    assert set(rows) == {"fprop", "bprop", "optim"} and rows["optim"]["time_ns"] == "66785"
