"""Each advice rule: a profile that triggers it (with its evidence) and one that does not."""
from __future__ import annotations

from pyprof.prof.views.summary import collect, report
from pyprof.prof.warnings_tally import Tally
from test_views_common import numbered, trace_records


def advice(recs):
    r = report(collect(numbered(recs), Tally()))
    return {a["kind"]: a for a in r["advice"]}, r["notes"]


def test_fp32_matmul_triggers_on_lenet():
    adv, _ = advice(trace_records("lenet"))
    a = adv["fp32-matmul"]
    assert a["evidence"]["kernels"] == 14 and a["evidence"]["time_ns"] == 45952
    assert "allow_tf32" in a["text"] and "42.1% of GPU time" in a["text"]


def test_fp32_matmul_not_on_gpt():
    adv, _ = advice(trace_records("gpt"))
    assert "fp32-matmul" not in adv


def test_alignment_triggers_on_the_zoo():
    a = advice(trace_records("zoo"))[0]["alignment"]
    assert a["evidence"]["kernels"] == 4
    assert "mm M=1000,N=1000,K=999 float16" in a["evidence"]["examples"]
    assert "conv2d C=3,K=64 bfloat16" in a["evidence"]["examples"]


def test_alignment_not_on_gpt():
    assert "alignment" not in advice(trace_records("gpt"))[0]


def test_launch_bound_triggers_on_gpt():
    a = advice(trace_records("gpt"))[0]["launch-bound"]
    assert a["evidence"]["tiny_kernels"] == 135 and a["evidence"]["kernels"] == 139
    assert round(a["evidence"]["busy_pct"], 2) == 3.47 and "CUDA graphs" in a["text"]


def test_launch_bound_not_when_the_gpu_is_busy():
    # The same kernels packed back to back: busy 100%, so not launch-bound.
    recs, t = [], 0
    for r in trace_records("gpt"):
        r = dict(r, kStart=t, kEnd=t + r["kDuration"])
        t = r["kEnd"]
        recs.append(r)
    adv, _ = advice(recs)
    assert "launch-bound" not in adv


def test_layout_conversions_trigger_on_the_zoo():
    a = advice(trace_records("zoo"))[0]["layout"]
    assert a["evidence"]["kernels"] == 38 and "channels_last" in a["text"]


def test_layout_not_on_gpt():
    assert "layout" not in advice(trace_records("gpt"))[0]


def _copy(kind, nbytes, start):
    return {"v": 1, "kind": "memcpy", "kShortName": f"memcpy {kind}", "kDuration": 5000, "kStart": start,
            "kEnd": start + 5000, "device": 0, "stream": 7, "pid": 1, "tid": 1, "correlationId": 9,
            "launch": None, "bytes": nbytes, "copyKind": kind, "dir": "fprop", "op": "to", "mod": "Tensor"}


def test_host_copies_trigger():
    recs = trace_records("lenet") + [_copy("HtoD", 4096, 10**9), _copy("DtoH", 4, 10**9 + 10**6)]
    adv, notes = advice(recs)
    a = adv["host-copies"]
    assert a["evidence"] == {"copies": 2, "bytes": 4100, "time_ns": 10000, "kinds": {"HtoD": 1, "DtoH": 1}}
    assert notes == []


def test_host_copies_absent_says_why():
    adv, notes = advice(trace_records("lenet"))
    assert "host-copies" not in adv
    assert len(notes) == 1 and "--memcpy" in notes[0]


def test_device_copies_only_no_advice_no_note():
    recs = trace_records("lenet") + [_copy("DtoD", 4096, 10**9)]
    adv, notes = advice(recs)
    assert "host-copies" not in adv and notes == []


def test_copies_are_not_kernels():
    r = report(collect(numbered(trace_records("lenet") + [_copy("HtoD", 8, 10**9)]), Tally()))
    assert r["header"]["kernels"] == 44 and r["header"]["copies"] == 1 and r["header"]["copy_ns"] == 5000
