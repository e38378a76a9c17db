"""A conformance check of Trace Event format files (the JSON Perfetto and chrome://tracing read:
docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): every event's
required fields and their types, balanced or complete slices that never overlap on a track
without nesting, ids below 2^32, flows whose both ends are there and bound to a slice. No tests
here: test_report_trace.py runs it."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

PHASES = set("BEXiICbneNODsftMPRcv(")  # every phase of the format
ID_LIMIT = 2 ** 32


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def load(path: str) -> dict:
    """The trace at `path` (gzip or plain), strict JSON (NaN and Infinity rejected)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.loads(f.read(), parse_constant=_reject_constant)


def _ns(us: float) -> int:
    """A timestamp in µs as the viewers keep it: integer nanoseconds."""
    return round(us * 1000)


def problems(trace: dict) -> list[str]:
    """What is wrong with `trace` (a loaded JSON object format file); empty when nothing is."""
    out: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    slices: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)   # track -> (start, end, index)
    open_b: dict[tuple, list[int]] = defaultdict(list)
    flows: dict[tuple, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for i, ev in enumerate(events):
        where = f"event {i}"
        if not isinstance(ev, dict):
            out.append(f"{where}: not an object")
            continue
        ph = ev.get("ph")
        if ph not in PHASES:
            out.append(f"{where}: phase {ph!r}")
            continue
        if not isinstance(ev.get("name"), str):
            out.append(f"{where}: name {ev.get('name')!r} is no string")
        for key in ("pid", "tid"):
            v = ev.get(key)
            if type(v) is not int or not 0 <= v < ID_LIMIT:
                out.append(f"{where}: {key} {v!r} is no integer in [0, 2^32)")
        if "args" in ev and not isinstance(ev["args"], dict):
            out.append(f"{where}: args is no object")
        if ph == "M":
            if ev.get("name") in ("process_name", "thread_name") and not isinstance(ev.get("args", {}).get("name"), str):
                out.append(f"{where}: {ev['name']} without args.name")
            continue
        ts = ev.get("ts")
        if type(ts) not in (int, float):
            out.append(f"{where}: ts {ts!r} is no number")
            continue
        track = (ev.get("pid"), ev.get("tid"))
        if ph == "X":
            dur = ev.get("dur")
            if type(dur) not in (int, float) or dur < 0:
                out.append(f"{where}: dur {dur!r} is no number >= 0")
                continue
            slices[track].append((_ns(ts), _ns(ts) + _ns(dur), i))
        elif ph == "B":
            open_b[track].append(_ns(ts))
        elif ph == "E":
            if not open_b[track]:
                out.append(f"{where}: E without B on track {track}")
            else:
                slices[track].append((open_b[track].pop(), _ns(ts), i))
        elif ph == "C":
            if not isinstance(ev.get("args"), dict) or not ev["args"] or \
                    not all(type(v) in (int, float) for v in ev["args"].values()):
                out.append(f"{where}: counter args are not numbers")
        elif ph in "sft":
            if "id" not in ev or not isinstance(ev.get("cat"), str):
                out.append(f"{where}: flow without id or cat")
                continue
            flows[(ev["cat"], ev["id"])][ph].append((track, _ns(ts), i))
    for track, stack in open_b.items():
        if stack:
            out.append(f"track {track}: {len(stack)} B without E")
    for track, sl in slices.items():
        sl.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[tuple[int, int]] = []
        for start, end, i in sl:
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1][0]:
                out.append(f"track {track}: event {i} overlaps event {open_ends[-1][1]} without nesting")
            open_ends.append((end, i))
    for key, ends in flows.items():
        if len(ends.get("s", [])) != 1 or len(ends.get("f", [])) != 1:
            out.append(f"flow {key}: {len(ends.get('s', []))} starts and {len(ends.get('f', []))} finishes")
            continue
        (src, s_ts, si), (dst, f_ts, fi) = ends["s"][0], ends["f"][0]
        for track, ts, i in ((src, s_ts, si), (dst, f_ts, fi)):
            if not any(a <= ts <= b for a, b, _ in slices.get(track, ())):
                out.append(f"flow {key}: event {i} at {ts} ns is in no slice of track {track}")
        if f_ts < s_ts:
            out.append(f"flow {key}: ends before it starts")
    return out
