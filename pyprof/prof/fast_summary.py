"""`--summary` on a Parquet record store from columns: the memoized analysis (memo.py) over
column-wise inputs (columnar.py) names each record's node (its content and unguarded Facts);
what the summary adds up is then added per node and per group with numpy, in the order the
record path adds it where order matters (float sums, first appearances), so the Profile and the
warnings are those of the record path exactly.

It applies to --summary alone (no other view in the run), without filters, --by call or --costs,
on a record store; any record the memo is not exact for (memo.NotMemoizable) sends the whole run
back to the record path, before anything is written.
"""
from __future__ import annotations

import argparse
from array import array
from types import ModuleType
from typing import Any

import numpy as np

from ..store import read as store
from . import filters
from .groups import Group
from .intervals import Timeline, Timelines
from .io.columnar import Inputs
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


def fill(path: str, by: str) -> tuple[summary.Profile, Tally]:
    """Profile (grouped `by`) and Tally of the store `path`; NotMemoizable where not exact."""
    inputs = Inputs()
    nodes, durs, starts, ends = [], [], [], []
    for batch, node, _ in inputs.run(path):
        nodes.append(node)
        durs.append(batch.column("kDuration").to_numpy())
        starts.append(batch.column("kStart").to_numpy())
        ends.append(batch.column("kEnd").to_numpy())
    def cat(xs: list, t: Any) -> Any:
        return np.concatenate(xs) if xs else np.zeros(0, t)

    return _Aggregate(inputs.memo.nodes, cat(nodes, np.int32), cat(durs, np.int64), cat(starts, np.int64),
                      cat(ends, np.int64)).profile(by)


class _Aggregate:
    """Per-record arrays (node, duration, start, end) added up as Profile.add would."""

    def __init__(self, nodes: list, node: np.ndarray, dur: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.nodes = nodes
        self.facts = [n.facts for n in nodes]
        self.node, self.dur, self.start, self.end = node, dur, start, end
        if np.abs(dur).max(initial=0) >= _EXACT:
            raise NotMemoizable("a duration beyond 2**53 ns")
        self.by_node = np.argsort(node, kind="stable")  # each node's records, in input order
        self.bounds = np.searchsorted(node[self.by_node], np.arange(len(nodes) + 1))
        firsts = np.full(len(nodes), len(node), np.int64)
        used = self.bounds[1:] > self.bounds[:-1]
        firsts[used] = self.by_node[self.bounds[:-1][used]]
        self.first = firsts
        # nodes by their first record: the order the record path first meets each
        self.order = [int(i) for i in np.argsort(firsts, kind="stable") if used[i]]
        self.is_kernel = [n.rec.get("kind", "kernel") == "kernel" for n in nodes]
        self.held = self._guard()

    def rows(self, i: int) -> np.ndarray:
        """The records of node `i`, in input order."""
        return self.by_node[self.bounds[i]:self.bounds[i + 1]]

    def _per_node(self, values: list, dtype: type) -> np.ndarray:
        return np.array(values, dtype) if values else np.zeros(0, dtype)

    def _guard(self) -> np.ndarray:
        """Per record: whether beyond_peak.guard withholds its FLOPs (its comparison, exactly)."""
        flops, peak = [], []
        for f, kernel in zip(self.facts, self.is_kernel):
            p = f.peak_tflops
            if f.flops and p and kernel:
                if abs(f.flops) >= _EXACT:
                    raise NotMemoizable("FLOPs beyond 2**53 (inexact as float64)")
                flops.append(float(f.flops))
                peak.append(p)
            else:
                flops.append(np.nan)
                peak.append(np.nan)
        fl, pk = self._per_node(flops, np.float64)[self.node], self._per_node(peak, np.float64)[self.node]
        with np.errstate(invalid="ignore"):
            return (self.dur > 0) & ~np.isnan(fl) & (fl > self.dur.astype(np.float64) * pk * 1e3)

    def profile(self, by: str) -> tuple[summary.Profile, Tally]:
        prof, tally = summary.Profile(by), Tally()
        self._warnings(tally)
        for i in self.order:
            if not self.is_kernel[i]:
                rows = self.rows(i)
                time = int(self.dur[rows].sum())
                prof.copies += len(rows)
                prof.copy_time += time
                prof.evidence.copies(self.nodes[i].rec, len(rows), time)
        self._kernels(prof)
        tally.records = len(self.node)
        return prof, tally

    def _warnings(self, tally: Tally) -> None:
        """The warnings of every record, each (kind, name) counted first where the record path
        first gives it: the format's (reader.newer), the analysis', then beyond_peak's."""
        said = []
        for i in self.order:
            n, rows = self.nodes[i], self.rows(i)
            mine = Recorder()
            newer(n.rec, mine)
            for j, (kind, name) in enumerate(mine.said + list(n.warnings)):
                said.append((int(self.first[i]), 0, j, kind, name, len(rows)))
            held = rows[self.held[rows]]
            if len(held):
                said.append((int(held[0]), 1, 0, beyond_peak.REASON, beyond_peak.op_name(n.rec), len(held)))
        for _, _, _, kind, name, c in sorted(said, key=lambda s: s[:3]):
            tally.warn(kind, name)
            tally.warnings[kind][name] += c - 1

    def _kernels(self, prof: summary.Profile) -> None:
        kernel = self._per_node(self.is_kernel, bool)[self.node] if len(self.node) else np.zeros(0, bool)
        tc = self._per_node([f.tc is True for f in self.facts], bool)[self.node]
        simt = self._per_node([f.tc is False for f in self.facts], bool)[self.node]
        prof.kernels = int(kernel.sum())
        prof.gpu_time = int(self.dur[kernel].sum())
        prof.tc_time = int(self.dur[kernel & tc].sum())
        prof.simt_time = int(self.dur[kernel & simt].sum())
        rows = np.flatnonzero(kernel)
        self._timelines(prof.timelines, rows)
        group_of = np.full(len(self.nodes), -1, np.int64)
        keys: dict = {}
        for i in self.order:
            if not self.is_kernel[i]:
                continue
            n, f = self.nodes[i], self.facts[i]
            gpu, device = n.rec.get("gpu"), n.rec.get("device")
            if device not in prof.gpus and isinstance(gpu, dict) and gpu.get("name"):
                prof.gpus[device] = gpu["name"]
            key = prof.groups.key_of(n.rec, f)
            prof.groups.group(key)
            group_of[i] = keys.setdefault(key, len(keys))
            self._evidence(prof, i)
        self._groups(prof, group_of[self.node[rows]], rows, list(keys))

    def _timelines(self, timelines: Timelines, rows: np.ndarray) -> None:
        """Each device's busy time from the kernels `rows`: computed from sorted intervals where
        the streaming window of intervals.py finds no kernel late (then it is the exact union),
        else added record by record."""
        numbers: dict = {}
        device_of = self._per_node([numbers.setdefault(n.rec.get("device"), len(numbers)) if k else -1
                                    for n, k in zip(self.nodes, self.is_kernel)], np.int64)[self.node[rows]]
        devices = list(numbers)
        firsts = sorted(range(len(devices)), key=lambda d: int(rows[np.argmax(device_of == d)]))
        for d in firsts:
            at = rows[device_of == d]
            tl = timelines.devices[devices[d]] = Timeline(timelines.window)
            if not _union(tl, self.start[at], self.end[at]):
                for s, e in zip(self.start[at].tolist(), self.end[at].tolist()):
                    tl.add(s, e)

    def _evidence(self, prof: summary.Profile, i: int) -> None:
        """Evidence and the priced share of node `i`: %Peak and %BW per record, as columns.py
        computes them on the guarded Facts."""
        n, f, rows = self.nodes[i], self.facts[i], self.rows(i)
        dur = self.dur[rows]
        time = int(dur.sum())
        prof.priced[f.level] = prof.priced.get(f.level, 0) + time
        durf = dur.astype(np.float64)
        known = (dur != 0) & ~self.held[rows]
        pp = np.zeros(len(rows))
        pb = np.zeros(len(rows))
        with np.errstate(invalid="ignore", divide="ignore"):
            peak = f.peak_tflops
            if peak is not None and f.flops is not None:
                if peak == 0 or abs(f.flops) >= _EXACT:
                    raise NotMemoizable("a peak of 0, or FLOPs beyond 2**53")
                pp[known] = float(f.flops) / durf[known] * 1e-3 / peak * 100
            if f.peaks is not None and f.peaks.gbps and f.bytes is not None:
                if abs(f.bytes) >= _EXACT:
                    raise NotMemoizable("bytes beyond 2**53")
                pb[known] = float(f.bytes) / durf[known] / f.peaks.gbps * 100
        over = (pp > 100) | (pb > 100)
        highest = float(np.maximum(pp, pb)[over].max()) if over.any() else None
        prof.evidence.kernels(n.rec, f, len(rows), time, int((dur < TINY_NS).sum()), int(over.sum()), highest)

    def _groups(self, prof: summary.Profile, gid: np.ndarray, rows: np.ndarray, keys: list) -> None:
        """Each group's totals as Group.add makes them, record by record (`rows`: the kernels)."""
        tc = self._per_node([bool(f.tc) for f in self.facts], bool)
        # A record's class: its node, and whether beyond_peak withheld its FLOPs.
        own, call = {}, {}
        for i, f in enumerate(self.facts):
            own[2 * i] = (f.flops, f.bytes)
            own[2 * i + 1] = (None, None)
            call[2 * i] = f.call_work
            call[2 * i + 1] = f.call_work if f.call_work is not None else (f.flops, f.bytes)
        has_call = np.array([call[c] is not None for c in range(2 * len(self.facts))], bool)
        order = np.argsort(gid, kind="stable")
        bounds = np.searchsorted(gid[order], np.arange(len(keys) + 1))
        for g, key in enumerate(keys):
            at = rows[order[bounds[g]:bounds[g + 1]]]
            grp = prof.groups.groups[key]
            n, d = self.node[at], self.dur[at]
            cls = 2 * n.astype(np.int64) + self.held[at]
            grp.time = int(d.sum())
            grp.count = len(at)
            grp.durations = array("q", d.astype(np.int64).tobytes())
            grp.tc_time = int(d[tc[n]].sum())
            # A kernel whose whole-call work is not its own counts the one the grouping asks
            # for, and each in the group's `both` (Group.add).
            main = {c: call[c] if call[c] is not None and grp.whole else own[c] for c in own}
            self._work(grp, cls, d, main)
            split = has_call[cls]
            if split.any():
                grp.both = (Group(grp.name, grp.keys), Group(grp.name, grp.keys, True))
                for part, work in zip(grp.both, (own, call)):
                    part.count = int(split.sum())
                    self._work(part, cls[split], d[split], work)

    def _work(self, grp: Group, cls: np.ndarray, d: np.ndarray, work: dict) -> None:
        """Group._work for records of classes `cls` (node and withheld, as _groups numbers them)
        and durations `d`, each doing work[class] (FLOPs, bytes), in input order: the capacity
        is a float sum, added in that order."""
        if not len(cls):
            return
        uniq, inverse = np.unique(cls, return_inverse=True)
        inverse = inverse.reshape(-1)
        times = np.zeros(len(uniq), np.int64)
        np.add.at(times, inverse, d)
        counts = np.bincount(inverse, minlength=len(uniq))
        peak = np.zeros(len(uniq))
        for j, c in enumerate(uniq.tolist()):
            flops, nbytes = work[c]
            count, time = int(counts[j]), int(times[j])
            p = self.facts[c // 2].peak_tflops
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


def _union(tl: Timeline, starts: np.ndarray, ends: np.ndarray) -> bool:
    """Fill the empty Timeline `tl` with the union of the intervals [starts, ends) as its add()
    would, record by record; False (tl untouched) where add() might find one late: a kernel is
    never late while it starts no earlier than every kernel but the last window - 1 before it
    (the frontier is below the window-th latest start so far)."""
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if not len(s):
        return True
    w = tl.window
    if len(s) > w and (s[w:] < np.maximum.accumulate(s)[:-w]).any():
        return False
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate(([True], s[1:] > reach[:-1]))
    begin = s[new]
    end = reach[np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)]
    gaps = begin[1:] - end[:-1]
    tl.busy = int((end - begin).sum())
    tl.gaps, tl.gap_total, tl.gap_max = len(gaps), int(gaps.sum()), int(gaps.max(initial=0))
    tl.first, tl.last, tl.frontier = int(s[0]), int(reach[-1]), int(end[-1])
    return True
