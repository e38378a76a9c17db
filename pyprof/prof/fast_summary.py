"""`--summary` on a Parquet record store from columns: the memoized analysis (memo.py) over
column-wise inputs (columnar.py) names each record's node (its content and unguarded Facts);
what the summary adds up is then added per node and per group with numpy, batch by batch, in
the order the record path adds it where order matters (float sums, first appearances), so the
Profile and the warnings are those of the record path exactly. Nothing is kept per record past
its batch: memory grows with distinct nodes and groups (and each group's durations, which the
record path keeps too), not with records.

It applies to --summary alone (no other view in the run), without filters, --by call or --costs,
on a record store; any record the memo is not exact for (memo.NotMemoizable) sends the whole run
back to the record path, before anything is written.
"""
from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

import numpy as np

from ..store import read as store
from . import filters
from .groups import Group
from .intervals import Timeline
from .io.columnar import BATCH, Inputs
from .pricing import beyond_peak
from .pricing.memo import NotMemoizable, Recorder
from .io.reader import newer
from .views import summary
from .views.advice import TINY_NS
from .warnings_tally import Tally

_EXACT = float(1 << 53)  # integers below it are exact as float64


def applies(args: argparse.Namespace, views: list[ModuleType]) -> bool:
    """Whether the run is --summary alone, unfiltered, not by call, on a record store."""
    return (views == [summary] and filters.build(args) is None and "call" not in args.by.split(",")
            and not args.costs and store.is_store(args.file))


def profile(args: argparse.Namespace, views: list[ModuleType]) -> tuple[summary.Profile, Tally] | None:
    """The Profile and Tally of the run, as the record path makes them; None where this path does
    not apply (applies()) or is not exact for the input (memo.NotMemoizable)."""
    if not applies(args, views):
        return None
    try:
        return fill(args.file, args.by)
    except NotMemoizable:
        return None


def fill(path: str, by: str, batch: int = BATCH) -> tuple[summary.Profile, Tally]:
    """Profile (grouped `by`) and Tally of the store `path`, read `batch` records at a time;
    NotMemoizable where not exact."""
    inputs = Inputs()
    total = _Aggregate(inputs.memo.nodes, by)
    for records, node, _ in inputs.run(path, batch):
        total.add(node, *[records.column(t).to_numpy() for t in ("kDuration", "kStart", "kEnd")])
    return total.profile()


def _grown(a: np.ndarray, n: int, fill: Any) -> np.ndarray:
    """`a` with room for `n` values (at least doubled when it grows), the new ones `fill`."""
    return a if len(a) >= n else np.concatenate((a, np.full(max(n, 2 * len(a)) - len(a), fill, a.dtype)))


class _Aggregate:
    """What Profile.add would add up, per node (its records' count, time, first record ...) and
    per group, batch by batch (add), made into the Profile at the end (profile)."""

    # Arrays indexed by node, and their value before it is met: what its Facts say (a kernel
    # node's), then what is added up.
    _PER_NODE = {"kernel": False, "tc": False, "simt": False, "tc_group": False, "has_call": False,
                 "guard_flops": np.nan, "guard_peak": np.nan, "flops": np.nan, "peak": np.nan,
                 "bytes": np.nan, "gbps": np.nan, "device": -1, "group": -1,
                 "count": 0, "time": 0, "first": -1, "held": 0, "first_held": -1, "tiny": 0, "over": 0,
                 "highest": -np.inf}

    def __init__(self, nodes: list, by: str) -> None:
        self.nodes = nodes
        self.prof = summary.Profile(by)
        self.records = 0
        self.keys: list = []        # group number -> its key
        self.numbers: dict = {}     # and back
        self.devices: dict = {}     # device -> its number
        self.busy: list[_Busy] = []
        for name, v in self._PER_NODE.items():
            setattr(self, name, np.zeros(0, np.float64 if isinstance(v, float) else type(v) if isinstance(v, bool)
                                     else np.int64))

    def add(self, node: np.ndarray, dur: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Add a batch: per record its node, duration, start and end."""
        if not len(node):
            return
        if np.abs(dur).max() >= _EXACT:
            raise NotMemoizable("a duration beyond 2**53 ns")
        base, self.records = self.records, self.records + len(node)
        for name, v in self._PER_NODE.items():
            setattr(self, name, _grown(getattr(self, name), len(self.nodes), v))
        self._meet(node, base)
        kernel = self.kernel[node]
        durf = dur.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            # beyond_peak.guard's comparison, exactly
            held = (dur > 0) & (self.guard_flops[node] > durf * self.guard_peak[node] * 1e3)
            self._per_node(node, dur, held, kernel, durf, base)
        rows = np.flatnonzero(kernel)
        prof = self.prof
        kd = dur[rows]
        prof.kernels += len(rows)
        prof.gpu_time += int(kd.sum())
        prof.tc_time += int(kd[self.tc[node[rows]]].sum())
        prof.simt_time += int(kd[self.simt[node[rows]]].sum())
        device = self.device[node[rows]]
        for d in np.unique(device).tolist():
            at = rows[device == d]
            self.busy[d].add(start[at], end[at])
        self._groups(node[rows], kd, held[rows])

    def _meet(self, node: np.ndarray, base: int) -> None:
        """Note the nodes first met in this batch, in the order of their first records: their
        first record, what their Facts say, their device's Timeline and group (made in that order,
        as the record path makes them)."""
        uniq, first = np.unique(node, return_index=True)
        new = self.first[uniq] < 0
        uniq, first = uniq[new], first[new]
        prof = self.prof
        for row, i in sorted(zip(first.tolist(), uniq.tolist())):
            self.first[i] = base + row
            n = self.nodes[i]
            if n.rec.get("kind", "kernel") != "kernel":
                continue
            f = n.facts
            self._describe(i, f)
            device, gpu = n.rec.get("device"), n.rec.get("gpu")
            if device not in self.devices:
                self.devices[device] = len(self.busy)
                self.busy.append(_Busy(prof.timelines.devices.setdefault(device, Timeline(prof.timelines.window))))
            self.device[i] = self.devices[device]
            if device not in prof.gpus and isinstance(gpu, dict) and gpu.get("name"):
                prof.gpus[device] = gpu["name"]
            key = prof.groups.key_of(n.rec, f)
            prof.groups.group(key)
            if key not in self.numbers:
                self.numbers[key] = len(self.keys)
                self.keys.append(key)
            self.group[i] = self.numbers[key]

    def _describe(self, i: int, f: Any) -> None:
        """What the Facts `f` of kernel node `i` say to the guard, the evidence and the groups;
        NotMemoizable for a value float64 would not hold exactly."""
        self.kernel[i] = True
        self.tc[i], self.simt[i], self.tc_group[i] = f.tc is True, f.tc is False, bool(f.tc)
        self.has_call[i] = f.call_work is not None
        peak = f.peak_tflops
        if f.flops and peak:
            if abs(f.flops) >= _EXACT:
                raise NotMemoizable("FLOPs beyond 2**53 (inexact as float64)")
            self.guard_flops[i], self.guard_peak[i] = float(f.flops), peak
        if peak is not None and f.flops is not None:
            if peak == 0 or abs(f.flops) >= _EXACT:
                raise NotMemoizable("a peak of 0, or FLOPs beyond 2**53")
            self.flops[i], self.peak[i] = float(f.flops), peak
        if f.peaks is not None and f.peaks.gbps and f.bytes is not None:
            if abs(f.bytes) >= _EXACT:
                raise NotMemoizable("bytes beyond 2**53")
            self.bytes[i], self.gbps[i] = float(f.bytes), f.peaks.gbps

    def _per_node(self, node: np.ndarray, dur: np.ndarray, held: np.ndarray, kernel: np.ndarray,
                  durf: np.ndarray, base: int) -> None:
        """Add the batch to each node's count, time, guarded records, tiny ones, and the %Peak and
        %BW above 100 (columns.py's, on the guarded Facts)."""
        n = len(self.first)
        self.count[:] += np.bincount(node, minlength=n)
        np.add.at(self.time, node, dur)
        self.held[:] += np.bincount(node[held], minlength=n)
        rows = np.flatnonzero(held)
        uniq, at = np.unique(node[rows], return_index=True)
        unset = self.first_held[uniq] < 0
        self.first_held[uniq[unset]] = base + rows[at[unset]]
        self.tiny[:] += np.bincount(node[dur < TINY_NS], minlength=n)
        known = (dur != 0) & ~held
        pp, pb = np.zeros(len(node)), np.zeros(len(node))
        # columns.py's float operations, in its order
        at = known & ~np.isnan(self.flops[node])
        pp[at] = self.flops[node[at]] / durf[at] * 1e-3 / self.peak[node[at]] * 100
        at = known & ~np.isnan(self.bytes[node])
        pb[at] = self.bytes[node[at]] / durf[at] / self.gbps[node[at]] * 100
        over = ((pp > 100) | (pb > 100)) & kernel
        self.over[:] += np.bincount(node[over], minlength=n)
        np.maximum.at(self.highest, node[over], np.maximum(pp, pb)[over])

    def _groups(self, node: np.ndarray, dur: np.ndarray, held: np.ndarray) -> None:
        """Each group's totals as Group.add makes them, kernel by kernel (`node`, `dur` and `held`
        per kernel of the batch, in input order)."""
        gid = self.group[node]
        order = np.argsort(gid, kind="stable")
        present = np.unique(gid)
        bounds = np.searchsorted(gid[order], np.append(present, present[-1] + 1)) if len(present) else []
        groups = self.prof.groups.groups
        for g, lo, hi in zip(present.tolist(), bounds[:-1], bounds[1:]):
            at = order[lo:hi]
            grp = groups[self.keys[g]]
            n, d = node[at], dur[at]
            # A record's class: its node, and whether beyond_peak withheld its FLOPs.
            cls = 2 * n.astype(np.int64) + held[at]
            grp.time += int(d.sum())
            grp.count += len(at)
            grp.durations.frombytes(d.astype(np.int64).tobytes())
            grp.tc_time += int(d[self.tc_group[n]].sum())
            # A kernel whose whole-call work is not its own counts the one the grouping asks
            # for, and each in the group's `both` (Group.add).
            self._work(grp, cls, d, "whole" if grp.whole else "own")
            split = self.has_call[n] | held[at]
            if split.any():
                if grp.both is None:
                    grp.both = (Group(grp.name, grp.keys), Group(grp.name, grp.keys, True))
                for part, work in zip(grp.both, ("own", "call")):
                    part.count += int(split.sum())
                    self._work(part, cls[split], d[split], work)

    def _of(self, c: int, work: str) -> tuple:
        """(FLOPs, bytes) a record of class `c` does: its own, its call's share, or the whole
        grouping's (its call's where it has one)."""
        f = self.nodes[c // 2].facts
        own = (f.flops, f.bytes) if c % 2 == 0 else (None, None)
        if work == "own":
            return own
        call = f.call_work if c % 2 == 0 or f.call_work is not None else (f.flops, f.bytes)
        return call if work == "call" or call is not None else own

    def _work(self, grp: Group, cls: np.ndarray, d: np.ndarray, work: str) -> None:
        """Group._work for records of classes `cls` (node and withheld, as _groups numbers them)
        and durations `d`, each doing _of(class, work), in input order: the capacity is a float
        sum, added in that order (after the batches before)."""
        if not len(cls):
            return
        uniq, inverse = np.unique(cls, return_inverse=True)
        inverse = inverse.reshape(-1)
        times = np.zeros(len(uniq), np.int64)
        np.add.at(times, inverse, d)
        counts = np.bincount(inverse, minlength=len(uniq))
        peak = np.zeros(len(uniq))
        for j, c in enumerate(uniq.tolist()):
            flops, nbytes = self._of(c, work)
            count, time = int(counts[j]), int(times[j])
            p = self.nodes[c // 2].facts.peak_tflops
            if flops is None:
                grp.flops_na += count
            else:
                grp.flops += flops * count
                grp.flops_time += time
                if p:
                    grp.peak_flops += flops * count
                    peak[j] = p
            if nbytes is None:
                grp.bytes_na += count
            else:
                grp.bytes += nbytes * count
                grp.bytes_time += time
        p = peak[inverse]
        terms = d[p != 0].astype(np.float64) * p[p != 0] * 1e3
        grp.capacity = float(np.cumsum(np.concatenate(([grp.capacity], terms)))[-1])

    def profile(self) -> tuple[summary.Profile, Tally]:
        """The Profile and Tally of the records added."""
        prof, tally = self.prof, Tally()
        first = self.first[:len(self.nodes)]
        order = [i for i in np.argsort(first, kind="stable").tolist() if first[i] >= 0]
        self._warnings(tally, order)
        for i in order:
            n, count, time = self.nodes[i], int(self.count[i]), int(self.time[i])
            if not self.kernel[i]:
                prof.copies += count
                prof.copy_time += time
                prof.evidence.copies(n.rec, count, time)
        for i in order:
            n, count, time = self.nodes[i], int(self.count[i]), int(self.time[i])
            if self.kernel[i]:
                f = n.facts
                prof.priced[f.level] = prof.priced.get(f.level, 0) + time
                over = int(self.over[i])
                prof.evidence.kernels(n.rec, f, count, time, int(self.tiny[i]), over,
                                      float(self.highest[i]) if over else None)
        for busy in self.busy:
            busy.finish()
        tally.records = self.records
        return prof, tally

    def _warnings(self, tally: Tally, order: list) -> None:
        """The warnings of every record, each (kind, name) counted first where the record path
        first gives it: the format's (reader.newer), the analysis', then beyond_peak's."""
        said = []
        for i in order:
            n, count = self.nodes[i], int(self.count[i])
            mine = Recorder()
            newer(n.rec, mine)
            for j, (kind, name) in enumerate(mine.said + list(n.warnings)):
                said.append((int(self.first[i]), 0, j, kind, name, count))
            if self.held[i]:
                said.append((int(self.first_held[i]), 1, 0, beyond_peak.REASON, beyond_peak.op_name(n.rec),
                             int(self.held[i])))
        for _, _, _, kind, name, c in sorted(said, key=lambda s: s[:3]):
            tally.warn(kind, name)
            tally.warnings[kind][name] += c - 1


class _Busy:
    """One device's busy time from its kernels' intervals, batch by batch, as intervals.py's
    Timeline adds them record by record. While no kernel starts before a kernel `window` kernels
    earlier started, Timeline's result is the exact union of the intervals: merged intervals are
    final once they end before any later kernel may start (no later than the window-th latest
    start so far), the others are carried into the next batch. A kernel that could be late sends
    the run to the record path (NotMemoizable): Timeline's answer then depends on its window."""

    def __init__(self, tl: Timeline) -> None:
        self.tl = tl
        self.tail = np.zeros(0, np.int64)  # the latest `window` starts, in input order
        self.before = np.iinfo(np.int64).min  # the latest start of those before them
        self.begin = np.zeros(0, np.int64)  # open merged intervals, sorted
        self.end = np.zeros(0, np.int64)

    def add(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Add the intervals [starts, ends) of kernels in input order (empty ones add nothing)."""
        keep = ends > starts
        s, e = starts[keep].astype(np.int64), ends[keep].astype(np.int64)
        if not len(s):
            return
        w, tl = self.tl.window, self.tl
        ext = np.concatenate((self.tail, s))
        reach = np.maximum.accumulate(np.concatenate(([self.before], ext)))
        # ext[p] (p >= w: a kernel of this batch) must start no earlier than every kernel w before it
        if len(ext) > w and (ext[w:] < reach[1:len(ext) - w + 1]).any():
            raise NotMemoizable("a kernel starting before one a window of kernels earlier (intervals.py)")
        bound = int(reach[len(ext) - w + 1]) if len(ext) >= w else None
        if len(ext) > w:
            self.before, self.tail = int(reach[len(ext) - w]), ext[len(ext) - w:]
        else:
            self.tail = ext
        tl.first = int(s.min()) if tl.first is None else min(tl.first, int(s.min()))
        tl.last = int(e.max()) if tl.last is None else max(tl.last, int(e.max()))
        b, e = np.concatenate((self.begin, s)), np.concatenate((self.end, e))
        order = np.argsort(b, kind="stable")
        b, r = b[order], np.maximum.accumulate(e[order])
        new = np.concatenate(([True], b[1:] > r[:-1]))
        begin = b[new]
        end = r[np.append(np.flatnonzero(new)[1:] - 1, len(b) - 1)]
        done = 0 if bound is None else int(np.searchsorted(end, bound))  # those ending before it
        self._finalise(begin[:done], end[:done])
        self.begin, self.end = begin[done:], end[done:]

    def _finalise(self, begin: np.ndarray, end: np.ndarray) -> None:
        """Count merged intervals no later kernel can touch: busy time and the gaps before them."""
        if not len(begin):
            return
        tl = self.tl
        gaps = begin[1:] - end[:-1]
        if tl.frontier is not None:
            gaps = np.concatenate(([int(begin[0]) - tl.frontier], gaps))
        tl.busy += int((end - begin).sum())
        tl.gaps += len(gaps)
        tl.gap_total += int(gaps.sum())
        tl.gap_max = max(tl.gap_max, int(gaps.max(initial=0)))
        tl.frontier = int(end[-1])

    def finish(self) -> None:
        """Count the intervals still open."""
        self._finalise(self.begin, self.end)
        self.begin = self.end = np.zeros(0, np.int64)
