"""The SQL parse runs, and so everything parse knows of the export's schema: one launch-ordered
query per activity table, one start-ordered NVTX query, and the small tables (domains, StringIds,
GPUs, memcpy kinds). A schema variant (docs/parse.md) is handled here.

Every table name is one of parse's constants and every column is checked with Export.has first
(missing optional columns become NULL); values are bound parameters.
Sorting and the kernel-to-launch join happen inside SQLite, which spills to its own temporary
files, so Python never holds more than a batch of rows.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

from pyprof.parse.export import (CUDA_DEVICE, GPU, GRAPH_NODES, KERNEL, MEMCPY, MEMCPY_ENUM, MEMSET, NVTX, RUNTIME,
                                  SESSION_START, STRINGS, Export)

# Sources of activity rows (the `source` field of every activity row). SRC_CAPTURED rows are no
# activity: the creation of a CUDA graph's kernel node by stream capture, whose replays are
# explained by the ranges open at that moment (captured_sql).
SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET, SRC_CAPTURED = 0, 1, 2, 3

# NVTX eventType codes (ENUM_NSYS_EVENT_TYPE).
PUSH_POP, START_END, PUSH_POP_T, START_END_T, DOMAIN_CREATE = 59, 60, 70, 71, 75
MARK = 34  # nvtxMark / nvtxDomainMarkEx
RANGE_TYPES = (PUSH_POP, START_END, PUSH_POP_T, START_END_T)

# globalTid -> globalPid: bits 0-23 are the tid. 0xFFFFFFFFFF000000 as a signed 64-bit integer,
# which is how SQLite stores it.
PID_MASK_SQL = -16777216

# Rows by name. Each query's SELECT list is built from its layout below, so a row's positions are
# defined here once; readers look positions up by name (`KERNEL_AT["regs"]`) and bind them as locals.
# Names (launch API, kernel short and demangled names) come as StringIds ids: a few hundred distinct
# ones stand behind millions of rows, so lines() resolves each id once (string_sql) instead of
# SQLite carrying the long strings through the join and the sort.
#
# Every activity row begins with these: the sort key (CPU start of the launch call, else own
# start) and the GPU start first, so heapq.merge orders rows of several tables by launch, then
# the source (SRC_*), which says which layout the rest of the row has.
ACTIVITY_ROW = ("sort_key", "start", "source", "end", "device", "stream", "correlation_id", "global_pid",
                "launch_start", "launch_end", "launch_tid", "launch_api")
# The kernel's own fields, row name -> CUPTI_ACTIVITY_KIND_KERNEL column: names (StringIds ids),
# then columns that are only printed.
_KERNEL_NAMES = {"short_name": "shortName", "long_name": "demangledName"}
_KERNEL_PRINTED = {"grid_x": "gridX", "grid_y": "gridY", "grid_z": "gridZ", "block_x": "blockX", "block_y": "blockY",
                   "block_z": "blockZ", "regs": "registersPerThread", "static_shared": "staticSharedMemory",
                   "dynamic_shared": "dynamicSharedMemory", "graph_node": "graphNodeId"}
# `graph_origin`: for a kernel replayed from an instantiated CUDA graph, the captured node it was
# instantiated from (CUDA_GRAPH_NODE_EVENTS.originalGraphNodeId), else NULL.
KERNEL_ROW = ACTIVITY_ROW + tuple(_KERNEL_NAMES) + tuple(_KERNEL_PRINTED) + ("graph_origin",)
# A captured node's creation, read through the same sweep as a launch: `node` is its id.
CAPTURED_ROW = ACTIVITY_ROW + ("node",)
# Memcpy and memset rows share `bytes` at one position, so the sweep reads both alike.
MEMSET_ROW = ACTIVITY_ROW + ("bytes",)
MEMCPY_ROW = MEMSET_ROW + ("copy_kind",)
KERNEL_AT, MEMCPY_AT, MEMSET_AT, CAPTURED_AT = ({name: i for i, name in enumerate(layout)}
                                             for layout in (KERNEL_ROW, MEMCPY_ROW, MEMSET_ROW, CAPTURED_ROW))
# The fields an NVTX row can have. Its reader names the ones it wants in the order it unpacks
# them: a range read field by field costs four times a tuple unpack, and about five arrive per kernel.
# `payload`: the range's int64 payload (pyprof op ranges carry autograd sequence numbers in it,
# docs/markers.md), NULL when absent, not an integer or negative. `blob`: the extended payload's
# bytes (NCCL's ranges carry them: nccl.py), NULL unless the export was made with --include-blobs.
NVTX_FIELDS = ("start", "end", "event_type", "global_tid", "domain_id", "text", "payload", "blob")


def _select(layout: Sequence[str], exprs: dict[str, str]) -> str:
    """The SELECT list of a row of `layout`, each field's SQL taken from `exprs` by name."""
    return ", ".join(exprs[name] for name in layout)


def _string(exp: Export, expr: str, alias: str) -> tuple[str, str]:
    """Select the StringIds value for id `expr` (NULL when StringIds is missing)."""
    if not exp.has(STRINGS, "id", "value") or expr == "NULL":
        return "NULL", ""
    return f"{alias}.value", f" LEFT JOIN {STRINGS} {alias} ON {alias}.id = {expr}"


def _out(expr: str) -> str:
    # Columns that are only printed come back as the JSON text of their value: an integer, or
    # 'null' for a NULL or a missing column, so the record is assembled without a test per field.
    # CAST: a value nsys never writes there (text, a real) still makes valid JSON, as SQLite's
    # integer reading of it; a typeof() test instead would cost 2% of parse, for files nsys never writes.
    return f"ifnull(CAST({expr} AS INTEGER), 'null')"


def _time(expr: str) -> str:
    # A time that is no integer (a real, an infinity) comes back NULL: the sweep then fails on it
    # and Export.errors() names the column, instead of writing `inf` into a record.
    return f"iif(typeof({expr}) = 'integer', {expr}, NULL)"


def activity_sql(exp: Export, table: str, src: int, on: str = "", where: str = "") -> str:
    """Rows of one activity table joined to their launch call, in launch order. `on` and `where`
    (window.py's, with their parameters bound by the caller) add join and row conditions."""
    c = functools.partial(exp.col, table, "x")
    joins = ""
    if exp.has(RUNTIME, "correlationId", "start", "end"):
        cond = "r.correlationId = x.correlationId"
        # Correlation ids repeat across processes: join within the process when both sides
        # say which process they belong to.
        if exp.has(table, "globalPid") and exp.has(RUNTIME, "globalTid"):
            cond += f" AND x.globalPid = (r.globalTid & {PID_MASK_SQL})"
        joins += f" LEFT JOIN {RUNTIME} r ON {cond}{on}"
        rstart, rend, rtid = _time("r.start"), _time("r.end"), exp.col(RUNTIME, "r", "globalTid")
        api = exp.col(RUNTIME, "r", "nameId")
    else:
        rstart = rend = rtid = api = "NULL"
    start = _time("x.start")
    exprs = {"sort_key": f"coalesce({rstart}, {start})", "start": start, "source": str(src), "end": _time("x.end"),
             "device": _out(c("deviceId")), "stream": _out(c("streamId")), "correlation_id": _out("x.correlationId"),
             "global_pid": c("globalPid"), "launch_start": rstart, "launch_end": rend, "launch_tid": rtid,
             "launch_api": api}
    if src == SRC_KERNEL:
        layout = KERNEL_ROW
        exprs.update({name: c(col) for name, col in _KERNEL_NAMES.items()})
        exprs.update({name: _out(c(col)) for name, col in _KERNEL_PRINTED.items()})
        exprs["graph_origin"] = "NULL"
        if _has_graph_nodes(exp):
            # One origin per instantiated node, however many events name it.
            exprs["graph_origin"] = "g.origin"
            joins += (f" LEFT JOIN (SELECT graphNodeId AS node, min(originalGraphNodeId) AS origin FROM {GRAPH_NODES}"
                      " WHERE originalGraphNodeId IS NOT NULL GROUP BY graphNodeId) g ON g.node = x.graphNodeId")
    elif src == SRC_MEMCPY:
        layout = MEMCPY_ROW
        exprs.update(bytes=_out(c("bytes")), copy_kind=c("copyKind"))
    else:
        layout = MEMSET_ROW
        exprs.update(bytes=_out(c("bytes")))
    group = ""
    select = _select(layout, exprs)
    if joins:
        # A correlation id matching several launch calls (never so in an export nsys wrote)
        # must not write the kernel once per match: one row per activity row, joined to its
        # first launch (with one min(), SQLite takes the other columns from that row; the
        # trailing column is past every name of the layout).
        select += ", min(r.rowid)"
        group = " GROUP BY x.rowid"
    # Ties in launch time (all kernels of one CUDA graph launch share it) go by GPU start, then by
    # row: a total order, so that any query plan (a window's too) gives the same one.
    return (f"SELECT {select} FROM {table} x{joins}{' WHERE ' + where if where else ''}{group} "
            "ORDER BY 1, 2, x.rowid")


def _has_graph_nodes(exp: Export) -> bool:
    return exp.has(KERNEL, "graphNodeId") and exp.has(GRAPH_NODES, "start", "globalTid", "graphNodeId",
                                                       "originalGraphNodeId")


def captured_sql(exp: Export, where: str = "", params: tuple[int, ...] = ()) -> tuple[str, tuple[int, ...]] | None:
    """The stream-capture creations of CUDA graph kernel nodes that some instantiated node copies,
    as CAPTURED_ROW rows in time order (the creation is the capturing thread's launch call, so
    sort key and launch are its time and thread), with the parameters to bind; None when the
    export records no graph nodes. `where`/`params`: window.py's conditions."""
    if not _has_graph_nodes(exp):
        return None
    exprs = {"sort_key": "n.start", "start": "n.start", "source": str(SRC_CAPTURED), "end": "n.end",
             "device": "'null'", "stream": "'null'", "correlation_id": "'null'",
             "global_pid": f"(n.globalTid & {PID_MASK_SQL})", "launch_start": "n.start", "launch_end": "n.end",
             "launch_tid": "n.globalTid", "launch_api": "NULL", "node": "n.graphNodeId"}
    cond = f"{where + ' AND ' if where else ''}n.originalGraphNodeId IS NULL"
    return (f"SELECT {_select(CAPTURED_ROW, exprs)} FROM {GRAPH_NODES} n WHERE {cond} "
            f"AND n.graphNodeId IN (SELECT originalGraphNodeId FROM {GRAPH_NODES}) ORDER BY 1, 2, n.rowid", params)


def string_sql(exp: Export) -> str | None:
    """The query of one StringIds value by id (None when the export has no StringIds)."""
    return f"SELECT value FROM {STRINGS} WHERE id = ?" if exp.has(STRINGS, "id", "value") else None


def _payload(expr: str) -> str:
    # Only a non-negative integer is a payload pyprof wrote (docs/markers.md); anything else in a
    # damaged file reads as none, so the range is attributed as one of an older pyprof.
    return expr if expr == "NULL" else f"iif(typeof({expr}) = 'integer' AND {expr} >= 0, {expr}, NULL)"


def nvtx_sql(exp: Export, fields: Sequence[str] = NVTX_FIELDS, where: str = "",
             params: tuple[int, ...] = (), threads: Sequence[int] | None = None) -> tuple[str, tuple[int, ...]] | None:
    """NVTX ranges as rows of `fields` (of NVTX_FIELDS), by start, outer first, with the parameters to bind.

    At equal starts the longer range comes first (an open range, end NULL, is longest), so a
    list in this order is outermost-first. Push/pop ranges of threads that made no CUDA runtime
    call are left out: they can enclose no launch (data-loader threads push ranges by the
    thousand), and a thread that never calls CUDA runs no forward op whose backward does.
    Start/end ranges are all kept: they span threads. `where`/`params`: window.py's conditions,
    tested first (they are the cheapest and drop the most rows); `threads`: the globalTids of
    the runtime calls when known (zones.py), bound instead of read from the runtime table again.
    """
    if not exp.has(NVTX, "start", "end", "eventType"):
        return None
    text, joins = _text(exp)
    exprs = {"start": "n.start", "end": "n.end", "event_type": "n.eventType", "global_tid": exp.col(NVTX, "n", "globalTid"),
             "domain_id": exp.col(NVTX, "n", "domainId"), "text": text, "payload": _payload(exp.col(NVTX, "n", "int64Value")),
             "blob": exp.col(NVTX, "n", "binaryData")}
    cond = f"{where + ' AND ' if where else ''}n.eventType IN ({', '.join('?' * len(RANGE_TYPES))})"
    params += RANGE_TYPES
    if exp.has(NVTX, "globalTid") and exp.has(RUNTIME, "globalTid"):
        callers = f"SELECT globalTid FROM {RUNTIME}" if threads is None else ", ".join("?" * len(threads))
        cond += f" AND (n.eventType IN (?, ?) OR n.globalTid IN ({callers}))"
        params += (START_END, START_END_T, *(threads or ()))
    # Ranges equal in start and end go by row: a total order whatever the query plan.
    return (f"SELECT {_select(fields, exprs)} FROM {NVTX} n{joins} WHERE {cond} "
            "ORDER BY n.start, n.end IS NULL DESC, n.end DESC, n.rowid", params)


def marker_sql(exp: Export, pattern: str) -> tuple[str, tuple] | None:
    """(global_tid, start, end, text) of the ranges whose text is LIKE `pattern` (bound), by
    start, outer first: the few markers a pass before the sweep reads (nccl.comm_sizes,
    ddp_buckets). None when the export has no range texts."""
    parts, params = [], ()
    if exp.has(NVTX, "textId") and exp.has(STRINGS, "id", "value"):
        parts.append(f"n.textId IN (SELECT id FROM {STRINGS} WHERE value LIKE ?)")
        params += (pattern,)
    if exp.has(NVTX, "text"):
        parts.append("n.text LIKE ?")
        params += (pattern,)
    if not parts:
        return None
    return nvtx_sql(exp, ("global_tid", "start", "end", "text"), f"({' OR '.join(parts)})", params)


def domain_rows(exp: Export, rowids: tuple[int, int] | None = None) -> list[tuple]:
    """The NVTX rows domain_events reads (of those with rowid in `rowids`, inclusive, when given),
    as (eventType, globalTid, domainId, text, rowid, start) for domain_events_of. Call inside
    exp.errors()."""
    if not exp.has(NVTX, "eventType", "domainId", "globalTid"):
        return []
    text, joins = _text(exp)
    kinds = (DOMAIN_CREATE, MARK) if exp.has(NVTX, "start") else (DOMAIN_CREATE,)
    where = " AND n.rowid BETWEEN ? AND ?" if rowids else ""
    return exp.rows(f"SELECT n.eventType, n.globalTid, n.domainId, {text}, n.rowid, {exp.col(NVTX, 'n', 'start')} "
                    f"FROM {NVTX} n{joins} WHERE n.eventType IN ({', '.join('?' * len(kinds))}){where}",
                    kinds + (rowids or ())).fetchall()


def _sqlite_order(value: Any) -> tuple:
    # SQLite's ORDER BY across storage classes: NULL, numbers, text, blobs.
    rank = 0 if value is None else 1 if isinstance(value, (int, float)) else 2 if isinstance(value, str) else 3
    return (rank, value if rank else 0)


def domain_events_of(rows: Sequence[tuple]) -> tuple[dict[tuple[int, int], str], list[tuple[int, int, str, Any]]]:
    """domain_events' result from its rows (domain_rows, of the whole table or of slices of it)."""
    created, marks = [], []
    for kind, gtid, dom, value, row, start in rows:
        if kind == MARK:
            marks.append((_sqlite_order(start), row, (gtid, dom, value, start)))
        elif gtid is not None and dom is not None and value is not None:
            created.append((row, gtid & PID_MASK_SQL, dom, value))
    marks.sort(key=lambda m: m[:2])
    # A domain created twice keeps its last name, in the table's order.
    return {(pid, dom): name for _, pid, dom, name in sorted(created)}, [m for _, _, m in marks]


def _domain_events(exp: Export) -> tuple[dict[tuple[int, int], str], list[tuple[int, int, str, Any]]]:
    return domain_events_of(domain_rows(exp))


def domain_events(exp: Export) -> tuple[dict[tuple[int, int], str], list[tuple[int, int, str, Any]]]:
    """NVTX domain names by (globalPid, domainId), and the marks as (globalTid, domainId, text,
    start) in time order (none when the export lacks the columns). Both come from one scan of the
    NVTX table, the export's largest, made once per Export: the range sweep needs the names, the
    compiled-graph join and the out marks (out_marks.py) the marks. A window's worker is handed
    them (know_domain_events). Call inside exp.errors()."""
    return exp.once(_domain_events)


def know_domain_events(exp: Export, events: tuple[dict[tuple[int, int], str], list[tuple[int, int, str, Any]]]) -> None:
    """Hand `exp` what domain_events would read (found once for all windows: zones.py)."""
    exp.know(_domain_events, events)


def _text(exp: Export) -> tuple[str, str]:
    # Inline strings are in `text`, registered ones behind `textId`; either column may be absent.
    inline = exp.col(NVTX, "n", "text")
    value, joins = _string(exp, exp.col(NVTX, "n", "textId"), "s")
    return f"coalesce({value}, {inline})", joins


def sources(exp: Export, memcpy: bool) -> list[tuple[str, int]]:
    """The activity tables to read, with their source codes."""
    out = [(KERNEL, SRC_KERNEL)]
    if memcpy:
        out += [(t, s) for t, s in ((MEMCPY, SRC_MEMCPY), (MEMSET, SRC_MEMSET))
                if exp.has(t, "start", "end", "correlationId")]
    return out


# The GPU description, by schema variant, the first the export has wins: (table, its GPU id column,
# the record's `gpu` key -> column). Columns the export lacks are left out of `gpu`.
_GPU_TABLES = (
    (GPU, "id", {"name": "name", "memoryBandwidth": "memoryBandwidth", "smCount": "smCount", "clockRate": "clockRate"}),
)


def gpu_sql(exp: Export) -> tuple[str, tuple[str, ...]] | None:
    """GPUs as rows (GPU id, then one value per returned `gpu` key), by id; None without a GPU table."""
    for table, key, columns in _GPU_TABLES:
        if exp.has(table, key):
            fields = {name: col for name, col in columns.items() if exp.has(table, col)}
            return f"SELECT {', '.join([key, *fields.values()])} FROM {table} ORDER BY {key}", tuple(fields)
    return None


def cuda_device_sql(exp: Export) -> str | None:
    """A process's CUDA ordinals as rows (gpuId, cudaId, pid or NULL); None without the table."""
    if not exp.has(CUDA_DEVICE, "gpuId", "cudaId"):
        return None
    return f"SELECT d.gpuId, d.cudaId, {exp.col(CUDA_DEVICE, 'd', 'pid')} FROM {CUDA_DEVICE} d"


def session_start_sql(exp: Export) -> str | None:
    """The capture session's start as UTC nanoseconds since the epoch (one row), or None without
    the table. Every time in an export counts from its own session's start."""
    return f"SELECT utcEpochNs FROM {SESSION_START}" if exp.has(SESSION_START, "utcEpochNs") else None


# CUPTI_ACTIVITY_MEMCPY_KIND values, for exports without ENUM_CUDA_MEMCPY_OPER.
_COPY_KINDS = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
               8: "DtoD", 9: "HtoH", 10: "PtoP"}


def copy_kinds(exp: Export) -> dict[int, str]:
    """copyKind -> short name (`HtoD`), from the export's ENUM_CUDA_MEMCPY_OPER when it has one."""
    kinds = dict(_COPY_KINDS)
    if exp.has(MEMCPY_ENUM, "id", "name"):
        with exp.errors():
            for kind_id, name in exp.rows(f"SELECT id, name FROM {MEMCPY_ENUM}"):
                # CUDA_MEMCPY_OPER_HTOD -> HtoD; names of another shape are kept as they are.
                short = (name or "").removeprefix("CUDA_MEMCPY_OPER_")
                a, sep, b = short.partition("TO")
                if sep and len(a) == 1 and len(b) == 1:
                    short = f"{a}to{b}"
                if short and short != "UNKNOWN":
                    kinds[kind_id] = short
    return kinds
