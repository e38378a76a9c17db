"""One time window of an export: how several processes parse one export and still write, byte
for byte, what one process writes (docs/parse.md, "One export, several workers").

A window holds the activities whose sort key (the CPU start of the launch call, else the GPU
start) lies in [start, end). Its worker reads the NVTX ranges that start inside it plus those
that started before and are still open at `start` ("inherited": they may enclose its launches),
and, unless it is the last window, takes in every range that starts before `end` after its last
launch, as the single sweep would before the next window's first launch.

What the sweep carries across a boundary besides the open ranges is small and explicit: the
forward ops remembered per process (backward kernels look them up by `seq`), the span of node
seqs each thread's last payload op range left pending (spans.py), the threads seen
running autograd, the attributions of captured CUDA graph nodes (their replays take them), for
ranges open across the boundary, how many kernels each already owned (`subSeqId`) and the node
`seq` an engine wrapper range took from a node inside it, and the records of compiled-graph runs
still open (compiled.Tail: a run is joined to its compile-time table as a whole). A window is
first parsed without that state ("speculative"); its Report says which of those it would have
read and what it left at its end. parallel.py then composes the states window by window (pure
functions below) and parses again, with the exact state as a Seed, only the windows whose
speculative run read something an earlier window had set. Normal training traces cut between
steps need no second run.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyprof.parse import consumers, spans
from pyprof.parse.compiled_kernels import Tail
from pyprof.parse.export import RUNTIME, Export
from pyprof.parse.zones import Zones, rowid_terms

# A range open across a boundary: (scope id: globalTid for push/pop, globalPid for start/end
# ranges, is push/pop, start, end, domain name, text). Stable across processes, unlike id().
RangeKey = tuple
NEVER = -(1 << 62)  # the `fresh` bound of a sweep over the whole export: no range is inherited
_PID_MASK_SQL = -16777216  # globalTid -> globalPid, as queries.PID_MASK_SQL


@dataclass
class Seed:
    """The sweep's carried state at a window's start. `fwd`: pid -> seq -> forward op, in
    recency order (intake.Intake.fwd_ops); `autograd`: globalTids that ran autograd ranges;
    `open`: RangeKey -> (kernels owned so far, engine wrapper's node seq or None); `captured`:
    captured graph node -> its replays' attribution (attribute.lines' map); `tail`: what the
    compiled-graph join of the window before held (None: nothing); `pending`: the pending node
    spans per process and thread (spans.Pending); `tops`: globalTid -> (node seq or None, start, whether an AccumulateGrad's)
    of the thread's last range pushed while none was open; `calls`: globalPid -> start of its
    last backward call range; `nccl`: globalTid -> its NCCL group (nccl.Groups.state);
    `consumers`: globalTid -> what the thread listens for and heard (consumers.State)."""

    fwd: dict[int, dict[int, Any]] = field(default_factory=dict)
    autograd: set[int] = field(default_factory=set)
    open: dict[RangeKey, tuple[int, int | None]] = field(default_factory=dict)
    captured: dict[int, str] = field(default_factory=dict)
    tail: Tail | None = None
    pending: spans.Pending = field(default_factory=dict)
    tops: dict[int, tuple[int | None, int, bool]] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    nccl: dict[int, Any] = field(default_factory=dict)
    consumers: dict[int, consumers.State] = field(default_factory=dict)


@dataclass
class Report:
    """What a speculative window read that an earlier window may have set, and what it left.

    misses: (globalPid, seq) a backward kernel looked up and did not find -> how many threads of
    that process the window had met payload op ranges of by then (closes' first ones); guesses: those it
    found only among the forward ops of inherited ranges, with what it found; negatives: globalTids
    whose launch fell back to "autograd thread?" and was not one yet; owners / node_seqs:
    inherited ranges used as a kernel's op range / as an engine wrapper without a node seq;
    captured_misses: captured graph nodes a replayed kernel looked up and did not find.
    fwd, autograd: the window's own forward-op map and autograd threads at its end; captured:
    the nodes captured in the window (filled by seeded runs too: their attributions are exact
    only there, where backward ops find their forward ops); tail: what the window's
    compiled-graph join held at its end (filled by seeded runs too, exact only there); open_end:
    RangeKey -> (kernels owned in this window, node seq set in it or None, inherited) for the
    ranges still open at `end`. closes: globalPid -> globalTid -> where the thread's first payload
    op range in the window closed the span an earlier window may have left pending (its end
    seq), in the order met; pending: the pending spans at the window's end of the threads it met
    payload ranges of (a seeded run's: of every thread, exact, as fwd; spans.Pending). tops,
    calls: as Seed's, at the window's end; tops_missed: globalTids of the autograd threads whose
    launch outside every range needed the last range pushed before the window (or inherited).
    nccl: as Seed's, at the window's end; nccl_nested, nccl_ended: the globalTids whose NCCL
    group at the window's start the window depended on (nccl.Groups). consumers: the listening
    state at the window's end of the threads whose state it changed (None: listens for nothing).
    """

    misses: dict[tuple[int, int], int] = field(default_factory=dict)
    guesses: dict[tuple[int, int], Any] = field(default_factory=dict)
    negatives: set[int] = field(default_factory=set)
    owners: set[RangeKey] = field(default_factory=set)
    node_seqs: set[RangeKey] = field(default_factory=set)
    captured_misses: set[int] = field(default_factory=set)
    fwd: dict[int, dict[int, Any]] = field(default_factory=dict)
    autograd: set[int] = field(default_factory=set)
    captured: dict[int, str] = field(default_factory=dict)
    tail: Tail | None = None
    open_end: dict[RangeKey, tuple[int, int | None, bool]] = field(default_factory=dict)
    closes: dict[int, dict[int, int]] = field(default_factory=dict)
    pending: spans.Pending = field(default_factory=dict)
    tops: dict[int, tuple[int | None, int, bool]] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)
    tops_missed: set[int] = field(default_factory=set)
    nccl: dict[int, Any] = field(default_factory=dict)
    nccl_nested: set[int] = field(default_factory=set)
    nccl_ended: set[int] = field(default_factory=set)
    consumers: dict[int, consumers.State | None] = field(default_factory=dict)


class Window:
    """Activities with sort key in [start, end) (None: unbounded), parsed with `seed` (None:
    speculatively, filling `report`), reading only the rows `zones` says can be its own (None:
    every row is tested)."""

    def __init__(self, start: int | None, end: int | None, seed: Seed | None = None,
                 zones: Zones | None = None) -> None:
        self.start = start
        self.end = end
        self.seed = seed
        self.zones = zones
        self.report = Report()

    def tails(self) -> tuple[Tail | None, Tail | None]:
        """The compiled-graph join's state for this window (compiled.joined_lines): the Tail to
        take up at its start (the seed's), and the one it fills for its end, held by the report
        (None for the last window, which leaves nothing open)."""
        self.report.tail = Tail() if self.end is not None else None
        return (self.seed.tail if self.seed is not None else None), self.report.tail

    @property
    def fresh(self) -> int:
        """Ranges starting before this are inherited: an earlier window took them in."""
        return NEVER if self.start is None else self.start

    def _bounds(self, col: str) -> tuple[str, tuple[int, ...]]:
        terms, params = [], []
        if self.start is not None:
            terms.append(f"{col} >= ?")
            params.append(self.start)
        if self.end is not None:
            terms.append(f"{col} < ?")
            params.append(self.end)
        return " AND ".join(terms) or "1", tuple(params)

    def activity_clause(self, exp: Export, table: str) -> tuple[str, str, tuple[int, ...]]:
        """(extra JOIN ON terms, WHERE terms, their parameters in that order) selecting this
        window's rows of activity `table` (queries.activity_sql's `x`, runtime `r`).

        The exact test is on the sort key, known only after the launch join. To spare the join
        for the rows of other windows, candidates are first narrowed with cheap tests on the
        table's own columns: per process, the correlation ids of the launch calls made in the
        window, or a GPU start in the window (kernels with no launch call). The runtime rows a
        candidate can join are narrowed the same way, which lets SQLite index only those.
        """
        joined = exp.has(RUNTIME, "correlationId", "start", "end")  # as queries.activity_sql joins
        key, key_params = self._bounds("coalesce(r.start, x.start)" if joined else "x.start")
        if not (joined and exp.has(RUNTIME, "globalTid") and exp.has(table, "globalPid")):
            return "", key, key_params
        zones = self.zones or Zones()
        launched, lp = self._bounds("start")
        own, op = self._bounds("start")
        near, np_ = rowid_terms(RUNTIME, zones.by_start(RUNTIME, self.start, self.end))
        calls = exp.rows(f"SELECT globalTid & {_PID_MASK_SQL}, min(correlationId), max(correlationId) FROM {RUNTIME} "
                         f"WHERE {launched} AND {near} GROUP BY 1", lp + np_).fetchall()
        near, np_ = rowid_terms(table, zones.by_start(table, self.start, self.end))
        started = exp.rows(f"SELECT globalPid, min(correlationId), max(correlationId) FROM {table} "
                           f"WHERE {own} AND {near} GROUP BY 1", op + np_).fetchall()
        calls = [(pid, lo, hi) for pid, lo, hi in calls if pid is not None and lo is not None]
        started = [(pid, lo, hi) for pid, lo, hi in started if pid is not None and lo is not None]
        x_terms, x_params, r_terms, r_params = [], [], [], []
        for pid, lo, hi in calls + started:
            r_terms.append(f"((r.globalTid & {_PID_MASK_SQL}) = ? AND r.correlationId BETWEEN ? AND ?)")
            r_params += [pid, lo, hi]
        for pid, lo, hi in calls:
            x_terms.append("(x.globalPid = ? AND x.correlationId BETWEEN ? AND ?)")
            x_params += [pid, lo, hi]
        own_x, own_params = self._bounds("x.start")
        x_terms.append(f"({own_x})")
        x_params += own_params
        # The launch calls and activities those terms can match, as rowid spans (zones.py).
        if not all(type(v) is int for _, lo, hi in calls + started for v in (lo, hi)):
            zones = Zones()  # an id that is no integer: SQLite's order, not Python's
        r_near, r_np = rowid_terms("r", zones.by_correlation(RUNTIME, [(lo, hi) for _, lo, hi in calls + started]))
        x_near, x_np = rowid_terms("x", zones.by_correlation(table, [(lo, hi) for _, lo, hi in calls],
                                                              self.start, self.end, started=True))
        on = f" AND ({' OR '.join(r_terms) or '0'}) AND {r_near}"
        where = f"({' OR '.join(x_terms)}) AND {key} AND {x_near}"
        return on, where, tuple(r_params) + r_np + tuple(x_params) + key_params + x_np

    def captured_clause(self) -> tuple[str, tuple[int, ...]]:
        """(WHERE terms, parameters) for the captured graph nodes created in this window
        (queries.captured_sql: their sort key is their creation time)."""
        return self._bounds("n.start")

    def nvtx_clause(self) -> tuple[str, tuple[int, ...], tuple[int, ...] | None]:
        """(WHERE terms, parameters, the runtime calls' threads or None) for queries.nvtx_sql:
        the ranges this window reads: started inside it or earlier, and not ended before its
        start (ended ones were an earlier window's)."""
        terms, params = [], []
        if self.end is not None:
            terms.append("n.start < ?")
            params.append(self.end)
        if self.start is not None:
            terms.append("(n.start >= ? OR n.end >= ? OR n.end IS NULL)")
            params += [self.start, self.start]
        zones = self.zones or Zones()
        near, near_params = rowid_terms("n", zones.nvtx(self.start, self.end))
        if near != "1":
            terms.append(near)
        return " AND ".join(terms) or "1", tuple(params) + near_params, zones.threads


def compose(seed: Seed, report: Report, cap: int) -> Seed:
    """The state at the end of a window that started with `seed` and reported `report`
    (speculatively or not: what a window remembers does not depend on what it was seeded with,
    but for closing a pending span of the seed's, which makes it stale: then `report` holds the
    seeded run's fwd and pending, which hold the seed's). `cap`: forward ops kept per process
    (intake.FWD_OPS_PER_PROCESS)."""
    fwd = {pid: dict(ops) for pid, ops in seed.fwd.items()}
    for pid, ops in report.fwd.items():
        merged = fwd.setdefault(pid, {})
        for seq, op in ops.items():
            merged.pop(seq, None)
            merged[seq] = op
        while len(merged) > cap:
            del merged[next(iter(merged))]
    opened: dict[RangeKey, tuple[int, int | None]] = {}
    for key, (count, node_seq, inherited) in report.open_end.items():
        before = seed.open.get(key, (0, None)) if inherited else (0, None)
        opened[key] = (before[0] + count, node_seq if node_seq is not None else before[1])
    return Seed(fwd, seed.autograd | report.autograd, opened, {**seed.captured, **report.captured}, report.tail,
                spans.compose(seed.pending, report.pending), {**seed.tops, **report.tops},
                {pid: max(seed.calls.get(pid, NEVER), report.calls.get(pid, NEVER)) for pid in {**seed.calls, **report.calls}},
                {**seed.nccl, **report.nccl}, consumers.compose(seed.consumers, report.consumers))


def stale(seed: Seed, report: Report) -> bool:
    """Whether a speculative window read state that `seed` (the exact state at its start) has:
    then its records may differ from the single sweep's and it must be parsed again, seeded."""
    if seed.tail is not None and seed.tail.lines:
        return True  # the window's first records may belong to runs of compiled graphs open there
    if any(seq in seed.fwd.get(pid, ()) for pid, seq in report.misses):
        return True
    if spans.stale(seed.pending, report.closes, report.misses):
        return True
    if any(seed.tops.get(tid, (None,))[0] is not None for tid in report.tops_missed):
        return True
    if any(seed.fwd.get(pid, {}).get(seq) != op for (pid, seq), op in report.guesses.items()):
        return True
    if report.negatives & seed.autograd:
        return True
    if any(seed.nccl[tid][0] for tid in report.nccl_nested & seed.nccl.keys()):
        return True  # a group open across the window's start
    if any(seed.nccl[tid][1] for tid in report.nccl_ended & seed.nccl.keys()):
        return True  # the calls of a group whose end the window inherited
    if any(node in seed.captured for node in report.captured_misses):
        return True
    if seed.consumers:
        return True  # a thread listened for a data-sized output's readers across the start
    if any(seed.open.get(key, (0, None))[0] for key in report.owners):
        return True
    return any(seed.open.get(key, (0, None))[1] is not None for key in report.node_seqs)
