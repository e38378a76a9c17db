"""The merge sweep: walk activities in launch order and NVTX ranges in start order together, and
attribute every kernel (memcpy, memset) to the ranges open around its launch call.

A kernel replayed from a CUDA graph was launched by cudaGraphLaunch; the call that created its
node is the one that explains it. For a graph captured inside the trace (torch.cuda.graph,
make_graphed_callables), the creation of each captured node comes through the sweep as a row of
its own at its capture time, is attributed like a launch, and its attribution (when it has an
op) is kept by node id for the replays of that node (queries.captured_sql); a graph captured
before the trace keeps its replay's attribution.

Per scope (a thread for push/pop ranges, a process for start/end ranges) the ranges that
started and may still be open are kept in a list in start order (outermost first). Before a
range is added and before a launch is attributed, ranges that ended earlier are dropped from
the top, so a scope holds about its nesting depth; a scope whose ranges do not nest is
compacted when it doubles, so memory never grows with the trace.

Records are assembled as JSON text from fragments encoded once per range (ranges.Label) and
per kernel name: re-encoding the same marker for every kernel it encloses would cost more than
everything else parse does.
"""
from __future__ import annotations

import heapq
import itertools
from operator import itemgetter
from sys import intern
from typing import Any, Iterator

from pyprof.parse import nccl, queries
from pyprof.parse.export import Export
from pyprof.parse.gpu import GpuInfo
from pyprof.parse.queries import SRC_CAPTURED, SRC_KERNEL, SRC_MEMCPY
from pyprof.parse.ranges import BWD, LAYER, MALFORMED, MODULE, OP, TORCH, Label, classify, encode, encode_str, forward_op
from pyprof.parse.spans import Spans, remember
from pyprof.parse.window import NEVER, Report, Window
from pyprof.parse.zones import OPEN_END
from pyprof.formats import DOMAIN as PYPROF_DOMAIN
from pyprof.formats import OPTIM_MOD
from pyprof.formats import VERSION as SCHEMA_VERSION
# Forward ops remembered per process for backward kernels (docs/records.md).
FWD_OPS_PER_PROCESS = 16384
_PID_MASK = ~0xFFFFFF        # globalTid -> globalPid
_TID_BITS = 0xFFFFFF
_COMPACT_MIN = 64
_NAME_CACHE = 65536
_PUSH_POP = frozenset({queries.PUSH_POP, queries.PUSH_POP_T})
# The NVTX fields the sweep reads, in the order it unpacks them.
_NVTX_FIELDS = ("start", "end", "event_type", "global_tid", "domain_id", "text", "payload", "blob")


class Stats:
    """Counts for the closing summary."""

    def __init__(self) -> None:
        self.records = 0
        self.kernels = 0
        self.with_op = 0
        self.no_launch = 0
        self.not_understood = 0
        self.malformed = 0


# An open range is a list, not an object: about five are made per kernel, and a list literal
# costs a fraction of an instance's __init__ call. Its fields, by index:
_START = 0      # CPU start, ns
_END = 1        # CPU end, ns (OPEN_END while open at capture stop)
_DOMAIN = 2     # domain name, None for the default domain
_TEXT = 3       # message
_LABEL = 4      # its ranges.Label, classified on first use: most PyTorch ranges enclose no kernel
_COUNT = 5      # kernels attributed with it as their innermost op so far: the next subSeqId
# For `autograd::engine::evaluate_function: XBackward0`, which carries no seq: the seq of the node
# range it wraps, so kernels the engine launches around the node (a bias gradient's sum) still
# find their forward op.
_NODE_SEQ = 6
# For a range an earlier window took in (window.py): its RangeKey, else None. Kept in the range,
# not in a map by id(): a popped range's id is reused by a later one.
_KEY = 7
# For an NCCL range: the NCCL calls a kernel launched inside it ran (nccl.Groups.take), else None.
_NCCL = 8
_Range = list


def _classified(r: _Range) -> Label:
    label = r[_LABEL]
    if label is None:
        label = r[_LABEL] = classify(r[_DOMAIN], r[_TEXT])
    return label


def _str(s: str | None) -> str:
    return "null" if s is None else encode_str(s)


# The JSON `mod` of an optimizer step's marker (`torch.optim`, `SGD.step`): its kernels are
# neither forward nor backward work, direction `optim` (docs/records.md).
_OPTIM = encode_str(OPTIM_MOD)


def _split_op(name: str) -> tuple[str, str]:
    """JSON of (mod, op) for a PyTorch op name: `aten::addmm` -> "aten", "addmm"."""
    mod, sep, op = name.rpartition("::")
    return (_str(mod or None), encode_str(op)) if sep else ("null", encode_str(name))


def _enclosing(stack: list[_Range], t: int) -> list[_Range]:
    # Start/end ranges need not nest: an ended one can hide below an open one, so besides
    # dropping ended ranges from the top (which keeps the list short), filter them all.
    while stack and stack[-1][_END] < t:
        stack.pop()
    return [r for r in stack if r[_END] >= t]


def _fwd_js(seq: int, fwd: tuple[Label | None, str | None, tuple[str, ...], int | None]) -> str:
    marker, name, _, call = fwd
    if marker is None:
        return f'{{"seq":{seq},"marker":null,"torchOp":{encode_str(name)}}}'
    return f'{{"seq":{seq},"marker":{marker.js},"torchOp":{_str(name)},"call":{call}}}'


def _forward_context(stack: list[_Range], start: int) -> tuple[_Range | None, list[str]] | None:
    """(innermost op marker range, layer names' JSON innermost first) around a forward op
    starting at `start`; None inside an autograd range (an op autograd itself runs)."""
    owner = None
    layers: list[str] = []
    for r in reversed(stack):
        if r[_END] < start:
            continue
        lab = _classified(r)
        if lab.bwd:
            return None
        if owner is None and lab.kind == OP:
            owner = r
        elif lab.kind == LAYER:
            layers.append(lab.js)
    return owner, layers


def _outer_first(r: _Range) -> tuple[int, int]:
    return (r[_START], -r[_END])


# Appended to a window's activities: takes in the ranges left before the window's end.
_DRAIN = (OPEN_END,)


def _leave(report: Report, autograd_threads: set[int], threads: dict[int, list[_Range]],
           procs: dict[int, list[_Range]], end: int | None) -> None:
    """What a speculative window leaves to the next one (window.Report)."""
    report.autograd = autograd_threads
    if end is None:
        return
    for scopes, push_pop in ((threads, True), (procs, False)):
        for scope, stack in scopes.items():
            for r in stack:
                if r[_END] >= end:
                    key = r[_KEY]
                    own = key or (scope, push_pop, r[_START], r[_END], r[_DOMAIN], r[_TEXT])
                    report.open_end[own] = (r[_COUNT], r[_NODE_SEQ], key is not None)


def lines(exp: Export, stats: Stats, memcpy: bool = False, window: Window | None = None,
          clock: int = 0) -> Iterator[str]:
    """Yield one record per kernel (and memcpy/memset with `memcpy`) as a line of compact JSON.

    `window`: only the activities of that time window (window.py), seeded with its Seed or
    filling its Report. `clock` is added to every time written (kStart, kEnd, launch start): the
    export's session start puts exports of several processes on one clock.
    """
    with exp.errors():
        domains, _ = queries.domain_events(exp)
        gpus = GpuInfo(exp)
        copy_kinds = {k: encode_str(v) for k, v in queries.copy_kinds(exp).items()} if memcpy else {}
        groups = nccl.Groups(exp, window.seed.nccl if window is not None and window.seed is not None else None)
    gpu_js: dict[tuple[Any, Any], str] = {}
    streams = []
    try:
        for table, src in queries.sources(exp, memcpy):
            if window is None:
                streams.append(exp.rows(queries.activity_sql(exp, table, src)))
            else:
                with exp.errors():
                    on, where, params = window.activity_clause(exp, table)
                streams.append(exp.rows(queries.activity_sql(exp, table, src, on, where), params))
        captured_sql = (queries.captured_sql(exp, *window.captured_clause()) if window is not None
                        else queries.captured_sql(exp))
        if captured_sql:
            streams.append(exp.rows(*captured_sql))
        nvtx_sql = (queries.nvtx_sql(exp, _NVTX_FIELDS, *window.nvtx_clause()) if window is not None
                    else queries.nvtx_sql(exp, _NVTX_FIELDS))
        if nvtx_sql:
            streams.append(exp.rows(*nvtx_sql))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    nvtx = iter(streams[-1]) if nvtx_sql else iter(())
    activity_streams = streams[:-1] if nvtx_sql else streams
    merged = iter(activity_streams[0]) if len(activity_streams) == 1 else heapq.merge(*activity_streams)
    activities = merged
    # Window bookkeeping (window.py): ranges that started before `fresh` were taken in by an
    # earlier window; such a range carries its RangeKey (_KEY).
    fresh = NEVER if window is None else window.fresh
    report = None if window is None or window.seed is not None else window.report
    if window is not None and window.end is not None:
        activities = itertools.chain(activities, (_DRAIN,))

    threads: dict[int, list[_Range]] = {}   # push/pop ranges by globalTid
    procs: dict[int, list[_Range]] = {}     # start/end ranges by globalPid
    limits: dict[int, int] = {}             # compaction threshold per scope list (by id)
    autograd_threads: set[int] = set()
    # pid -> seq -> (the forward marker's Label or None, torch op name, JSON of the layers around
    # the forward op); the record's JSON is built only when a backward kernel asks, so an entry
    # costs a tuple, not a copy of the marker.
    fwd_ops: dict[int, dict[int, tuple[Label | None, str, tuple[str, ...], int | None]]] = {}
    # Forward ops of ranges an earlier window took in (a speculative run's guesses).
    guessed: dict[int, dict[int, tuple[Label | None, str, tuple[str, ...], int | None]]] = {}
    seed = window.seed if window is not None else None
    if seed is not None:
        autograd_threads |= seed.autograd
        fwd_ops.update((pid, dict(ops)) for pid, ops in seed.fwd.items())
    # Node spans of payload op ranges (spans.py): a seeded window starts with the pending ones.
    spans = Spans(seed.pending if seed is not None else None, report.closes if report is not None else None)
    # globalTid -> (node seq or None, start) of the thread's last range pushed with none open
    # (the range that ended last when none is open); globalPid -> start of its last backward call.
    tops: dict[int, tuple[int | None, int]] = dict(seed.tops) if seed is not None else {}
    calls: dict[int, int] = dict(seed.calls) if seed is not None else {}
    names: dict[int | str | None, str] = {}
    # Captured CUDA graph node -> the attribution part of its replays' records.
    captured: dict[int, str] = dict(seed.captured) if seed is not None else {}

    def remember_forward(stack: list[_Range], start: int, gpid: int, name: str, seq: int,
                         ops_by_pid: dict = fwd_ops) -> None:
        context = _forward_context(stack, start)
        if context is None:
            return  # an op run by autograd itself, not a forward op of the user's
        owner, layers = context
        marker = call = None
        if owner is not None:
            marker = owner[_LABEL]
            call = owner[_START]  # which call of the op: one op may create several nodes
        ops = ops_by_pid.get(gpid)
        if ops is None:
            ops = ops_by_pid[gpid] = {}
        # The last range with a given seq is the op that created the autograd node (outer
        # composite ops such as aten::linear peek at the same number before it).
        remember(ops, seq, (marker, intern(name), tuple(reversed(layers)) if layers else (), call),
                 FWD_OPS_PER_PROCESS)

    string_sql = queries.string_sql(exp)

    def name_js(sid: int | str | None) -> str:
        # `sid` is a StringIds id (an export that stores the name itself gives a str): looked up
        # once per distinct id, not per row.
        js = names.get(sid)
        if js is None:
            if len(names) >= _NAME_CACHE:
                names.clear()
            if isinstance(sid, int) and string_sql is not None:
                js = _str(exp.scalar(string_sql, (sid,)))
            else:
                js = _str(sid if isinstance(sid, str) else None)
            names[sid] = js
        return js

    push_pop = _PUSH_POP
    # Activity row fields by name (queries.py's layouts), bound as locals: the sweep reads them per row.
    (sort_at, start_at, src_at, end_at, device_at, stream_at, corr_at, gpid_at, lstart_at, lend_at, ltid_at, api_at,
     short_at, long_at, gx_at, gy_at, gz_at, bx_at, by_at, bz_at, regs_at, sshared_at, dshared_at, graph_at) = itemgetter(
        "sort_key", "start", "source", "end", "device", "stream", "correlation_id", "global_pid", "launch_start",
        "launch_end", "launch_tid", "launch_api", "short_name", "long_name", "grid_x", "grid_y", "grid_z", "block_x",
        "block_y", "block_z", "regs", "static_shared", "dynamic_shared", "graph_node")(queries.KERNEL_AT)
    # Memcpy and memset rows have `bytes` at the same position (queries.MEMSET_ROW).
    bytes_at, kind_at = itemgetter("bytes", "copy_kind")(queries.MEMCPY_AT)
    origin_at, node_at = queries.KERNEL_AT["graph_origin"], queries.CAPTURED_AT["node"]
    n_records = kernels = with_op = no_launch = 0
    try:
        with exp.errors():
            nv = next(nvtx, None)
            for row in activities:
                t = row[sort_at]
                # Bring in every range that starts by this launch. Inline, not a function: it
                # runs about five times per kernel and a call per range costs 10% of parse.
                while nv is not None and nv[0] <= t:  # _NVTX_FIELDS: start first
                    start, end, etype, gtid, dom, text, payload, blob = nv
                    nv = next(nvtx, None)
                    if gtid is None or text is None:
                        if text is not None and start >= fresh:
                            stats.not_understood += 1  # belongs to no thread: encloses no launch
                        continue
                    gpid = gtid & _PID_MASK
                    domain = domains.get((gpid, dom)) if dom else None
                    label = None
                    if domain == PYPROF_DOMAIN:
                        # Our markers are classified at once, to count the malformed ones even
                        # when they enclose no kernel; they repeat, so the cache absorbs it.
                        label = classify(domain, text)
                        if label.kind >= MALFORMED:
                            if label.kind == MALFORMED:
                                if start >= fresh:
                                    stats.malformed += 1
                                continue
                            if start >= fresh:
                                stats.not_understood += 1
                        elif label.kind == BWD:
                            autograd_threads.add(gtid)
                    pp = etype in push_pop
                    if pp:
                        scope = gtid
                        stack = threads.get(gtid)
                        if stack is None:
                            stack = threads[gtid] = []
                    else:
                        scope = gpid
                        # Start/end ranges exist to span threads (nvtxRangeStart on one, End on
                        # another): they enclose every launch of their process while open.
                        stack = procs.get(gpid)
                        if stack is None:
                            stack = procs[gpid] = []
                    while stack and stack[-1][_END] < start:
                        stack.pop()
                    if len(stack) >= _COMPACT_MIN and len(stack) >= limits.get(id(stack), 0):
                        stack[:] = [r for r in stack if r[_END] >= start]
                        limits[id(stack)] = max(_COMPACT_MIN, 2 * len(stack))
                    if domain is None:
                        if "Backward" in text or "autograd::" in text:
                            label = classify(None, text)
                            if label.kind == TORCH and label.bwd:
                                autograd_threads.add(gtid)
                                if label.seq is not None and stack:
                                    # Wrappers contain "autograd::": already classified.
                                    wrapper = stack[-1]
                                    wlab = wrapper[_LABEL]
                                    if wlab is not None and wlab.bwd and wlab.seq is None and wrapper[_END] >= start:
                                        wrapper[_NODE_SEQ] = label.seq
                        elif "seq = " in text:
                            fwd = forward_op(text)
                            if fwd is not None:
                                # An inherited range was remembered by the window that read its
                                # start; a later range of its seq may have ended since. So it is
                                # only a guess of a speculative run, checked against the carried
                                # state (window.stale), and never overrides this window's own.
                                remember_forward(stack, start, gpid, *fwd,
                                                 ops_by_pid=fwd_ops if start >= fresh else guessed)
                    if payload is not None and label is not None and label.kind == OP and start >= fresh:
                        # An inherited range's payload was taken in by the window that read its
                        # start: its span comes in the Seed.
                        context = None if label.bwd else _forward_context(stack, start)
                        op = None if context is None else (label, None, tuple(reversed(context[1])), start)
                        spans.op_range(fwd_ops, gpid, gtid, payload, op, FWD_OPS_PER_PROCESS)
                    if label is not None and label.bwd and label.kind == OP and start > calls.get(gpid, NEVER):
                        calls[gpid] = start
                    if pp and not stack:
                        tops[gtid] = (label.seq if label is not None and label.kind == TORCH and label.bwd else None, start)
                    new = [start, OPEN_END if end is None else end, domain, text, label, 0, None, None,
                           groups.take(gtid, dom, text, blob, start >= fresh) if domain == nccl.NCCL_DOMAIN else None]
                    stack.append(new)
                    if start < fresh:
                        key = new[_KEY] = (scope, pp, start, new[_END], domain, text)
                        if seed is not None:
                            new[_COUNT], new[_NODE_SEQ] = seed.open.get(key, (0, None))
                if row is _DRAIN:
                    break
                gpid = row[gpid_at]
                rtid = row[ltid_at]
                if row[lstart_at] is None:
                    no_launch += 1
                    encl: list[_Range] = []
                    launch = "null"
                    tid = "null"
                else:
                    api = names.get(row[api_at]) or name_js(row[api_at])
                    launch = f'{{"api":{api},"start":{row[lstart_at] + clock},"duration":{row[lend_at] - row[lstart_at]}}}'
                    if rtid is not None:
                        tid = str(rtid & _TID_BITS)
                        encl = threads.get(rtid) or []
                        # Push/pop ranges nest on their thread: once those that ended are off
                        # the top, all the rest enclose t (the loop below still skips any that
                        # ended, should a trace break the nesting).
                        while encl and encl[-1][_END] < t:
                            encl.pop()
                    else:
                        tid = "null"
                        encl = []
                    pstack = procs.get(gpid)
                    if pstack:
                        encl = sorted(encl + _enclosing(pstack, t), key=_outer_first)

                marker = module = owner = innermost_torch = bseq = node = nccl_calls = None
                torch_ops: list[str] = []
                seqs: list[int] = []
                layers: list[str] | tuple[str, ...] = []
                others: list[str] = []
                bwd = False
                for r in encl:
                    if r[_END] < t:
                        continue
                    lab = r[_LABEL]
                    if lab is None:
                        lab = r[_LABEL] = classify(r[_DOMAIN], r[_TEXT])
                    kind = lab.kind
                    if kind == TORCH:
                        torch_ops.append(lab.js)
                        owner = r
                        innermost_torch = lab
                        if lab.bwd:
                            bwd = True
                            if lab.seq is not None:
                                seqs.append(lab.seq)
                                bseq = lab.seq
                            elif r[_NODE_SEQ] is not None:
                                bseq = r[_NODE_SEQ]
                            elif report is not None and r[_START] < fresh:
                                report.node_seqs.add(r[_KEY])
                        elif lab.seq is not None:
                            seqs.append(lab.seq)
                    elif kind == OP:
                        marker = lab
                        owner = r
                        if lab.bwd:
                            bwd = True
                    elif kind == BWD:
                        node = lab
                        owner = r
                        bwd = True
                    elif kind == MODULE:
                        module = lab.js
                    elif kind == LAYER:
                        layers.append(lab.js)
                    else:
                        others.append(lab.js)
                        if r[_NCCL] is not None:
                            nccl_calls = r[_NCCL]
                if not bwd and owner is None:
                    if rtid in autograd_threads:
                        # PyTorch runs CUDA backward on its own thread: a launch there that no op
                        # range explains is backward work (a forward op range, even on a thread
                        # that once ran backward, as CPU autograd does on the caller's, says fprop).
                        bwd = True
                        if not (torch_ops or marker or node or module or layers or others):
                            # No range at all: the engine between nodes (a gradient accumulated
                            # where a tensor fed two ops) works for the node that just ended,
                            # unless a backward call started since (another pass).
                            top = tops.get(rtid)
                            if top is None or (report is not None and top[1] < fresh):
                                if report is not None:
                                    report.tops_missed.add(rtid)
                            elif top[0] is not None and top[1] >= calls.get(gpid, NEVER):
                                bseq = top[0]
                    elif report is not None:
                        report.negatives.add(rtid)
                if owner is not None:
                    sub = owner[_COUNT]
                    owner[_COUNT] = sub + 1
                    if report is not None and owner[_START] < fresh:
                        report.owners.add(owner[_KEY])
                else:
                    sub = 0

                fwd = None
                source = marker
                if bseq is not None:
                    ops = fwd_ops.get(gpid)
                    if ops is not None:
                        fwd = ops.get(bseq)
                    if fwd is None and report is not None:
                        fwd = guessed.get(gpid, {}).get(bseq)
                        if fwd is None:
                            report.misses.setdefault((gpid, bseq), spans.closed(gpid))
                        else:
                            report.guesses[(gpid, bseq)] = fwd
                    if fwd is None and spans.pending:
                        # A node of a call whose span no later payload range closed yet.
                        fwd = spans.lookup(gpid, bseq)
                    if fwd is not None:
                        if fwd[0] is not None:
                            source = fwd[0]
                        if not layers:
                            # The autograd thread sees none of the user's layer ranges:
                            # a backward kernel belongs to its forward op's layers.
                            layers = fwd[2]
                if fwd is None and node is not None:
                    # No PyTorch node range said which forward op this is (no emit_nvtx): the
                    # pyprof bwd marker carries the forward op's marker itself.
                    source = node
                if source is not None:
                    mod, op, trace, marker_module = source.attrs
                    if source is not marker:
                        module = marker_module or module
                    elif module is None:
                        module = marker_module
                else:
                    trace = "null"
                    if fwd is not None:
                        mod, op = _split_op(fwd[1])
                    elif innermost_torch is not None:
                        mod, op = _split_op(innermost_torch.name)
                    else:
                        mod = op = "null"
                tail = (f'"dir":"{"bprop" if bwd else "optim" if mod == _OPTIM else "fprop"}","mod":{mod},"op":{op},'
                        f'"marker":{marker.js if marker is not None else "null"},'
                        f'"fwd":{_fwd_js(bseq, fwd) if fwd is not None else node.js if node is not None else "null"},"torchOps":[{",".join(torch_ops)}],'
                        f'"seqId":{seqs[-1] if seqs else "null"},"altSeqId":[{",".join(map(str, seqs[:-1]))}],'
                        f'"subSeqId":{sub},"layer":[{",".join(layers)}],"module":{module or "null"},'
                        f'"trace":{trace},"ranges":[{",".join(others)}]'
                        f'{"" if nccl_calls is None else nccl.member_js(nccl_calls)}}}')
                src = row[src_at]
                if src == SRC_CAPTURED:
                    if op != "null":
                        captured[row[node_at]] = tail
                    continue
                if src == SRC_KERNEL and row[origin_at] is not None:
                    at_capture = captured.get(row[origin_at])
                    if at_capture is not None:
                        tail, op = at_capture, "captured"
                    elif report is not None:
                        report.captured_misses.add(row[origin_at])
                if op != "null":
                    with_op += 1
                start, end = row[start_at] + clock, row[end_at] + clock
                pid = "null" if gpid is None else (gpid >> 24) & _TID_BITS
                if src == SRC_KERNEL:
                    kernels += 1
                    dev = row[device_at]
                    gpu = gpu_js.get((pid, dev))
                    if gpu is None:
                        gpu = gpu_js[(pid, dev)] = encode(gpus.lookup(None if gpid is None else pid, dev))
                    line = (f'{{"v":{SCHEMA_VERSION},"kind":"kernel",'
                            f'"kShortName":{names.get(row[short_at]) or name_js(row[short_at])},'
                            f'"kLongName":{names.get(row[long_at]) or name_js(row[long_at])},"kDuration":{end - start},'
                            f'"kStart":{start},"kEnd":{end},"device":{dev},"stream":{row[stream_at]},'
                            f'"grid":[{row[gx_at]},{row[gy_at]},{row[gz_at]}],'
                            f'"block":[{row[bx_at]},{row[by_at]},{row[bz_at]}],'
                            f'"regs":{row[regs_at]},"staticShared":{row[sshared_at]},'
                            f'"dynamicShared":{row[dshared_at]},"pid":{pid},"tid":{tid},'
                            f'"correlationId":{row[corr_at]},"launch":{launch},"graphNode":{row[graph_at]},'
                            f'"gpu":{gpu},{tail}')
                else:
                    head = (f'"kDuration":{end - start},"kStart":{start},"kEnd":{end},"device":{row[device_at]},'
                            f'"stream":{row[stream_at]},"pid":{pid},"tid":{tid},"correlationId":{row[corr_at]},'
                            f'"launch":{launch},"bytes":{row[bytes_at]},')
                    if src == SRC_MEMCPY:
                        copy_kind = row[kind_at]
                        if copy_kind is None:  # no copyKind column
                            short, kind_js = '"memcpy"', "null"
                        else:
                            kind_js = copy_kinds.get(copy_kind) or encode_str(str(copy_kind))
                            short = f'"memcpy {kind_js[1:-1]}"'
                        line = (f'{{"v":{SCHEMA_VERSION},"kind":"memcpy","kShortName":{short},'
                                f'{head}"copyKind":{kind_js},{tail}')
                    else:
                        line = f'{{"v":{SCHEMA_VERSION},"kind":"memset","kShortName":"memset",{head}{tail}'
                # Counted once the record is made (making it reads names, which can fail: that
                # record was not written) and before the yield (the consumer may stop there, and
                # the record was written).
                n_records += 1
                yield line
            if report is not None:
                _leave(report, autograd_threads, threads, procs, window.end)
            if window is not None:
                # A seeded run's forward ops and pending spans are exact: they hold what closing
                # the seed's pending spans entered (window.compose).
                window.report.fwd, window.report.pending = fwd_ops, spans.pending
                window.report.tops, window.report.calls = tops, calls
                window.report.nccl = groups.state
                window.report.nccl_nested, window.report.nccl_ended = groups.nested, groups.ended
                # Seeded or not: a captured node's attribution may depend on the seed, so the
                # exact ones come from a seeded run (parallel.py passes them on).
                window.report.captured = {k: v for k, v in captured.items() if seed is None or k not in seed.captured}
    finally:
        # Counted in locals in the loop (attribute stores cost); published even on failure, so
        # the caller can say how many records were written before it.
        stats.records += n_records
        stats.kernels += kernels
        stats.with_op += with_op
        stats.no_launch += no_launch
        stats.not_understood += groups.unknown
        # Close the cursors now, while the connection is open, not whenever they are collected;
        # the merge first: closed later, it would close its current cursor again on a closed
        # database, and Python would print that on stderr ("Exception ignored in ... merge").
        merged.close()
        for stream in streams:
            stream.close()
