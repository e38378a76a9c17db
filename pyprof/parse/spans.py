"""Forward ops of autograd nodes from the sequence numbers pyprof op ranges carry as payload
(docs/markers.md, "Payload"), for traces whose only autograd ranges are PyTorch's node
ranges ("AddmmBackward0, seq = 12, op_id = 3"): no forward aten range says which op created node 12.

Each op range's int64 payload p holds s = p & SEQ_MASK, the thread's autograd sequence counter
when the op was called (the seq its first node gets), and g = p >> SEQ_BITS, the nodes created on
the thread since the previous payload op call returned by code no wrapper saw. So of two
consecutive payload op ranges k, k+1 of one thread, op k created exactly the nodes with seq in
[s_k, s_k+1 - g_k+1): its span. A span is "pending" until the thread's next payload range closes
it; closing enters each of its seqs into the sweep's forward-op map (intake.Intake.fwd_ops),
where node ranges look it up, and a node whose seq is in no closed span takes the pending span of
a thread of its process that can hold it.

Sequence numbers count per thread, but node ranges do not say which thread made the node: the
forward-op map is per process (as for emit_nvtx's aten ranges). A pending span [s, ...) could
claim every node above s, also another thread's (a pin-memory thread that called one wrapped op
has a low s). So each thread's latest payload is kept as its frontier, with or without a span,
and a node older than some thread's frontier takes no pending span: it was made before that
thread's latest call, by that thread's gap (unwrapped code) or by a thread whose counter is
lower, which cannot be told apart.

Per thread one pending span is kept, and per process the forward-op map's bound
(intake.FWD_OPS_PER_PROCESS): memory does not grow with the trace.
"""
from __future__ import annotations

from typing import Any

SEQ_BITS = 40
SEQ_MASK = (1 << SEQ_BITS) - 1
# Seqs of one span entered into the forward-op map at most: a call creating more nodes (a loop
# of thousands of small ops inside one wrapped call) gives the rest no forward op, instead of
# pushing every other op out of the bounded map.
SPAN_CAP = 256

# A forward op as intake.Intake.fwd_ops holds it: (op marker's Label, torch op name or None, layer
# names' JSON, the op range's start). A span's op has no torch op name (no aten range was seen).
Fwd = tuple
# globalPid -> globalTid -> (first seq, forward op or None) of the thread's latest payload range:
# its pending span, or its frontier only where the op is no forward op of the user's (a backward call).
Pending = dict[int, dict[int, Any]]
# globalPid -> globalTid -> the end seq of the span its first payload op range closed (Report.closes)
Closes = dict[int, dict[int, int]]


class Spans:
    """The pending spans of one sweep, starting from `pending` (a window's Seed; it is not
    changed). With `closes` (a speculative window's Report.closes), each thread's first payload
    range records there where it closed the span an earlier window may have left open."""

    def __init__(self, pending: Pending | None = None, closes: Closes | None = None) -> None:
        self.pending: Pending = {pid: dict(threads) for pid, threads in (pending or {}).items()}
        self.closes = closes

    def op_range(self, ops_by_pid: dict[int, dict[int, Fwd]], gpid: int, gtid: int, payload: int,
                 op: Fwd | None, cap: int) -> None:
        """A pyprof op range with `payload` started on `gtid`: close the thread's pending span
        into `ops_by_pid[gpid]` (at most `cap` forward ops kept, oldest out first) and make `op`
        (None: an op no node belongs to) the pending one."""
        first, gap = payload & SEQ_MASK, payload >> SEQ_BITS
        threads = self.pending.get(gpid)
        if threads is None:
            threads = self.pending[gpid] = {}
        if self.closes is not None:
            # Per op range: no new dict unless the process is new to this window.
            closes = self.closes.get(gpid)
            if closes is None:
                closes = self.closes[gpid] = {}
            if gtid not in closes:
                closes[gtid] = first - gap
        span = threads.get(gtid)
        if span is not None and span[1] is not None:
            ops = ops_by_pid.get(gpid)
            if ops is None:
                ops = ops_by_pid[gpid] = {}
            enter(ops, span[0], first - gap, span[1], cap)
        threads[gtid] = (first, op)

    def lookup(self, gpid: int, seq: int) -> Fwd | None:
        """The forward op of node `seq` among the pending spans of process `gpid`: None when a
        thread's frontier is past `seq`, else the span that starts last at or before it (ties to
        the lower globalTid, so the answer never depends on order)."""
        best = None
        for tid, (first, op) in self.pending.get(gpid, {}).items():
            if first > seq:
                return None
            if best is None or (first, -tid) > best[0]:
                best = ((first, -tid), op)
        return None if best is None else best[1]

    def closed(self, gpid: int) -> int:
        """How many threads of `gpid` a speculative window has met payload ranges of so far."""
        return len(self.closes.get(gpid, ())) if self.closes is not None else 0


def enter(ops: dict[int, Fwd], lo: int, hi: int, op: Fwd, cap: int) -> None:
    """Enter `op` for each seq of [lo, hi) (at most SPAN_CAP) into `ops`, most recent last.

    A seq an aten range inside this very call already gave a forward op keeps it (emit_nvtx on
    as well: the aten op that created the node is the more precise answer)."""
    call = op[3]
    for seq in range(lo, min(hi, lo + SPAN_CAP)):
        old = ops.get(seq)
        if old is not None and old[1] is not None and old[3] == call:
            continue
        remember(ops, seq, op, cap)


def remember(ops: dict[int, Fwd], seq: int, op: Fwd, cap: int) -> None:
    """`op` as node `seq`'s forward op in the bounded map `ops` (at most `cap`, the oldest entry
    out first): the latest entry for a seq wins and moves to the end."""
    ops.pop(seq, None)
    ops[seq] = op
    if len(ops) > cap:
        del ops[next(iter(ops))]


def compose(seed: Pending, report: Pending) -> Pending:
    """The pending spans after a window that started with `seed` and ended with `report`
    (Report.pending: the threads whose payload ranges it met; a seeded run's holds the seed's
    threads too)."""
    return {pid: {**seed.get(pid, {}), **report.get(pid, {})} for pid in {**seed, **report}}


def stale(seed: Pending, closes: Closes, misses: dict[tuple[int, int], int]) -> bool:
    """Whether a speculative window needed the pending spans `seed` holds: it closed a non-empty
    one (its seqs enter the forward-op map there), or it looked up a node no forward op was
    found for while a thread of the seed's was not yet met again (its span or frontier counts).
    `closes`, `misses`: the window's Report's."""
    for pid, threads in closes.items():
        spans = seed.get(pid, {})
        for tid, end in threads.items():
            span = spans.get(tid)
            if span is not None and span[1] is not None and span[0] < end:
                return True
    met = {pid: list(threads) for pid, threads in closes.items()}
    for (pid, _), closed in misses.items():
        spans = seed.get(pid)
        if spans:
            done = met.get(pid, [])[:closed]
            if any(tid not in done for tid in spans):
                return True
    return False
