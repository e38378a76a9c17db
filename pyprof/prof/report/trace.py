"""The records as a timeline for Perfetto (ui.perfetto.dev) and chrome://tracing: the Trace Event
format's JSON (docs/views.md, "--trace"), written while the records are read.

One process per rank (pid = the rank's index in order of appearance). Its tracks: one per GPU
device and stream holding the kernels (and memcpy/memset records) as complete slices with their
args; one per CPU thread holding the launch calls, each op call's launches enclosed in a slice
named by its op (`linear`, `linear backward`); counters of achieved TFLOP/s and GB/s per
device. Flow arrows go from each launch call to its kernel and from the first kernel of a
forward op to each kernel of its backward (same `seqId`, as parse joins them).

The format's traps, and what this writer does about them:
- A track must not hold slices that overlap without nesting: a slice that would overlap the
  last one on its track goes on a lane of its own ("stream 7 (2)"), so every track is a
  sequence (records of one stream come in launch order, which is its execution order).
- Thread and process ids are small integers given here, never the trace's own (below 2^32).
- Timestamps are microseconds (floats keep the nanoseconds). A double holds about 16 digits, and
  multi-rank records carry epoch nanoseconds (19 digits): times are written relative to ORIGIN
  before the first record's earliest time, so nanoseconds survive.
- A file that a viewer cannot open is useless: a trace of more than `max_events` events is split
  into files (`out.json.gz`, then `out.2.json.gz`, ...), each complete on its own (its own
  metadata, its own flows: an arrow whose start is in an earlier file is left out). A file ends
  where a training step begins (after an optimizer step's kernels, as --overlap counts steps)
  once it holds half its events, so that each file shows whole steps; at `max_events` it ends
  wherever it is (steps longer than half a file, or no optimizer steps at all).
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Any, TextIO

from ...errors import cannot_write
from ..pricing.analysis import Facts
from ..columns import pct_of_bandwidth, pct_of_peak, tc_text
from ..groups import input_shapes
from ..comms.shares import is_optimizer_step
from ..scan import time_field
from ..io.output import finite

ORIGIN_MARGIN_NS = 1_000_000_000  # records of another rank may start before the first record seen
COUNTER_BUCKETS = 4096           # counter samples per device and file, at most (buckets double in width)
FIRST_BUCKET_NS = 1_000          # counter resolution to begin with
MAX_EVENTS = 2_000_000           # per file: about 400 MB of JSON, what Perfetto's UI opens in seconds


def part_path(path: str, n: int) -> str:
    """The n-th file (1-based) of a trace split in parts: `out.json.gz`, `out.2.json.gz`, ..."""
    if n == 1:
        return path
    for ext in (".json.gz", ".json", ".gz"):
        if path.endswith(ext):
            return f"{path[:-len(ext)]}.{n}{ext}"
    return f"{path}.{n}"


def _open(path: str, gz: bool) -> TextIO:
    return gzip.open(path, "wt", encoding="utf-8", compresslevel=5) if gz else open(path, "w", encoding="utf-8")


class _Lanes:
    """The tracks of one kind of place (a stream, a CPU thread): a slice goes on the first lane
    whose last slice ended by its start, so no track holds overlapping slices."""

    __slots__ = ("ends", "tids")

    def __init__(self) -> None:
        self.ends: list[int] = []
        self.tids: list[int] = []


class TraceWriter:
    """A scan.Sink writing the Trace Event JSON of the records it is fed to `path` (split in
    parts of `max_events` events); close() finishes the last part and returns the paths."""

    needs_facts = True

    def __init__(self, path: str, max_events: int = MAX_EVENTS) -> None:
        self.path = path
        self.max_events = max_events
        self.paths: list[str] = []
        self.partials: list[str] = []  # each part is written under a hidden name, renamed by close()
        self.out: TextIO | None = None
        self.events = 0
        self.origin: int | None = None
        self.pids: dict[Any, int] = {}          # rank -> pid
        self.lanes: dict[tuple, _Lanes] = {}     # (pid, place) -> lanes
        self.meta: list[dict] = []               # process and thread names: repeated in every part
        self.tids = 0
        self.flow = 0
        self.fwd: dict[tuple, tuple] = {}        # (pid, process, seq) -> (part, pid, tid, ts) of its first kernel
        self.counters: dict[tuple, list] = {}    # (pid, device) -> [bucket width ns, {bucket: [flops, bytes]}]
        self.calls: dict[tuple, list | None] = {}  # (pid, tid) -> the op call open on that CPU track
        self.in_step_end: dict[Any, bool] = {}      # rank -> its last kernel was one of an optimizer step

    # -- writing --------------------------------------------------------------------------------
    def _emit(self, ev: dict) -> None:
        if self.out is None:
            self._begin()
        self.out.write(",\n" if self.events else "\n")
        try:
            text = json.dumps(ev, separators=(",", ":"), allow_nan=False)
        except ValueError:  # NaN or Infinity from the record: null, as JSON has neither
            text = json.dumps(finite(ev), separators=(",", ":"))
        self.out.write(text)
        self.events += 1

    def _begin(self) -> None:
        path = part_path(self.path, len(self.paths) + 1)
        folder, name = os.path.split(path)
        partial = os.path.join(folder, f".{name}.partial")
        try:
            self.out = _open(partial, path.endswith(".gz"))
        except OSError as err:
            raise cannot_write(path, err) from None
        self.paths.append(path)
        self.partials.append(partial)
        self.out.write('{"displayTimeUnit":"ns","otherData":{"origin_ns":%d},"traceEvents":[' % (self.origin or 0))
        self.events = 0
        for ev in self.meta:
            self._emit(ev)

    def _end_part(self) -> None:
        for (pid, tid), call in self.calls.items():
            if call is not None:
                self._emit_call(pid, tid, call)
        self.calls = {}
        self._flush_counters()
        self.out.write("\n]}\n")
        self.out.close()
        self.out = None

    def _us(self, ns: int) -> float:
        return (ns - self.origin) / 1000

    # -- tracks ---------------------------------------------------------------------------------
    def _pid(self, rank: Any) -> int:
        pid = self.pids.get(rank)
        if pid is None:
            pid = self.pids[rank] = len(self.pids)
            self._meta({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": "pyprof" if rank is None else f"rank {rank}"}})
            self._meta({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        return pid

    def _meta(self, ev: dict) -> None:
        self.meta.append(ev)
        if self.out is not None:
            self._emit(ev)

    def _tid(self, pid: int, place: tuple, name: str, sort: int, start: int, end: int) -> int:
        """The track of `place` free from `start` on, claimed until `end`."""
        lanes = self.lanes.get((pid, place))
        if lanes is None:
            lanes = self.lanes[(pid, place)] = _Lanes()
        for i, last in enumerate(lanes.ends):
            if last <= start:
                lanes.ends[i] = end
                return lanes.tids[i]
        self.tids += 1
        tid = self.tids
        lanes.ends.append(end)
        lanes.tids.append(tid)
        lane = f" ({len(lanes.tids)})" if len(lanes.tids) > 1 else ""
        self._meta({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name + lane}})
        self._meta({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                    "args": {"sort_index": sort * 1000 + len(lanes.tids)}})
        return tid

    # -- records --------------------------------------------------------------------------------
    def add(self, rec: dict, f: Facts) -> None:
        """Write one record's slices, flows and counter samples."""
        start, end = time_field(rec, "kStart"), time_field(rec, "kEnd")
        hash((rec.get("rank"), rec.get("device"), rec.get("stream"), rec.get("pid"), rec.get("tid")))  # before writing
        launch = rec.get("launch")
        if isinstance(launch, dict):
            l_start, l_dur = time_field(launch, "start"), time_field(launch, "duration")
        else:
            launch = None
        if self.origin is None:
            self.origin = min(start, l_start if launch else start) - ORIGIN_MARGIN_NS
        optimizer = is_optimizer_step(rec)
        step_begins = self.in_step_end.get(rec.get("rank"), False) and not optimizer
        self.in_step_end[rec.get("rank")] = optimizer
        if self.out is not None and (self.events >= self.max_events
                                     or step_begins and self.events >= self.max_events // 2):
            self._end_part()
        pid = self._pid(rec.get("rank"))
        device, stream = rec.get("device"), rec.get("stream")
        kind = str(rec.get("kind", "kernel"))
        gpu_tid = self._tid(pid, ("gpu", device, stream), f"GPU {device} stream {stream}", 0, start, max(start, end))
        name = str(rec.get("kShortName") or kind)
        ts = self._us(start)
        self._emit({"ph": "X", "name": name, "cat": kind, "pid": pid, "tid": gpu_tid, "ts": ts,
                    "dur": max(0, end - start) / 1000, "args": _args(rec, f)})
        if launch:
            cpu_tid = self._tid(pid, ("cpu", rec.get("pid"), rec.get("tid")), f"CPU thread {rec.get('tid')} "
                                f"(process {rec.get('pid')})", 1, l_start, l_start + max(0, l_dur))
            l_ts = self._us(l_start)
            self._emit({"ph": "X", "name": f"{rec.get('op') or kind} (launch)", "cat": "launch", "pid": pid,
                        "tid": cpu_tid, "ts": l_ts, "dur": max(0, l_dur) / 1000,
                        "args": {"api": launch.get("api"), "op": rec.get("op"), "module": rec.get("module"),
                                 "site": rec.get("trace"), "kernel": name, "correlationId": rec.get("correlationId")}})
            self._arrow("launch", pid, cpu_tid, l_ts, gpu_tid, ts)
            self._op_call(rec, pid, cpu_tid, l_start, l_start + max(0, l_dur))
        if kind != "kernel":
            return
        self._backward_arrow(rec, pid, gpu_tid, ts)
        self._count(pid, device, start, end, f)

    def _op_call(self, rec: dict, pid: int, tid: int, start: int, end: int) -> None:
        """Extend the op call open on this thread by one launch, or close it and open the next:
        a call's launches share its op and count up from subSeqId 0 (records.md)."""
        op = rec.get("op")
        name = None if not op else f"{op} backward" if rec.get("dir") == "bprop" else str(op)
        cur = self.calls.get((pid, tid))
        if cur is not None and name == cur[0] and rec.get("subSeqId") not in (0, None):
            cur[3] = end
            return
        if cur is not None:
            self._emit_call(pid, tid, cur)
        self.calls[(pid, tid)] = [name, start, start, end, rec.get("module"), rec.get("trace")] if name else None

    def _emit_call(self, pid: int, tid: int, call: list) -> None:
        """One op call on its CPU thread: from its first launch's start to its last launch's end
        (the op range itself is not in the records), enclosing the launch slices."""
        name, start, _, end, module, site = call
        self._emit({"ph": "X", "name": name, "cat": "op", "pid": pid, "tid": tid, "ts": self._us(start),
                    "dur": (end - start) / 1000, "args": {k: v for k, v in (("module", module), ("site", site)) if v}})

    def _arrow(self, cat: str, pid: int, src_tid: int, src_ts: float, dst_tid: int, dst_ts: float) -> None:
        self.flow += 1
        self._emit({"ph": "s", "name": cat, "cat": cat, "id": self.flow, "pid": pid, "tid": src_tid, "ts": src_ts})
        self._emit({"ph": "f", "bp": "e", "name": cat, "cat": cat, "id": self.flow, "pid": pid, "tid": dst_tid,
                    "ts": dst_ts})

    def _backward_arrow(self, rec: dict, pid: int, tid: int, ts: float) -> None:
        fwd = rec.get("fwd")
        part = len(self.paths)
        if rec.get("dir") == "bprop":
            seq = fwd.get("seq") if isinstance(fwd, dict) else None
            src = self.fwd.get((pid, rec.get("pid"), seq)) if type(seq) is int else None
            if src is not None and src[0] == part:
                self._arrow("backward", pid, src[1], src[2], tid, ts)
        elif type(rec.get("seqId")) is int:
            self.fwd.setdefault((pid, rec.get("pid"), rec["seqId"]), (part, tid, ts))

    def _count(self, pid: int, device: Any, start: int, end: int, f: Facts) -> None:
        if not f.flops and not f.bytes or end <= start:
            return
        c = self.counters.get((pid, device))
        if c is None:
            c = self.counters[(pid, device)] = [FIRST_BUCKET_NS, {}]
        b = c[1].setdefault(start // c[0], [0, 0])
        b[0] += f.flops or 0
        b[1] += f.bytes or 0
        if len(c[1]) > COUNTER_BUCKETS:
            c[0] *= 2
            merged: dict = {}
            for k, (fl, by) in c[1].items():
                m = merged.setdefault(k // 2, [0, 0])
                m[0] += fl
                m[1] += by
            c[1] = merged

    def _flush_counters(self) -> None:
        """Each device's work per bucket as rates: TFLOP/s and GB/s over the bucket, 0 between."""
        for (pid, device), (width, buckets) in self.counters.items():
            name = f"GPU {device} achieved"
            prev = None
            for k in sorted(buckets):
                if prev is not None and k != prev + 1:  # back to 0 after an empty bucket
                    self._emit({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": self._us((prev + 1) * width),
                                "args": {"TFLOP/s": 0, "GB/s": 0}})
                fl, by = buckets[k]
                self._emit({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": self._us(k * width),
                            "args": {"TFLOP/s": fl / width * 1e-3, "GB/s": by / width}})
                prev = k
            if prev is not None:
                self._emit({"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": self._us((prev + 1) * width),
                            "args": {"TFLOP/s": 0, "GB/s": 0}})
        self.counters = {}

    def close(self) -> list[str]:
        """Finish the last part (an input without records: one file with no events) and give
        every part its name; the paths. Before this, no file under a part's name exists."""
        if self.out is None and not self.paths:
            self.origin = self.origin or 0
            self._begin()
        if self.out is not None:
            self._end_part()
        try:
            for partial, path in zip(self.partials, self.paths):
                os.replace(partial, path)
        except OSError as err:
            raise cannot_write(path, err) from None
        self.partials = []
        return self.paths

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        """A run that failed before close(): its parts are removed, none looks complete."""
        if self.out is not None:
            self.out.close()
            self.out = None
        for partial in self.partials:
            try:
                os.unlink(partial)
            except OSError:
                pass
        self.partials = []


def _args(rec: dict, f: Facts) -> dict:
    """What a kernel slice shows when selected."""
    args = {"op": rec.get("op"), "module": rec.get("module"), "shapes": input_shapes(rec), "site": rec.get("trace"),
            "dir": rec.get("dir"), "kernel": rec.get("kLongName"), "FLOPs": f.flops, "bytes": f.bytes,
            "tc": tc_text(f.tc), "%peak": pct_of_peak(rec, f), "%bw": pct_of_bandwidth(rec, f),
            "grid": rec.get("grid"), "block": rec.get("block"), "correlationId": rec.get("correlationId")}
    if rec.get("rank") is not None:
        args["rank"] = rec.get("rank")
    return {k: v for k, v in args.items() if v is not None}


def remove_stale_parts(path: str, written: int) -> None:
    """Remove the parts beyond `written` of an earlier, longer trace under the same name: they
    would look like this one's."""
    n = written + 1
    while os.path.exists(part_path(path, n)):
        os.remove(part_path(path, n))
        n += 1
