"""Compute and communication on each rank's GPUs (docs/prof.md, "Overlap"): per rank and step,
GPU time in compute kernels, in communication (NCCL) kernels and in both at once; and, per
collective kernel, its exposed time: the part no compute kernel of its GPU ran alongside.

Steps: a rank's step ends with its optimizer step (a pyprof `torch.optim` `*.step` marker); the
first kernel launched after the optimizer's kernels starts the next. Without optimizer markers a
rank is one step.

One streaming pass, memory bounded by what runs at once: busy times come from intervals.py's
windowed unions (compute, communication and their union per device; both = compute + comm -
union). A collective's exposure is settled once a kernel launched after it ended arrives (a
kernel never starts before its launch call), against the compute intervals kept since the
oldest unsettled collective started.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from ...formats import MOD, OPTIM_MOD
from .collectives import Collective
from ..intervals import Timeline
from ..scan import time_field


def rank_key(rank: Any) -> tuple:
    """Sort key of a record's `rank` (an int, or None for an unranked record file)."""
    return (rank is None, rank if type(rank) is int else 0)


def rank_text(rank: Any) -> str:
    """A record's `rank` as printed: `-` for an unranked record file."""
    return "-" if rank is None else str(rank)


def is_optimizer_step(rec: dict) -> bool:
    """A kernel of an optimizer step (pyprof marker `torch.optim` `<Class>.step`)."""
    return rec.get(MOD) == OPTIM_MOD and str(rec.get("op") or "").endswith(".step")


class Busy:
    """Compute, communication and total busy time of one device in one step."""

    __slots__ = ("compute", "comm", "union", "first", "last")

    def __init__(self) -> None:
        self.compute, self.comm, self.union = Timeline(), Timeline(), Timeline()
        self.first: int | None = None
        self.last: int | None = None

    def add(self, start: int, end: int, comm: bool) -> None:
        (self.comm if comm else self.compute).add(start, end)
        self.union.add(start, end)
        self.first = start if self.first is None else min(self.first, start)
        self.last = end if self.last is None else max(self.last, end)

    def totals(self) -> tuple[int, int, int]:
        """(compute ns, comm ns, both ns)."""
        c, m, u = (t.finish().busy for t in (self.compute, self.comm, self.union))
        return c, m, c + m - u


class Exposure:
    """Per device: each collective kernel's time with no compute kernel running (settled late,
    see the module docstring)."""

    def __init__(self) -> None:
        self._starts: list[int] = []   # merged compute intervals, sorted, disjoint
        self._ends: list[int] = []
        self.pending: list[tuple[int, int, Any]] = []   # (start, end, tag) of unsettled collectives

    def compute(self, start: int, end: int) -> None:
        """A compute kernel ran over [start, end)."""
        if end <= start:
            return
        starts, ends = self._starts, self._ends
        i = bisect_left(starts, start)
        if i > 0 and ends[i - 1] >= start:
            i -= 1
        j = i
        while j < len(starts) and starts[j] <= end:
            j += 1
        if j > i:
            start, end = min(start, starts[i]), max(end, ends[j - 1])
            del starts[i:j], ends[i:j]
        starts.insert(i, start)
        ends.insert(i, end)

    def covered(self, start: int, end: int) -> int:
        """ns of [start, end) under compute intervals."""
        starts, ends = self._starts, self._ends
        i = max(0, bisect_right(starts, start) - 1)
        total = 0
        while i < len(starts) and starts[i] < end:
            lo, hi = max(start, starts[i]), min(end, ends[i])
            if hi > lo:
                total += hi - lo
            i += 1
        return total

    def settle(self, now: int | None) -> list[tuple[Any, int, int]]:
        """(tag, duration, exposed ns) of the collectives that ended before `now` (None: all),
        and forget compute intervals no unsettled or future collective can meet."""
        done, keep = [], []
        for s, e, tag in self.pending:
            if now is None or e <= now:
                done.append((tag, e - s, (e - s) - self.covered(s, e)))
            else:
                keep.append((s, e, tag))
        self.pending = keep
        horizon = min([s for s, _, _ in keep] + ([now] if now is not None else []), default=None)
        if horizon is None:
            self._starts, self._ends = [], []
        else:
            cut = bisect_left(self._ends, horizon)
            del self._starts[:cut], self._ends[:cut]
        return done


class Overlap:
    """Accumulates kernel records (with their Collective or None) of any number of ranks."""

    def __init__(self) -> None:
        self.cells: dict[tuple[Any, int], dict[Any, Busy]] = {}   # (rank, step) -> device -> Busy
        self._step: dict[Any, int] = {}
        self._in_optimizer: dict[Any, bool] = {}
        self._exposure: dict[tuple[Any, Any], Exposure] = {}
        # (rank, step, kind) -> [count, ns, exposed ns]
        self.collectives: dict[tuple[Any, int, str], list[int]] = {}
        self.exposed: list[tuple[Any, Any, int, int]] = []     # (rank, tag, duration, exposed), settled

    def add(self, rec: dict, coll: Collective | None, tag: Any = None) -> None:
        """Count one kernel record; `coll` says whether it is a collective, `tag` names the
        collective instance in `exposed` (stragglers.Instances' key)."""
        if rec.get("kind", "kernel") != "kernel":
            return
        rank, device = rec.get("rank"), rec.get("device")
        start, end = time_field(rec, "kStart"), time_field(rec, "kEnd")
        opt = is_optimizer_step(rec)
        step = self._step.get(rank, 0)
        if not opt and self._in_optimizer.get(rank):
            step += 1
        self._step[rank] = step
        self._in_optimizer[rank] = opt
        cell = self.cells.setdefault((rank, step), {})
        busy = cell.get(device)
        if busy is None:
            busy = cell[device] = Busy()
        busy.add(start, end, coll is not None)
        launch = rec.get("launch")
        now = launch.get("start") if isinstance(launch, dict) else None
        exp = self._exposure.get((rank, device))
        if exp is None:
            exp = self._exposure[(rank, device)] = Exposure()
        for t, dur, exposed in exp.settle(now if type(now) is int else start):
            self._settled(rank, t, dur, exposed)
        if coll is None:
            exp.compute(start, end)
        else:
            exp.pending.append((start, end, (step, coll.kind or "?", tag)))

    def _settled(self, rank: Any, tag: tuple[int, str, Any], dur: int, exposed: int) -> None:
        step, kind, inst = tag
        c = self.collectives.setdefault((rank, step, kind), [0, 0, 0])
        c[0] += 1
        c[1] += dur
        c[2] += exposed
        self.exposed.append((rank, inst, dur, exposed))

    def finish(self) -> "Overlap":
        """Settle every collective still pending."""
        for (rank, _), exp in self._exposure.items():
            for t, dur, exposed in exp.settle(None):
                self._settled(rank, t, dur, exposed)
        return self

    def rows(self) -> list[dict]:
        """Per rank and step: compute, comm, both, exposed comm (comm - both) in ns, and the
        step's span (first kernel start to last kernel end over its devices)."""
        out = []
        for (rank, step), devices in sorted(self.cells.items(), key=lambda kv: (rank_key(kv[0][0]), kv[0][1])):
            compute = comm = both = 0
            first = last = None
            for busy in devices.values():
                c, m, b = busy.totals()
                compute, comm, both = compute + c, comm + m, both + b
                first = busy.first if first is None else min(first, busy.first)
                last = busy.last if last is None else max(last, busy.last)
            out.append({"rank": rank, "step": step, "span_ns": last - first, "compute_ns": compute, "comm_ns": comm,
                        "both_ns": both, "exposed_ns": comm - both,
                        "hidden_pct": both / comm * 100 if comm else None})
        return out
