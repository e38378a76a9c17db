"""Range intake, the first stage of the merge sweep (attribute.py): NVTX ranges, read in start
order, go onto their scope's list of open ranges, and what they say about autograd is noted for
the attribution stage (the threads that run it, the forward op of each `seq`, the pending node
spans of payload op ranges, each thread's last outermost range, each process's last backward call).

Per scope (a thread for push/pop ranges, a process for start/end ranges) the ranges that
started and may still be open are kept in a list in start order (outermost first). Before a
range is added, ranges that ended earlier are dropped from the top, so a scope holds about its
nesting depth; a scope whose ranges do not nest is compacted when it doubles, so memory never
grows with the trace.
"""
from __future__ import annotations

from sys import intern
from typing import Any, Iterator

from pyprof.formats import DOMAIN as PYPROF_DOMAIN
from pyprof.parse import nccl, queries
from pyprof.parse.consumers import Consumers
from pyprof.parse.ranges import BWD, LAYER, MALFORMED, OP, TORCH, Label, classify, forward_op, is_accumulation
from pyprof.parse.spans import Spans, remember
from pyprof.parse.window import NEVER, Window
from pyprof.parse.zones import OPEN_END

# Forward ops remembered per process for backward kernels (docs/records.md).
FWD_OPS_PER_PROCESS = 16384
PID_MASK = ~0xFFFFFF        # globalTid -> globalPid
_COMPACT_MIN = 64
_PUSH_POP = frozenset({queries.PUSH_POP, queries.PUSH_POP_T})
# The NVTX fields the sweep reads, in the order it unpacks them.
NVTX_FIELDS = ("start", "end", "event_type", "global_tid", "domain_id", "text", "payload", "blob")
# Beyond every range start: the due time once the NVTX rows are all taken in.
_NO_MORE = OPEN_END + 1

# An open range is a list, not an object: about five are made per kernel, and a list literal
# costs a fraction of an instance's __init__ call. Its fields, by index:
START = 0      # CPU start, ns
END = 1        # CPU end, ns (OPEN_END while open at capture stop)
DOMAIN = 2     # domain name, None for the default domain
TEXT = 3       # message
LABEL = 4      # its ranges.Label, classified on first use: most PyTorch ranges enclose no kernel
COUNT = 5      # kernels attributed with it as their innermost op so far: the next subSeqId
# For `autograd::engine::evaluate_function: XBackward0`, which carries no seq: the seq of the node
# range it wraps, so kernels the engine launches around the node (a bias gradient's sum) still
# find their forward op.
NODE_SEQ = 6
# For a range an earlier window took in (window.py): its RangeKey, else None. Kept in the range,
# not in a map by id(): a popped range's id is reused by a later one.
KEY = 7
# For an NCCL range: the NCCL calls a kernel launched inside it ran (nccl.Groups.take), else None.
NCCL = 8
Range = list
# pid -> seq -> (the forward marker's Label or None, torch op name, JSON of the layers around the
# forward op, the marker's start or None); the record's JSON is built only when a backward kernel
# asks, so an entry costs a tuple, not a copy of the marker.
FwdOps = dict[int, dict[int, tuple]]


def classified(r: Range) -> Label:
    """The Label of open range `r`, classified now if it was not yet."""
    label = r[LABEL]
    if label is None:
        label = r[LABEL] = classify(r[DOMAIN], r[TEXT])
    return label


def forward_context(stack: list[Range], start: int) -> tuple[Range | None, list[str]] | None:
    """(innermost op marker range, layer names' JSON innermost first) around a forward op
    starting at `start`; None inside an autograd range (an op autograd itself runs)."""
    owner = None
    layers: list[str] = []
    for r in reversed(stack):
        if r[END] < start:
            continue
        lab = classified(r)
        if lab.bwd:
            return None
        if owner is None and lab.kind == OP:
            owner = r
        elif lab.kind == LAYER:
            layers.append(lab.js)
    return owner, layers


class Intake:
    """The open ranges of one sweep and what the ranges taken in so far say about autograd.

    `take(t)` takes in, from `nvtx` (rows of NVTX_FIELDS in start order), every range starting by
    `t`; the sweep calls it when `t` reaches `due`, the next range's start. NCCL ranges go
    through `groups` (nccl.Groups), which pairs them with NCCL's calls. With `window`, ranges
    that started before the window (`fresh`) were taken in by an earlier one: they carry their
    RangeKey, take their kernel count and node seq from the window's Seed, and count in no summary.
    """

    __slots__ = ("nvtx", "nv", "due", "domains", "stats", "fresh", "seed_open", "threads", "procs",
                 "limits", "autograd", "fwd_ops", "guessed", "spans", "tops", "calls", "groups", "report",
                 "consumers")

    def __init__(self, nvtx: Iterator[Any], domains: dict[tuple[int, int], str], stats: Any,
                 window: Window | None, groups: nccl.Groups) -> None:
        seed = window.seed if window is not None else None
        report = window.report if window is not None and seed is None else None
        self.nvtx = nvtx
        self.nv = next(nvtx, None)
        self.due = _NO_MORE if self.nv is None else self.nv[0]  # NVTX_FIELDS: start first
        self.domains = domains
        self.stats = stats
        self.fresh = NEVER if window is None else window.fresh
        self.seed_open = seed.open if seed is not None else None
        self.threads: dict[int, list[Range]] = {}   # push/pop ranges by globalTid
        self.procs: dict[int, list[Range]] = {}     # start/end ranges by globalPid
        self.limits: dict[int, int] = {}            # compaction threshold per scope list (by id)
        self.autograd: set[int] = set(seed.autograd) if seed is not None else set()
        self.fwd_ops: FwdOps = {pid: dict(ops) for pid, ops in seed.fwd.items()} if seed is not None else {}
        # Forward ops of ranges an earlier window took in (a speculative run's guesses).
        self.guessed: FwdOps = {}
        # Node spans of payload op ranges (spans.py): a seeded window starts with the pending ones.
        self.spans = Spans(seed.pending if seed is not None else None, report.closes if report is not None else None)
        # globalTid -> (node seq or None, start, whether an AccumulateGrad's) of the thread's last
        # range pushed with none open (the range that ended last when none is open); globalPid ->
        # start of its last backward call.
        self.tops: dict[int, tuple[int | None, int, bool]] = dict(seed.tops) if seed is not None else {}
        self.calls: dict[int, int] = dict(seed.calls) if seed is not None else {}
        self.groups = groups
        self.report = report  # a speculative window's: the state it read and did not have
        # The first readers of data-sized outputs (consumers.py).
        self.consumers = Consumers(seed.consumers if seed is not None else None)

    def live_top(self, gtid: int, gpid: int) -> tuple | None:
        """Thread `gtid`'s top entry (self.tops) where this window knows it and no backward call of
        process `gpid` started after it (another pass); None otherwise. A speculative window notes
        a top it could not see (a seeded run knows it)."""
        top = self.tops.get(gtid)
        if top is None or (self.report is not None and top[1] < self.fresh):
            if self.report is not None:
                self.report.tops_missed.add(gtid)
            return None
        return top if top[1] >= self.calls.get(gpid, NEVER) else None

    def _produced(self, gtid: int, gpid: int, start: int) -> int | None:
        """The node seq an AccumulateGrad range pushed on thread `gtid` at `start` stores the
        gradient of: AccumulateGrad has none, and the engine runs it right after the node that
        produced that gradient, the thread's top range before it (or this very range, taken in
        again by a later window)."""
        top = self.live_top(gtid, gpid)
        return top[0] if top is not None and (top[1] != start or top[2]) else None

    def take(self, t: int) -> None:
        """Take in every range that starts by `t`."""
        # One loop over the ranges, not a call per range: about five come in per kernel, and a
        # call per range costs 10% of parse.
        # Bound as locals here what every range reads; the rest is read where used.
        nv = self.nv
        nvtx = self.nvtx
        fresh = self.fresh
        domains = self.domains
        threads = self.threads
        procs = self.procs
        consumers = self.consumers
        listening = consumers.listening
        while nv is not None and nv[0] <= t:
            start, end, etype, gtid, dom, text, payload, blob = nv
            nv = next(nvtx, None)
            if gtid is None or text is None:
                if text is not None and start >= fresh:
                    self.stats.not_understood += 1  # belongs to no thread: encloses no launch
                continue
            gpid = gtid & PID_MASK
            domain = domains.get((gpid, dom)) if dom else None
            if domain is None and start >= fresh:
                if listening and gtid in listening:
                    consumers.hear(gtid, text, start, OPEN_END if end is None else end)
                if "aten::expand" in text or "aten::broadcast_to" in text:
                    consumers.expanded(gtid, text, start, OPEN_END if end is None else end)
            label = None
            if domain == PYPROF_DOMAIN:
                # Our markers are classified at once, to count the malformed ones even when they
                # enclose no kernel; they repeat, so the cache absorbs it.
                label = classify(domain, text)
                if label.kind >= MALFORMED:
                    if label.kind == MALFORMED:
                        if start >= fresh:
                            self.stats.malformed += 1
                        continue
                    if start >= fresh:
                        self.stats.not_understood += 1
                elif label.kind == BWD:
                    self.autograd.add(gtid)
            pp = etype in _PUSH_POP
            if pp:
                scope = gtid
                stack = threads.get(gtid)
                if stack is None:
                    stack = threads[gtid] = []
            else:
                scope = gpid
                # Start/end ranges exist to span threads (nvtxRangeStart on one, End on another):
                # they enclose every launch of their process while open.
                stack = procs.get(gpid)
                if stack is None:
                    stack = procs[gpid] = []
            while stack and stack[-1][END] < start:
                stack.pop()
            if len(stack) >= _COMPACT_MIN and len(stack) >= self.limits.get(id(stack), 0):
                stack[:] = [r for r in stack if r[END] >= start]
                self.limits[id(stack)] = max(_COMPACT_MIN, 2 * len(stack))
            if domain is None:
                if "Backward" in text or "autograd::" in text or text.startswith("CopySlices"):
                    label = classify(None, text)
                    if label.kind == TORCH and label.bwd:
                        self.autograd.add(gtid)
                        if label.seq is not None and stack:
                            # Wrappers contain "autograd::": already classified.
                            wrapper = stack[-1]
                            wlab = wrapper[LABEL]
                            if wlab is not None and wlab.bwd and wlab.seq is None and wrapper[END] >= start:
                                wrapper[NODE_SEQ] = label.seq
                elif "seq = " in text:
                    fwd = forward_op(text)
                    if fwd is not None:
                        # An inherited range was remembered by the window that read its start; a
                        # later range of its seq may have ended since. So it is only a guess of a
                        # speculative run, checked against the carried state (window.stale), and
                        # never overrides this window's own.
                        self.remember_forward(stack, start, gpid, *fwd,
                                              ops_by_pid=self.fwd_ops if start >= fresh else self.guessed)
            if payload is not None and label is not None and label.kind == OP and start >= fresh:
                # An inherited range's payload was taken in by the window that read its start:
                # its span comes in the Seed.
                context = None if label.bwd else forward_context(stack, start)
                op = None if context is None else (label, None, tuple(reversed(context[1])), start)
                self.spans.op_range(self.fwd_ops, gpid, gtid, payload, op, FWD_OPS_PER_PROCESS)
            if label is not None and label.bwd and label.kind == OP and start > self.calls.get(gpid, NEVER):
                self.calls[gpid] = start
            if pp and not stack:
                node_seq = label.seq if label is not None and label.kind == TORCH and label.bwd else None
                accumulates = node_seq is None and label is not None and label.kind == TORCH and is_accumulation(label)
                if accumulates:
                    node_seq = self._produced(gtid, gpid, start)
                self.tops[gtid] = (node_seq, start, accumulates)
            new = [start, OPEN_END if end is None else end, domain, text, label, 0, None, None,
                   self.groups.take(gtid, dom, text, blob, start >= fresh) if domain == nccl.NCCL_DOMAIN else None]
            stack.append(new)
            if start < fresh:
                key = new[KEY] = (scope, pp, start, new[END], domain, text)
                if self.seed_open is not None:
                    new[COUNT], new[NODE_SEQ] = self.seed_open.get(key, (0, None))
        self.nv = nv
        self.due = _NO_MORE if nv is None else nv[0]

    def remember_forward(self, stack: list[Range], start: int, gpid: int, name: str, seq: int,
                         ops_by_pid: FwdOps) -> None:
        """Remember the PyTorch range `name` with `seq`, starting at `start` on `stack`, as the
        forward op of node `seq` in process `gpid`, unless autograd itself runs it."""
        context = forward_context(stack, start)
        if context is None:
            return  # an op run by autograd itself, not a forward op of the user's
        owner, layers = context
        marker = call = None
        if owner is not None:
            marker = owner[LABEL]
            call = owner[START]  # which call of the op: one op may create several nodes
        ops = ops_by_pid.get(gpid)
        if ops is None:
            ops = ops_by_pid[gpid] = {}
        # The last range with a given seq is the op that created the autograd node (outer
        # composite ops such as aten::linear peek at the same number before it).
        remember(ops, seq, (marker, intern(name), tuple(reversed(layers)) if layers else (), call),
                 FWD_OPS_PER_PROCESS)
