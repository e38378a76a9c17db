"""The merge sweep: walk activities in launch order and NVTX ranges in start order together, and
attribute every kernel (memcpy, memset) to the ranges open around its launch call.

Per scope (a thread for push/pop ranges, a process for start/end ranges) the ranges that
started and may still be open are kept in a list in start order (outermost first). Before a
range is added and before a launch is attributed, ranges that ended earlier are dropped from
the top, so a scope holds about its nesting depth; a scope whose ranges do not nest is
compacted when it doubles, so memory never grows with the trace.
"""
from __future__ import annotations

import heapq
from typing import Any, Iterator

from pyprof.parse import queries
from pyprof.parse.export import Export
from pyprof.parse.gpu import GpuInfo
from pyprof.parse.queries import COMMON, DOMAIN_CREATE, RANGE_TYPES, SRC_KERNEL, SRC_MEMCPY
from pyprof.parse.ranges import LAYER, MALFORMED, MODULE, OP, TORCH, UNKNOWN, Label, classify

SCHEMA_VERSION = 1
# Forward ops remembered per process for backward kernels (docs/records.md).
FWD_OPS_PER_PROCESS = 65536
_END_OPEN = 1 << 62          # end of a range still open at capture stop: encloses everything after
_PID_MASK = ~0xFFFFFF        # globalTid -> globalPid
_TID_BITS = 0xFFFFFF
_COMPACT_MIN = 64
_PUSH_POP = frozenset({queries.PUSH_POP, queries.PUSH_POP_T})


class Stats:
    """Counts for the closing summary."""

    def __init__(self) -> None:
        self.records = 0
        self.kernels = 0
        self.with_op = 0
        self.no_launch = 0
        self.not_understood = 0
        self.malformed = 0


class _Range:
    __slots__ = ("start", "end", "label", "n")

    def __init__(self, start: int, end: int, label: Label) -> None:
        self.start = start
        self.end = end
        self.label = label
        self.n = 0  # kernels attributed with this range as their innermost op: next subSeqId


def _split_op(name: str) -> tuple[str | None, str]:
    mod, sep, op = name.rpartition("::")
    return (mod or None, op) if sep else (None, name)


def _expire(stack: list[_Range], t: int) -> None:
    # Properly nested ranges that ended before t are all on top of the stack.
    while stack and stack[-1].end < t:
        stack.pop()


def _enclosing(stack: list[_Range] | None, t: int) -> list[_Range]:
    if not stack:
        return []
    _expire(stack, t)
    # Ranges that do not nest (start/end ranges, odd traces) can hide an ended one below an
    # open one; filtering costs one pass over a list a few entries long.
    return [r for r in stack if r.end >= t]


def _domains(exp: Export) -> dict[tuple[int, int], str]:
    sql = queries.domains_sql(exp)
    out: dict[tuple[int, int], str] = {}
    if sql is None:
        return out
    for gtid, dom, name in exp.rows(sql, (DOMAIN_CREATE,)):
        if gtid is not None and dom is not None and name is not None:
            out[(gtid & _PID_MASK, dom)] = name
    return out


def records(exp: Export, stats: Stats, memcpy: bool = False) -> Iterator[dict[str, Any]]:
    """Yield one record (docs/records.md) per kernel, and per memcpy/memset with `memcpy`, in launch order."""
    domains = _domains(exp)
    gpus = GpuInfo(exp)
    copy_kinds = queries.copy_kinds(exp) if memcpy else {}
    streams = [exp.rows(queries.activity_sql(exp, table, src)) for table, src in queries.sources(exp, memcpy)]
    activities = streams[0] if len(streams) == 1 else heapq.merge(*streams)
    nvtx_sql = queries.nvtx_sql(exp)
    nvtx = exp.rows(nvtx_sql, RANGE_TYPES) if nvtx_sql else _no_rows()

    threads: dict[int, list[_Range]] = {}   # push/pop ranges by globalTid
    procs: dict[int, list[_Range]] = {}     # start/end ranges by globalPid
    limits: dict[int, int] = {}             # compaction threshold per scope list (by id)
    autograd_threads: set[int] = set()
    fwd_ops: dict[int, dict[int, dict[str, Any]]] = {}
    lookup_gpu = gpus.lookup

    def add_range(row: tuple) -> None:
        start, end, etype, gtid, dom, text = row
        if gtid is None:
            stats.not_understood += 1
            return
        gpid = gtid & _PID_MASK
        label = classify(domains.get((gpid, dom)) if dom else None, text)
        kind = label.kind
        if kind >= MALFORMED:
            if kind == MALFORMED:
                stats.malformed += 1
                return
            if kind == UNKNOWN:
                stats.not_understood += 1
            else:
                return  # a range without text
        if etype in _PUSH_POP:
            stack = threads.get(gtid)
            if stack is None:
                stack = threads[gtid] = []
        else:
            # Start/end ranges exist to span threads (nvtxRangeStart on one, End on another):
            # they enclose every launch of their process while open.
            stack = procs.get(gpid)
            if stack is None:
                stack = procs[gpid] = []
        _expire(stack, start)
        if len(stack) >= limits.get(id(stack), _COMPACT_MIN):
            stack[:] = [r for r in stack if r.end >= start]
            limits[id(stack)] = max(_COMPACT_MIN, 2 * len(stack))
        if kind == TORCH:
            if label.bwd:
                autograd_threads.add(gtid)
            elif label.seq is not None:
                _remember_forward(stack, start, gpid, label)
        stack.append(_Range(start, _END_OPEN if end is None else end, label))

    def _remember_forward(stack: list[_Range], start: int, gpid: int, label: Label) -> None:
        marker = None
        for r in reversed(stack):
            lab = r.label
            if r.end < start:
                continue
            if lab.bwd:
                return  # an op run by autograd itself, not a forward op of the user's
            if marker is None and lab.kind == OP:
                marker = lab.info
        ops = fwd_ops.get(gpid)
        if ops is None:
            ops = fwd_ops[gpid] = {}
        seq = label.seq
        # The last range with a given seq is the op that created the autograd node (outer
        # composite ops such as aten::linear peek at the same number before it).
        ops.pop(seq, None)
        ops[seq] = {"seq": seq, "marker": marker, "torchOp": label.name}
        if len(ops) > FWD_OPS_PER_PROCESS:
            del ops[next(iter(ops))]

    try:
        nv = next(nvtx, None)
        for row in activities:
            t = row[0]
            while nv is not None and nv[0] <= t:
                add_range(nv)
                nv = next(nvtx, None)
            gpid = row[7]
            rtid = row[10]
            pid = (gpid >> 24) & _TID_BITS if gpid is not None else None
            if row[8] is None:
                stats.no_launch += 1
                encl: list[_Range] = []
                launch = None
                tid = None
            else:
                launch = {"api": row[11], "start": row[8], "duration": row[9] - row[8]}
                tid = rtid & _TID_BITS if rtid is not None else None
                encl = _enclosing(threads.get(rtid), t) if rtid is not None else []
                pstack = procs.get(gpid)
                if pstack:
                    encl = sorted(encl + _enclosing(pstack, t), key=_outer_first)

            marker = module = owner = None
            torch_ops: list[dict[str, Any]] = []
            seqs: list[int] = []
            layers: list[str] = []
            others: list[str] = []
            bwd = rtid in autograd_threads
            bseq = None
            for r in encl:
                lab = r.label
                kind = lab.kind
                if kind == TORCH:
                    torch_ops.append(lab.info)
                    owner = r
                    if lab.seq is not None:
                        seqs.append(lab.seq)
                        if lab.bwd:
                            bseq = lab.seq
                    if lab.bwd:
                        bwd = True
                elif kind == OP:
                    marker = lab.info
                    owner = r
                    if lab.bwd:
                        bwd = True
                elif kind == MODULE:
                    module = lab.name
                elif kind == LAYER:
                    layers.append(lab.name)
                else:
                    others.append(lab.name)
            if owner is not None:
                sub = owner.n
                owner.n = sub + 1
            else:
                sub = 0

            fwd = None
            source = marker
            if bwd:
                if bseq is not None:
                    ops = fwd_ops.get(gpid)
                    if ops is not None:
                        fwd = ops.get(bseq)
                if fwd is not None and fwd["marker"] is not None:
                    source = fwd["marker"]
            if source is not None:
                mod, op = source.get("mod"), source.get("op")
                trace = source.get("site")
                if source is not marker:
                    module = source.get("module", module)
                elif module is None:
                    module = marker.get("module")
            else:
                trace = None
                if fwd is not None:
                    mod, op = _split_op(fwd["torchOp"])
                elif torch_ops:
                    mod, op = _split_op(torch_ops[-1]["name"])
                else:
                    mod = op = None
            if op is not None:
                stats.with_op += 1

            src = row[2]
            start, end = row[1], row[3]
            if src == SRC_KERNEL:
                stats.kernels += 1
                rec = {
                    "v": SCHEMA_VERSION, "kind": "kernel", "kShortName": row[12], "kLongName": row[13],
                    "kDuration": end - start, "kStart": start, "kEnd": end, "device": row[4], "stream": row[5],
                    "grid": [row[14], row[15], row[16]], "block": [row[17], row[18], row[19]], "regs": row[20],
                    "staticShared": row[21], "dynamicShared": row[22], "pid": pid, "tid": tid,
                    "correlationId": row[6], "launch": launch, "graphNode": row[23],
                    "gpu": lookup_gpu(pid, row[4]),
                }
            elif src == SRC_MEMCPY:
                kind_name = copy_kinds.get(row[13], str(row[13]))
                rec = {
                    "v": SCHEMA_VERSION, "kind": "memcpy", "kShortName": f"memcpy {kind_name}",
                    "kDuration": end - start, "kStart": start, "kEnd": end, "device": row[4], "stream": row[5],
                    "pid": pid, "tid": tid, "correlationId": row[6], "launch": launch, "bytes": row[12],
                    "copyKind": kind_name,
                }
            else:
                rec = {
                    "v": SCHEMA_VERSION, "kind": "memset", "kShortName": "memset",
                    "kDuration": end - start, "kStart": start, "kEnd": end, "device": row[4], "stream": row[5],
                    "pid": pid, "tid": tid, "correlationId": row[6], "launch": launch, "bytes": row[12],
                }
            rec["dir"] = "bprop" if bwd else "fprop"
            rec["mod"] = mod
            rec["op"] = op
            rec["marker"] = marker
            rec["fwd"] = fwd
            rec["torchOps"] = torch_ops
            rec["seqId"] = seqs[-1] if seqs else None
            rec["altSeqId"] = seqs[:-1]
            rec["subSeqId"] = sub
            rec["layer"] = layers
            rec["module"] = module
            rec["trace"] = trace
            rec["ranges"] = others
            stats.records += 1
            yield rec
    finally:
        # Close the cursors now, while the connection is open, not whenever they are collected.
        for stream in streams:
            stream.close()
        nvtx.close()


def _outer_first(r: _Range) -> tuple[int, int]:
    return (r.start, -r.end)


def _no_rows() -> Iterator[tuple]:
    yield from ()
