"""--modules: self and total GPU time per nn.Module path, rolled up the path."""
from __future__ import annotations

import csv
import io
import json
from collections import Counter

from pyprof.prof.views.modules import KEYS, NO_MODULE
from test_views_common import prof, trace_records, write_dict


def self_times(name):
    t = Counter()
    for r in trace_records(name):
        t[r["module"] or NO_MODULE] += r["kDuration"]
    return t


def test_tree_rolls_self_time_up_the_path(tmp_path):
    rc, out, err = prof("--modules", "--json", write_dict(tmp_path, "gpt"))
    assert (rc, err) == (0, "")
    rows = json.loads(out)["rows"]
    by = {r["module"]: r for r in rows}
    own = self_times("gpt")
    assert {m: r["self_ns"] for m, r in by.items() if r["self_ns"]} == dict(own)
    for m, r in by.items():  # total = own + every module below (the root model: every module's)
        below = sum(t for p, t in own.items() if p == m or p.startswith(m + ".")
                    or (m == "GPT" and p != NO_MODULE))
        assert r["total_ns"] == below
    assert by["blocks"]["self_ns"] == 0 and by["blocks"]["total_ns"] == by["blocks.0"]["total_ns"] + \
        by["blocks.1"]["total_ns"]
    assert sum(r["total_ns"] for r in rows if r["depth"] == 0) == sum(own.values()) == 509607
    # The root model (named by its class) above its children, (no module) beside it; depth-first,
    # parents first, siblings by total time.
    assert [(r["module"], r["depth"]) for r in rows if r["depth"] == 0] == [("GPT", 0), (NO_MODULE, 0)]
    assert by["GPT"]["self_ns"] == own["GPT"] and by["GPT"]["total_ns"] == sum(own.values()) - own[NO_MODULE]
    assert [r["module"] for r in rows][:4] == ["GPT", "blocks", "blocks.0", "blocks.0.fc"] or \
        [r["module"] for r in rows][:3] == ["GPT", "blocks", "blocks.1"]
    assert rows[[r["module"] for r in rows].index("blocks.0") + 1]["depth"] == 3


def test_text_and_csv(tmp_path):
    path = write_dict(tmp_path, "gpt")
    rc, out, _ = prof("--modules", "-w", "90", path)
    lines = out.splitlines()
    assert lines[0].split() == ["Module", "Self", "Total", "%Total", "Kernels"]
    assert lines[1].startswith("GPT ") and lines[2].startswith("  blocks ") and lines[3].startswith("    0 ")
    assert max(map(len, lines)) <= 90
    rc, out, _ = prof("--modules", "--csv", path)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert list(rows[0]) == KEYS and rows[1]["module"] == "blocks" and rows[1]["self_ns"] == "0"


def test_lenet_root_is_above_its_layers_and_two_class_named_roots_stay_side_by_side(tmp_path):
    rc, out, _ = prof("--modules", "--json", write_dict(tmp_path, "lenet"))
    rows = [(r["module"], r["depth"]) for r in json.loads(out)["rows"]]
    assert rows == [("LeNet5", 0), ("conv2", 1), ("conv1", 1), ("fc1", 1), ("fc2", 1), ("fc3", 1), (NO_MODULE, 0)]
    two = tmp_path / "two.dict"  # a model and a loss module both called at top level: whose is which is unknown
    recs = [{"kind": "kernel", "kDuration": d, "module": m} for d, m in ((5, "Net"), (3, "fc"), (2, "MSELoss"))]
    two.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rc, out, _ = prof("--modules", "--json", str(two))
    assert [(r["module"], r["depth"]) for r in json.loads(out)["rows"]] == [("Net", 0), ("fc", 0), ("MSELoss", 0)]


def test_backward_kernels_count_for_their_forward_module(tmp_path):
    rc, out, _ = prof("--modules", "--json", "--op", "linear", write_dict(tmp_path, "gpt"))
    by = {r["module"]: r for r in json.loads(out)["rows"]}
    qkv = [r for r in trace_records("gpt") if r["module"] == "blocks.0.qkv"]
    assert {r["dir"] for r in qkv} == {"fprop", "bprop"}
    assert by["blocks.0.qkv"]["count"] == len(qkv)


def test_one_machine_readable_view_at_a_time():
    rc, out, err = prof("--summary", "--modules", "--json", "x.dict")
    assert (rc, out, err) == (2, "", "pyprof.prof: error: --json writes one view at a time, not --summary and "
                                     "--modules\n")
