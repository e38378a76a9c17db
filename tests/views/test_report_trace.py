"""--trace: the Trace Event file of every real capture in the repository passes the format's
conformance check (trace_format.py), with one slice per kernel and one arrow per launch; large
traces split into files that each pass it; the format's traps (overlap on a track, big ids,
epoch timestamps) are avoided."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from captures import unpacked
from pyprof.prof.io.reader import numbered
from pyprof.prof.report.trace import TraceWriter, part_path
from pyprof.prof.scan import feed
from pyprof.prof.warnings_tally import Tally
from test_views_common import ROOT, prof, trace_records, write_dict
from trace_format import load, problems

CAPTURES = sorted(str(p.relative_to(ROOT)) for pattern in ("examples/*.sqlite*", "tests/data/**/*.sqlite*")
                  for p in Path(ROOT).glob(pattern))


def traced(source, path: str, max_events: int = 2_000_000) -> list[str]:
    """Write the trace of `source` (a path, or (number, record) pairs) to `path`; its files."""
    writer = TraceWriter(path, max_events)
    tally = Tally()
    feed(numbered(source, tally) if isinstance(source, str) else source, tally, [writer])
    return writer.close()


def phases(events: list[dict], ph: str, cat: str | None = None) -> list[dict]:
    return [e for e in events if e["ph"] == ph and (cat is None or e.get("cat") == cat)]


def test_captures_are_all_here():
    """The glob finds the captures (45 when this test was written; more may come)."""
    assert len(CAPTURES) >= 45 and "examples/gpt.sqlite" in CAPTURES and "tests/data/ddp_0.sqlite.xz" in CAPTURES


@pytest.mark.parametrize("capture", CAPTURES)
def test_every_capture_conforms(capture, tmp_path):
    src = Path(ROOT) / capture
    db = unpacked(src, tmp_path) if capture.endswith(".xz") else src
    recs = [r for _, r in numbered(str(db), Tally())]
    (path,) = traced(str(db), str(tmp_path / "t.json.gz"))
    trace = load(path)
    assert problems(trace) == []
    events = trace["traceEvents"]
    assert len(phases(events, "X", "kernel")) == sum(r.get("kind", "kernel") == "kernel" for r in recs)
    launched = sum(isinstance(r.get("launch"), dict) for r in recs)
    assert len(phases(events, "X", "launch")) == len(phases(events, "s", "launch")) == launched


@pytest.mark.parametrize("job", ["ddp", "fsdp"])
def test_two_ranks_one_process_each(job, tmp_path):
    import subprocess
    import sys

    for rank in (0, 1):
        unpacked(Path(ROOT) / "tests" / "data" / f"{job}_{rank}.sqlite.xz", tmp_path)
    records = tmp_path / f"{job}.dict"
    subprocess.run([sys.executable, "-m", "pyprof.parse", str(tmp_path), "-o", str(records)], check=True,
                   capture_output=True, cwd=ROOT)
    status, out, err = prof("--trace", str(tmp_path / "t.json.gz"), str(records))
    assert status == 0 and out == ""
    assert err.startswith(f"pyprof.prof: trace written to {tmp_path / 't.json.gz'} (1 file;")
    trace = load(str(tmp_path / "t.json.gz"))
    assert problems(trace) == []
    names = {e["pid"]: e["args"]["name"] for e in phases(trace["traceEvents"], "M") if e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    # Epoch nanoseconds (19 digits) are kept exact: relative to otherData.origin_ns.
    first = json.loads(records.read_text().splitlines()[0])
    origin = trace["otherData"]["origin_ns"]
    kernel = phases(trace["traceEvents"], "X", "kernel")[0]
    assert round(kernel["ts"] * 1000) + origin == first["kStart"] and first["kStart"] > 10 ** 18


def test_backward_arrows_and_counters(tmp_path):
    (path,) = traced(str(Path(ROOT) / "examples/gpt.sqlite"), str(tmp_path / "gpt.json"))
    events = load(path)["traceEvents"]
    recs = trace_records("gpt")
    backward = phases(events, "f", "backward")
    # Every bprop kernel whose forward op's seq has a forward kernel gets an arrow from it.
    seqs = {r["seqId"] for r in recs if r["dir"] == "fprop" and isinstance(r.get("seqId"), int)}
    assert len(backward) == sum(r["dir"] == "bprop" and (r.get("fwd") or {}).get("seq") in seqs for r in recs) == 83
    # One op slice per op call (its first kernel has subSeqId 0), enclosing its launches.
    calls = phases(events, "X", "op")
    assert len(calls) == sum(r["subSeqId"] == 0 and bool(r["op"]) for r in recs) == 130
    assert (calls[0]["name"], calls[0]["args"]) == ("embedding", {"module": "tok", "site": "/work/main/examples/gpt.py:54"})
    assert {c["name"] for c in calls if c["name"].endswith(" backward")} >= {"linear backward", "layer_norm backward"}
    counters = phases(events, "C")
    assert counters and {e["name"] for e in counters} == {"GPU 0 achieved"}
    assert max(e["args"]["TFLOP/s"] for e in counters) > 0 and counters[-1]["args"] == {"TFLOP/s": 0, "GB/s": 0}


def test_split_into_files_that_each_open(tmp_path):
    paths = traced(str(Path(ROOT) / "examples/gpt.sqlite"), str(tmp_path / "gpt.json.gz"), max_events=200)
    assert paths == [part_path(str(tmp_path / "gpt.json.gz"), n) for n in range(1, len(paths) + 1)]
    assert len(paths) == 4 and paths[1] == str(tmp_path / "gpt.2.json.gz")
    kernels = 0
    for p in paths:
        trace = load(p)
        assert problems(trace) == []
        events = trace["traceEvents"]
        assert phases(events, "M")[0]["args"] == {"name": "pyprof"}  # each file names its tracks
        kernels += len(phases(events, "X", "kernel"))
    assert kernels == 139


def test_overlapping_kernels_go_on_lanes(tmp_path):
    """Two kernels of one stream that overlap (as a broken or merged capture may have): the second
    gets a lane of its own; a third after both goes back to the first lane."""
    base = {"kind": "kernel", "kShortName": "k", "device": 0, "stream": 7, "rank": 4_000_000_000}
    recs = [dict(base, kStart=0, kEnd=100, kDuration=100), dict(base, kStart=50, kEnd=150, kDuration=100),
            dict(base, kStart=150, kEnd=160, kDuration=10)]
    (path,) = traced(str(write_dict(tmp_path, "lanes", recs)), str(tmp_path / "t.json"))
    trace = load(path)
    assert problems(trace) == []
    events = trace["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in phases(events, "M") if e["name"] == "thread_name"}
    assert sorted(lanes.values()) == ["GPU 0 stream 7", "GPU 0 stream 7 (2)"]
    assert [lanes[e["tid"]] for e in phases(events, "X")] == ["GPU 0 stream 7", "GPU 0 stream 7 (2)", "GPU 0 stream 7"]
    assert {e["pid"] for e in events} == {0}  # rank 4e9 is named, not used as the pid
    assert [e["args"]["name"] for e in phases(events, "M") if e["name"] == "process_name"] == ["rank 4000000000"]


def test_checker_catches_what_viewers_trip_on():
    """The conformance check itself fails on each trap."""
    x = {"ph": "X", "name": "k", "pid": 0, "tid": 1, "dur": 2}
    assert problems({"traceEvents": [dict(x, ts=0), dict(x, ts=1)]}) == \
        ["track (0, 1): event 1 overlaps event 0 without nesting"]
    assert problems({"traceEvents": [dict(x, ts=0), dict(x, ts=0.5, dur=1)]}) == []  # nested
    assert problems({"traceEvents": [dict(x, ts=0, tid=2 ** 32)]}) == ["event 0: tid 4294967296 is no integer in [0, 2^32)"]
    assert problems({"traceEvents": [{"ph": "s", "name": "a", "cat": "c", "id": 1, "pid": 0, "tid": 1, "ts": 0}]}) == \
        ["flow ('c', 1): 1 starts and 0 finishes"]


def test_empty_input_and_bad_file(tmp_path):
    empty = tmp_path / "empty.dict"
    empty.write_text("")
    status, _, err = prof("--trace", str(tmp_path / "t.json"), str(empty))
    assert status == 0 and load(str(tmp_path / "t.json"))["traceEvents"] == []
    status, _, err = prof("--trace", str(empty), str(empty))
    assert status == 2 and err == f"pyprof.prof: error: {empty}: --trace names the input {empty}; give another file name\n"
    status, _, err = prof("--trace", str(tmp_path / "no" / "t.json"), str(Path(ROOT) / "examples/lenet.sqlite"))
    assert status == 10 and err == f"pyprof.prof: error: {tmp_path / 'no' / 't.json'}: cannot write (No such file or directory)\n"


def test_a_run_that_fails_leaves_no_trace_or_report_file(tmp_path):
    """--strict stops at a malformed line after some records (status 7): no file under the
    trace's or the report's name, and no hidden part left behind; with no failure, only the
    named files."""
    good = write_dict(tmp_path, "lenet")
    bad = tmp_path / "bad.dict"
    bad.write_text(Path(good).read_text() + "not a record\n")
    for flag, name in (("--trace", "t.json"), ("--html", "r.html")):
        out = tmp_path / "out" / name
        out.parent.mkdir(exist_ok=True)
        status, _, _ = prof("--strict", flag, str(out), str(bad))
        assert status == 7 and list(out.parent.iterdir()) == []
        status, _, _ = prof(flag, str(out), good)
        assert status == 0 and [p.name for p in out.parent.iterdir()] == [name]
        out.unlink()


def test_parts_end_where_a_step_begins(tmp_path):
    """Four training steps (gpt.sqlite's step, ended by its AdamW.step kernels, repeated later in
    time): with files of a quarter of the whole trace's events (a step's, its metadata and
    counters included), each file holds one whole step, not a step cut where the count ran out."""
    import copy

    step = [r for _, r in numbered(str(Path(ROOT) / "examples/gpt.sqlite"), Tally())]
    span = max(r["kEnd"] for r in step) - min(r["launch"]["start"] for r in step) + 1000
    records = []
    for k in range(4):
        for r in step:
            r = copy.deepcopy(r)
            r["kStart"], r["kEnd"] = r["kStart"] + k * span, r["kEnd"] + k * span
            r["launch"]["start"] += k * span
            records.append(r)
    (whole,) = traced(list(enumerate(records, 1)), str(tmp_path / "whole.json"))
    quarter = len(load(whole)["traceEvents"]) // 4
    paths = traced(list(enumerate(records, 1)), str(tmp_path / "steps.json"), max_events=quarter)
    assert len(paths) == 4
    for p in paths:
        trace = load(p)
        assert problems(trace) == []
        kernels = sorted(phases(trace["traceEvents"], "X", "kernel"), key=lambda e: e["ts"])
        assert [e["name"] for e in kernels] == [r["kShortName"] for r in step]
