"""The merge sweep: walk activities in launch order and NVTX ranges in start order together, and
attribute every kernel (memcpy, memset) to the ranges open around its launch call.

The sweep (`lines`) runs four stages, data flowing one way, for each activity row:

1. range intake (intake.Intake): the ranges that started by the row's launch go onto their
   scope's list of open ranges;
2. attribution (`_Attribution`): the ranges open around the launch give the record's marker, op,
   layers, direction and, for a backward kernel, its forward op, as JSON text;
3. CUDA graph capture: a captured node's attribution is kept for its replays (below);
4. record text (`_RecordText`): the activity's own fields, and the attribution, as one line.

Setup (`_open_streams`) and the window bookkeeping at the end (`_report_end`) run once. The
stages are called once per row, not once per range: the loops over ranges stay inside them.

A kernel replayed from a CUDA graph was launched by cudaGraphLaunch; the call that created its
node is the one that explains it. For a graph captured inside the trace (torch.cuda.graph,
make_graphed_callables), the creation of each captured node comes through the sweep as a row of
its own at its capture time, is attributed like a launch, and its attribution (when it has an
op) is kept by node id for the replays of that node (queries.captured_sql); a graph captured
before the trace keeps its replay's attribution.

Records are assembled as JSON text from fragments encoded once per range (ranges.Label) and
per kernel name: re-encoding the same marker for every kernel it encloses would cost more than
everything else parse does.
"""
from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterator

from pyprof.formats import AMP_MOD, OPTIM_MOD
from pyprof.formats import VERSION as SCHEMA_VERSION
from pyprof.parse import ddp_buckets, nccl, queries
from pyprof.parse.consumers import DATA_SIZED
from pyprof.parse.export import Export
from pyprof.parse.gpu import GpuInfo
from pyprof.parse.out_marks import OutMarks, out_marks
from pyprof.parse.intake import COUNT, DOMAIN, END, KEY, LABEL, NCCL, NODE_SEQ, NVTX_FIELDS, START, TEXT, Intake, Range
from pyprof.parse.queries import SRC_CAPTURED, SRC_KERNEL, SRC_MEMCPY
from pyprof.parse.ranges import BWD, LAYER, MODULE, OP, TORCH, Label, classify, encode, encode_str, is_accumulation
from pyprof.parse.window import Report, Window
from pyprof.parse.zones import OPEN_END

_TID_BITS = 0xFFFFFF
_NAME_CACHE = 65536
# Activity row fields (queries.py's layouts). Memcpy and memset rows have `bytes` at the same
# position (queries.MEMSET_ROW).
(_SORT, _START, _SRC, _END, _DEVICE, _STREAM, _CORR, _GPID, _LSTART, _LEND, _LTID, _API, _SHORT, _LONG,
 _GX, _GY, _GZ, _BX, _BY, _BZ, _REGS, _SSHARED, _DSHARED, _GRAPH, _ORIGIN) = (queries.KERNEL_AT[f] for f in (
    "sort_key", "start", "source", "end", "device", "stream", "correlation_id", "global_pid", "launch_start",
    "launch_end", "launch_tid", "launch_api", "short_name", "long_name", "grid_x", "grid_y", "grid_z", "block_x",
    "block_y", "block_z", "regs", "static_shared", "dynamic_shared", "graph_node", "graph_origin"))
_BYTES, _COPY_KIND = queries.MEMCPY_AT["bytes"], queries.MEMCPY_AT["copy_kind"]
_NODE = queries.CAPTURED_AT["node"]
# Appended to a window's activities: takes in the ranges left before the window's end.
_DRAIN = (OPEN_END,)
# The JSON `mod` of an optimizer step's marker (`torch.optim`, `SGD.step`) and of GradScaler's
# (`torch.amp`, `GradScaler.unscale_`): their kernels are neither forward nor backward work,
# direction `optim` (docs/records.md).
_OPTIM = (encode_str(OPTIM_MOD), encode_str(AMP_MOD))


class Stats:
    """Counts for the closing summary."""

    def __init__(self) -> None:
        self.records = 0
        self.kernels = 0
        self.with_op = 0
        self.no_launch = 0
        self.not_understood = 0
        self.malformed = 0


def _str(s: str | None) -> str:
    return "null" if s is None else encode_str(s)


def _split_op(name: str) -> tuple[str, str]:
    """JSON of (mod, op) for a PyTorch op name: `aten::addmm` -> "aten", "addmm"."""
    mod, sep, op = name.rpartition("::")
    return (_str(mod or None), encode_str(op)) if sep else ("null", encode_str(name))


def _enclosing(stack: list[Range], t: int) -> list[Range]:
    # Start/end ranges need not nest: an ended one can hide below an open one, so besides
    # dropping ended ranges from the top (which keeps the list short), filter them all.
    while stack and stack[-1][END] < t:
        stack.pop()
    return [r for r in stack if r[END] >= t]


def _fwd_js(seq: int, fwd: tuple[Label | None, str | None, tuple[str, ...], int | None]) -> str:
    marker, name, _, call = fwd
    if marker is None:
        return f'{{"seq":{seq},"marker":null,"torchOp":{encode_str(name)}}}'
    return f'{{"seq":{seq},"marker":{marker.js},"torchOp":{_str(name)},"call":{call}}}'


def _outer_first(r: Range) -> tuple[int, int]:
    return (r[START], -r[END])


class _Attribution:
    """The attribution part of each record (marker, op, direction, forward op, layers, ranges:
    docs/records.md) from the ranges `intake` holds open around its launch. With `report` (a
    speculative window), notes what an earlier window may have set (window.Report)."""

    __slots__ = ("threads", "procs", "autograd", "fwd_ops", "guessed", "spans", "report",
                 "fresh", "stats", "ddp", "outs", "live_top", "consumers")

    def __init__(self, intake: Intake, report: Report | None, stats: Stats,
                 ddp: dict[tuple[int, int], nccl.Call], outs: OutMarks | None = None) -> None:
        self.threads, self.procs, self.autograd = intake.threads, intake.procs, intake.autograd
        self.spans = intake.spans
        self.fwd_ops, self.guessed = intake.fwd_ops, intake.guessed
        self.report, self.fresh, self.stats = report, intake.fresh, stats
        self.ddp = ddp  # DDP's bucket all-reduces sized from its marker (ddp_buckets)
        self.outs = outs if outs is not None and outs.threads else None  # out_marks.py
        self.live_top = intake.live_top  # the same report as this window's (a speculative one's)
        self.consumers = intake.consumers

    def of(self, row: tuple, t: int) -> tuple[str, str]:
        """(the attribution fields of activity `row`'s record as JSON text, closing brace
        included; its `op` JSON) for sort key `t`."""
        gpid, rtid = row[_GPID], row[_LTID]
        encl: list[Range] = []
        if row[_LSTART] is None:
            self.stats.no_launch += 1
        else:
            if rtid is not None:
                encl = self.threads.get(rtid) or encl
                # Push/pop ranges nest on their thread: once those that ended are off the top,
                # all the rest enclose t (the loop below still skips any that ended, should a
                # trace break the nesting).
                while encl and encl[-1][END] < t:
                    encl.pop()
            pstack = self.procs.get(gpid)
            if pstack:
                encl = sorted(encl + _enclosing(pstack, t), key=_outer_first)

        report, fresh = self.report, self.fresh
        marker = marker_range = module = owner = innermost_torch = bseq = node = nccl_calls = None
        torch_ops: list[Label] = []
        seqs: list[int] = []
        layers: list[str] | tuple[str, ...] = []
        others: list[str] = []
        bwd = False
        for r in encl:
            if r[END] < t:
                continue
            lab = r[LABEL]
            if lab is None:
                lab = r[LABEL] = classify(r[DOMAIN], r[TEXT])
            kind = lab.kind
            if kind == TORCH:
                torch_ops.append(lab)
                owner = r
                innermost_torch = lab
                if lab.bwd:
                    bwd = True
                    if lab.seq is not None:
                        seqs.append(lab.seq)
                        bseq = lab.seq
                    else:
                        bseq = self._node_seq(lab, r, rtid, gpid, bseq)
                elif lab.seq is not None:
                    seqs.append(lab.seq)
            elif kind == OP:
                marker = lab
                marker_range = owner = r
                if lab.bwd:
                    bwd = True
                elif bwd:
                    # A forward call made inside a backward node (activation checkpointing's
                    # recompute, a custom autograd.Function's backward calling torch): its
                    # kernels are that call's forward work, not the node's.
                    bwd, bseq, node = False, None, None
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
                if r[NCCL] is not None:
                    nccl_calls = r[NCCL]
        if not bwd and owner is None:
            if rtid in self.autograd:
                # PyTorch runs CUDA backward on its own thread: a launch there that no op range
                # explains is backward work (a forward op range, even on a thread that once ran
                # backward, as CPU autograd does on the caller's, says fprop).
                bwd = True
                if not (torch_ops or marker or node or module or layers or others):
                    bseq = self._between_nodes(rtid, gpid)
            elif report is not None:
                report.negatives.add(rtid)
        sub = 0
        if owner is not None:
            sub = owner[COUNT]
            owner[COUNT] = sub + 1
            if report is not None and owner[START] < fresh:
                report.owners.add(owner[KEY])

        if nccl_calls is None and self.ddp and (gpid, row[_CORR]) in self.ddp:
            nccl_calls = (self.ddp[(gpid, row[_CORR])],)
        fwd = None if bseq is None else self._forward(gpid, bseq)
        source = marker
        if fwd is not None:
            if fwd[0] is not None:
                source = fwd[0]
            if not layers:
                # The autograd thread sees none of the user's layer ranges: a backward kernel
                # belongs to its forward op's layers.
                layers = fwd[2]
        elif node is not None:
            # No PyTorch node range said which forward op this is (no emit_nvtx): the pyprof
            # bwd marker carries the forward op's marker itself.
            source = node
        mod, op, trace, module = _named(source, marker, module, fwd, innermost_torch)
        marker_js = "null" if marker is None else marker.js if self.outs is None else self._marked(marker, marker_range, rtid)
        heard = "" if rtid is None or not (torch_ops or self.consumers.listening or self.consumers.heard) \
            else self._heard(rtid, torch_ops)
        return (f'"dir":"{"bprop" if bwd else "optim" if mod in _OPTIM else "fprop"}","mod":{mod},"op":{op},'
                f'"marker":{marker_js},'
                f'"fwd":{_fwd_js(bseq, fwd) if fwd is not None else node.js if node is not None else "null"},'
                f'"torchOps":[{",".join(lab.js for lab in torch_ops)}],'
                f'"seqId":{seqs[-1] if seqs else "null"},"altSeqId":[{",".join(map(str, seqs[:-1]))}],'
                f'"subSeqId":{sub},"layer":[{",".join(layers)}],"module":{module or "null"},'
                f'"trace":{trace},"ranges":[{",".join(others)}]{heard}'
                f'{"" if nccl_calls is None else nccl.member_js(nccl_calls)}}}'), op

    def _heard(self, rtid: int, torch_ops: list[Label]) -> str:
        """The `consumers` member of a launch on thread `rtid` inside PyTorch ranges `torch_ops`
        (consumers.py), which then listens for their readers if one is a data-sized op's."""
        sized = any(lab.name in DATA_SIZED for lab in torch_ops)
        return self.consumers.launched(rtid, [lab.op_id for lab in torch_ops if lab.op_id is not None] if sized else None)

    def _node_seq(self, lab: Label, r: Range, rtid: int, gpid: int, bseq: int | None) -> int | None:
        """The node seq of an autograd range `r` that carries none (`bseq` where none is found): the
        node range an engine wrapper range wraps; for AccumulateGrad (a leaf's gradient stored:
        grad += new, or copied into the parameter's layout), the node that produced it
        (Intake._produced). A speculative window notes an inherited wrapper it cannot tell."""
        if r[NODE_SEQ] is not None:
            return r[NODE_SEQ]
        if is_accumulation(lab):
            return self._between_nodes(rtid, gpid, accumulation=True)
        if self.report is not None and r[START] < self.fresh:
            self.report.node_seqs.add(r[KEY])
        return bseq

    def _marked(self, marker: Label, r: Range, rtid: int | None) -> str:
        """The op marker's JSON with the `out` member of an out mark inside its range (out_marks.py):
        asked only where the trace has such marks (self.outs)."""
        return self.outs.marker_js(marker.js, rtid, r[START], r[END])

    def _between_nodes(self, rtid: int, gpid: int, accumulation: bool = False) -> int | None:
        """The node seq of a launch on autograd thread `rtid` that no range encloses: the engine
        between nodes (a gradient accumulated where a tensor fed two ops) works for the node
        that just ended, unless a backward call started since (another pass). `accumulation`: a
        launch inside an AccumulateGrad range, whose top entry holds the node it stores the
        gradient of; outside every range, after an AccumulateGrad, none (DDP's bucket work)."""
        top = self.live_top(rtid, gpid)
        return top[0] if top is not None and top[2] == accumulation else None

    def _forward(self, gpid: int, bseq: int) -> tuple[Label | None, str, tuple[str, ...], int | None] | None:
        """The forward op of node `bseq` of process `gpid`, None when unknown."""
        fwd = None
        ops = self.fwd_ops.get(gpid)
        if ops is not None:
            fwd = ops.get(bseq)
        report = self.report
        if fwd is None and report is not None:
            fwd = self.guessed.get(gpid, {}).get(bseq)
            if fwd is None:
                report.misses.setdefault((gpid, bseq), self.spans.closed(gpid))
            else:
                report.guesses[(gpid, bseq)] = fwd
        if fwd is None and self.spans.pending:
            # A node of a call whose span no later payload range closed yet.
            fwd = self.spans.lookup(gpid, bseq)
        return fwd


def _named(source: Label | None, marker: Label | None, module: str | None, fwd: tuple | None,
           innermost_torch: Label | None) -> tuple[str, str, str, str | None]:
    """(mod, op, trace, module) JSON of a launch: from the marker that describes its op (`source`:
    its own op marker, or the forward op's of a backward kernel), whose module wins over the
    module range's for a forward op's; else the op's PyTorch name (the forward op's, else the
    innermost range's)."""
    if source is not None:
        mod, op, trace, marker_module = source.attrs
        if source is not marker:
            module = marker_module or module
        elif module is None:
            module = marker_module
        return mod, op, trace, module
    if fwd is not None:
        mod, op = _split_op(fwd[1])
    elif innermost_torch is not None:
        mod, op = _split_op(innermost_torch.name)
    else:
        mod = op = "null"
    return mod, op, "null", module


class _RecordText:
    """An activity row's record as one line of JSON text: its own fields, then the attribution
    fields (`_Attribution.of`). `clock` is added to every time written."""

    __slots__ = ("exp", "gpus", "copy_kinds", "clock", "names", "gpu_js", "string_sql")

    def __init__(self, exp: Export, gpus: GpuInfo, copy_kinds: dict[Any, str], clock: int) -> None:
        self.exp, self.gpus, self.copy_kinds, self.clock = exp, gpus, copy_kinds, clock
        self.names: dict[int | str | None, str] = {}
        self.gpu_js: dict[tuple[Any, Any], str] = {}
        self.string_sql = queries.string_sql(exp)

    def name(self, sid: int | str | None) -> str:
        """JSON of the name with StringIds id `sid` (an export that stores the name itself gives a
        str): looked up once per distinct id, not per row."""
        names = self.names
        js = names.get(sid)
        if js is None:
            if len(names) >= _NAME_CACHE:
                names.clear()
            if isinstance(sid, int) and self.string_sql is not None:
                js = _str(self.exp.scalar(self.string_sql, (sid,)))
            else:
                js = _str(sid if isinstance(sid, str) else None)
            names[sid] = js
        return js

    def line(self, row: tuple, src: int, tail: str) -> str:
        """The record of activity `row` of source `src`, ending in the attribution `tail`."""
        names, clock = self.names, self.clock
        gpid = row[_GPID]
        if row[_LSTART] is None:
            launch = tid = "null"
        else:
            api = names.get(row[_API]) or self.name(row[_API])
            launch = f'{{"api":{api},"start":{row[_LSTART] + clock},"duration":{row[_LEND] - row[_LSTART]}}}'
            tid = "null" if row[_LTID] is None else str(row[_LTID] & _TID_BITS)
        start, end = row[_START] + clock, row[_END] + clock
        pid = "null" if gpid is None else (gpid >> 24) & _TID_BITS
        if src == SRC_KERNEL:
            dev = row[_DEVICE]
            gpu = self.gpu_js.get((pid, dev))
            if gpu is None:
                gpu = self.gpu_js[(pid, dev)] = encode(self.gpus.lookup(None if gpid is None else pid, dev))
            return (f'{{"v":{SCHEMA_VERSION},"kind":"kernel",'
                    f'"kShortName":{names.get(row[_SHORT]) or self.name(row[_SHORT])},'
                    f'"kLongName":{names.get(row[_LONG]) or self.name(row[_LONG])},"kDuration":{end - start},'
                    f'"kStart":{start},"kEnd":{end},"device":{dev},"stream":{row[_STREAM]},'
                    f'"grid":[{row[_GX]},{row[_GY]},{row[_GZ]}],'
                    f'"block":[{row[_BX]},{row[_BY]},{row[_BZ]}],'
                    f'"regs":{row[_REGS]},"staticShared":{row[_SSHARED]},'
                    f'"dynamicShared":{row[_DSHARED]},"pid":{pid},"tid":{tid},'
                    f'"correlationId":{row[_CORR]},"launch":{launch},"graphNode":{row[_GRAPH]},'
                    f'"gpu":{gpu},{tail}')
        head = (f'"kDuration":{end - start},"kStart":{start},"kEnd":{end},"device":{row[_DEVICE]},'
                f'"stream":{row[_STREAM]},"pid":{pid},"tid":{tid},"correlationId":{row[_CORR]},'
                f'"launch":{launch},"bytes":{row[_BYTES]},')
        if src == SRC_MEMCPY:
            copy_kind = row[_COPY_KIND]
            if copy_kind is None:  # no copyKind column
                short, kind_js = '"memcpy"', "null"
            else:
                kind_js = self.copy_kinds.get(copy_kind) or encode_str(str(copy_kind))
                short = f'"memcpy {kind_js[1:-1]}"'
            return f'{{"v":{SCHEMA_VERSION},"kind":"memcpy","kShortName":{short},{head}"copyKind":{kind_js},{tail}'
        return f'{{"v":{SCHEMA_VERSION},"kind":"memset","kShortName":"memset",{head}{tail}'


def _open_streams(exp: Export, memcpy: bool, window: Window | None) -> tuple[list[Any], Iterator[Any], Iterator[Any]]:
    """The cursors of the sweep's queries (to close at the end), the activity rows in launch
    order (merged across the activity tables) and the NVTX rows (NVTX_FIELDS) in start order,
    of `window` only when given."""
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
        nvtx_sql = (queries.nvtx_sql(exp, NVTX_FIELDS, *window.nvtx_clause()) if window is not None
                    else queries.nvtx_sql(exp, NVTX_FIELDS))
        if nvtx_sql:
            streams.append(exp.rows(*nvtx_sql))
    except BaseException:
        for stream in streams:
            stream.close()
        raise
    nvtx = iter(streams[-1]) if nvtx_sql else iter(())
    activity_streams = streams[:-1] if nvtx_sql else streams
    merged = iter(activity_streams[0]) if len(activity_streams) == 1 else heapq.merge(*activity_streams)
    return streams, merged, nvtx


def _leave(report: Report, intake: Intake, end: int | None) -> None:
    """What a speculative window leaves to the next one (window.Report)."""
    report.autograd = intake.autograd
    if end is None:
        return
    for scopes, push_pop in ((intake.threads, True), (intake.procs, False)):
        for scope, stack in scopes.items():
            for r in stack:
                if r[END] >= end:
                    key = r[KEY]
                    own = key or (scope, push_pop, r[START], r[END], r[DOMAIN], r[TEXT])
                    report.open_end[own] = (r[COUNT], r[NODE_SEQ], key is not None)


def _report_end(window: Window, intake: Intake, captured: dict[int, str]) -> None:
    """Fill `window`'s Report with the sweep's state at the window's end."""
    seed, report = window.seed, window.report
    if seed is None:
        _leave(report, intake, window.end)
    # A seeded run's forward ops and pending spans are exact: they hold what closing the seed's
    # pending spans entered (window.compose).
    report.fwd, report.pending = intake.fwd_ops, intake.spans.pending
    report.tops, report.calls = intake.tops, intake.calls
    report.nccl, report.nccl_nested, report.nccl_ended = intake.groups.state, intake.groups.nested, intake.groups.ended
    heard = intake.consumers
    report.consumers = {gtid: heard.state(gtid) for gtid in heard.touched}
    # Seeded or not: a captured node's attribution may depend on the seed, so the exact ones come
    # from a seeded run (parallel.py passes them on).
    report.captured = {k: v for k, v in captured.items() if seed is None or k not in seed.captured}


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
        ddp = ddp_buckets.ddp_calls(exp)
        outs = out_marks(exp)
    streams, merged, nvtx = _open_streams(exp, memcpy, window)
    activities = merged
    if window is not None and window.end is not None:
        activities = itertools.chain(activities, (_DRAIN,))
    report = None if window is None or window.seed is not None else window.report
    # Captured CUDA graph node -> the attribution part of its replays' records.
    captured: dict[int, str] = dict(window.seed.captured) if window is not None and window.seed is not None else {}
    text = _RecordText(exp, gpus, copy_kinds, clock)
    line = text.line
    n_records = kernels = with_op = 0
    try:
        with exp.errors():
            intake = Intake(nvtx, domains, stats, window, groups)
            take, attribute = intake.take, _Attribution(intake, report, stats, ddp, outs).of
            for row in activities:
                t = row[_SORT]
                if t >= intake.due:
                    take(t)
                if row is _DRAIN:
                    break
                tail, op = attribute(row, t)
                src = row[_SRC]
                if src == SRC_CAPTURED:
                    if op != "null":
                        captured[row[_NODE]] = tail
                    continue
                if src == SRC_KERNEL:
                    kernels += 1
                    if row[_ORIGIN] is not None:
                        at_capture = captured.get(row[_ORIGIN])
                        if at_capture is not None:
                            tail, op = at_capture, "captured"
                        elif report is not None:
                            report.captured_misses.add(row[_ORIGIN])
                if op != "null":
                    with_op += 1
                record = line(row, src, tail)
                # Counted once the record is made (making it reads names, which can fail: that
                # record was not written) and before the yield (the consumer may stop there, and
                # the record was written).
                n_records += 1
                yield record
            if window is not None:
                _report_end(window, intake, captured)
    finally:
        # Counted in locals in the loop (attribute stores cost); published even on failure, so
        # the caller can say how many records were written before it.
        stats.records += n_records
        stats.kernels += kernels
        stats.with_op += with_op
        stats.not_understood += groups.unknown
        # Close the cursors now, while the connection is open, not whenever they are collected;
        # the merge first: closed later, it would close its current cursor again on a closed
        # database, and Python would print that on stderr ("Exception ignored in ... merge").
        if exp.is_open():
            merged.close()
            for stream in streams:
                stream.close()
