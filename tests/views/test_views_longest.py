"""`--longest N`: the N longest kernels of a capture, longest first, ties in launch order, with
their op, direction, module and input shapes; memcpy/memset records are not kernels."""
from __future__ import annotations

import json

from test_views_common import prof, trace_records, write_dict


def test_the_longest_kernels_of_the_gpt_capture(tmp_path):
    recs = trace_records("gpt")
    kernels = [(r["kDuration"], -i, r) for i, r in enumerate(recs) if r.get("kind", "kernel") == "kernel"]
    expected = [r for _, _, r in sorted(kernels, key=lambda k: k[:2], reverse=True)[:3]]
    rc, out, err = prof("--longest", "3", "--json", write_dict(tmp_path, "gpt"))
    rows = json.loads(out)["rows"]
    assert rc == 0 and [(r["rank"], r["duration_ns"], r["op"], r["dir"]) for r in rows] == \
        [(i, r["kDuration"], r["op"], r["dir"]) for i, r in enumerate(expected, 1)]
    assert rows[0] == {"rank": 1, "duration_ns": 64993, "dir": "optim", "op": "AdamW.step", "module": "-",
                       "shape": "-", "kernel": expected[0]["kLongName"]}


def test_ties_keep_the_earlier_kernel_and_copies_are_not_kernels(tmp_path):
    base = trace_records("lenet")[0]
    recs = [dict(base, kDuration=d, op=f"op{i}") for i, d in enumerate((5, 9, 9, 7, 9))]
    recs.insert(2, dict(base, kind="memcpy", kDuration=100, op="copy"))
    rc, out, _ = prof("--longest", "2", "--csv", write_dict(tmp_path, "ties", recs))
    assert rc == 0 and [line.split(",")[:4] for line in out.splitlines()] == \
        [["rank", "duration_ns", "dir", "op"], ["1", "9", "fprop", "op1"], ["2", "9", "fprop", "op2"]]


def test_a_count_below_one_is_a_usage_error(tmp_path):
    rc, out, err = prof("--longest", "0", write_dict(tmp_path, "lenet"))
    assert (rc, out, err) == (2, "", "pyprof.prof: error: --longest needs a positive number\n")
