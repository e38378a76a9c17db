"""The SQL parse runs: one launch-ordered query per activity table and one start-ordered NVTX query.

Every table name is one of export.py's constants and every column is checked against
PRAGMA table_info first (missing optional columns become NULL); values are bound parameters.
Sorting and the kernel-to-launch join happen inside SQLite, which spills to its own temporary
files, so Python never holds more than a batch of rows.
"""
from __future__ import annotations

import functools

from pyprof.parse.export import KERNEL, MEMCPY, MEMCPY_ENUM, MEMSET, NVTX, RUNTIME, STRINGS, Export

# Sources of activity rows, the third column of every activity row.
SRC_KERNEL, SRC_MEMCPY, SRC_MEMSET = 0, 1, 2

# NVTX eventType codes (ENUM_NSYS_EVENT_TYPE).
PUSH_POP, START_END, PUSH_POP_T, START_END_T, DOMAIN_CREATE = 59, 60, 70, 71, 75
RANGE_TYPES = (PUSH_POP, START_END, PUSH_POP_T, START_END_T)

# globalTid -> globalPid: bits 0-23 are the tid. 0xFFFFFFFFFF000000 as a signed 64-bit integer,
# which is how SQLite stores it.
PID_MASK_SQL = -16777216

# Columns common to every activity row, in this order:
# 0 sort key (CPU start of the launch call, else own start), 1 start, 2 source, 3 end, 4 device,
# 5 stream, 6 correlationId, 7 globalPid, 8 launch start, 9 launch end, 10 launch globalTid,
# 11 launch API name; then the source's own columns from index 12 on (see activity_sql). Names
# (launch API, kernel short and demangled names) come as StringIds ids: a few hundred distinct
# ones stand behind millions of rows, so lines() resolves each id once (string_sql) instead of
# SQLite carrying the long strings through the join and the sort.


def _string(exp: Export, expr: str, alias: str) -> tuple[str, str]:
    """Select the StringIds value for id `expr` (NULL when StringIds is missing)."""
    if not exp.has(STRINGS, "id", "value") or expr == "NULL":
        return "NULL", ""
    return f"{alias}.value", f" LEFT JOIN {STRINGS} {alias} ON {alias}.id = {expr}"


def _out(expr: str) -> str:
    # Columns that are only printed come back as the JSON text of their value: an integer, or
    # 'null' for a NULL or a missing column, so the record is assembled without a test per field.
    return f"ifnull({expr}, 'null')"


def activity_sql(exp: Export, table: str, src: int) -> str:
    """Rows of one activity table joined to their launch call, in launch order."""
    c = functools.partial(exp.col, table, "x")
    joins = ""
    if exp.has(RUNTIME, "correlationId", "start", "end"):
        on = "r.correlationId = x.correlationId"
        # Correlation ids repeat across processes: join within the process when both sides
        # say which process they belong to.
        if exp.has(table, "globalPid") and exp.has(RUNTIME, "globalTid"):
            on += f" AND x.globalPid = (r.globalTid & {PID_MASK_SQL})"
        joins += f" LEFT JOIN {RUNTIME} r ON {on}"
        rstart, rend, rtid = "r.start", "r.end", exp.col(RUNTIME, "r", "globalTid")
        api = exp.col(RUNTIME, "r", "nameId")
    else:
        rstart = rend = rtid = api = "NULL"
    own: list[str] = []
    if src == SRC_KERNEL:
        own += [c("shortName"), c("demangledName")]
        own += [_out(c(col)) for col in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread",
                                         "staticSharedMemory", "dynamicSharedMemory", "graphNodeId")]
    elif src == SRC_MEMCPY:
        own += [_out(c("bytes")), c("copyKind")]
    else:
        own += [_out(c("bytes"))]
    cols = [f"coalesce({rstart}, x.start)", "x.start", str(src), "x.end", _out(c("deviceId")), _out(c("streamId")),
            _out("x.correlationId"), c("globalPid"), rstart, rend, rtid, api] + own
    # Ties in launch time (all kernels of one CUDA graph launch share it) go by GPU start.
    return f"SELECT {', '.join(cols)} FROM {table} x{joins} ORDER BY 1, 2"


def string_sql(exp: Export) -> str | None:
    """The query of one StringIds value by id (None when the export has no StringIds)."""
    return f"SELECT value FROM {STRINGS} WHERE id = ?" if exp.has(STRINGS, "id", "value") else None


def nvtx_sql(exp: Export) -> tuple[str, tuple[int, ...]] | None:
    """NVTX ranges as (start, end, eventType, globalTid, domainId, text), by start, outer first,
    with the parameters to bind.

    At equal starts the longer range comes first (an open range, end NULL, is longest), so a
    list in this order is outermost-first. Push/pop ranges of threads that made no CUDA runtime
    call are left out: they can enclose no launch (data-loader threads push ranges by the
    thousand), and a thread that never calls CUDA runs no forward op whose backward does.
    Start/end ranges are all kept: they span threads.
    """
    if not exp.has(NVTX, "start", "end", "eventType"):
        return None
    text, joins = _text(exp)
    cols = ["n.start", "n.end", "n.eventType", exp.col(NVTX, "n", "globalTid"), exp.col(NVTX, "n", "domainId"), text]
    where = f"n.eventType IN ({', '.join('?' * len(RANGE_TYPES))})"
    params: tuple[int, ...] = RANGE_TYPES
    if exp.has(NVTX, "globalTid") and exp.has(RUNTIME, "globalTid"):
        where += f" AND (n.eventType IN (?, ?) OR n.globalTid IN (SELECT globalTid FROM {RUNTIME}))"
        params += (START_END, START_END_T)
    return (f"SELECT {', '.join(cols)} FROM {NVTX} n{joins} WHERE {where} "
            "ORDER BY n.start, n.end IS NULL DESC, n.end DESC", params)


def domains_sql(exp: Export) -> str | None:
    """Domain-create events as (globalTid, domainId, name). Bind DOMAIN_CREATE."""
    if not exp.has(NVTX, "eventType", "domainId", "globalTid"):
        return None
    text, joins = _text(exp)
    return f"SELECT n.globalTid, n.domainId, {text} FROM {NVTX} n{joins} WHERE n.eventType = ?"


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


MARK = 34  # nvtxMark / nvtxDomainMarkEx


def marks_sql(exp: Export) -> str | None:
    """NVTX marks as (globalTid, domainId, text), in time order. Bind MARK."""
    if not exp.has(NVTX, "eventType", "start"):
        return None
    text, joins = _text(exp)
    cols = [exp.col(NVTX, "n", "globalTid"), exp.col(NVTX, "n", "domainId"), text]
    return f"SELECT {', '.join(cols)} FROM {NVTX} n{joins} WHERE n.eventType = ? ORDER BY n.start"
