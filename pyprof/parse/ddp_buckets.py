"""DDP's collectives sized from pyprof's markers, where NCCL's payloads are absent.

DDP's reducer all-reduces gradient buckets from C++, under no pyprof marker; an export made
without `--include-blobs=true` (`nsys profile --export sqlite`) has NCCL's ranges but not their
payloads, so nothing sizes those kernels (docs/parse.md, "NCCL's calls"). pyprof.init() writes
the reducer's bucket layout into DDP's module marker (`ddp.bucketBytes`: each bucket's bytes in
the order the reducer launches them; pyprof/nvtx/ddp_buckets.py). The reducer launches bucket i
only after buckets 0..i-1, so after the start of a DDP call, the k-th NCCL all-reduce kernel its
process launches under no torch.distributed marker is bucket k's, up to the last bucket and until
that process's next DDP call. A later one (find_unused_parameters' all-reduce of which
parameters were used) and those after a DDP call whose marker gives no layout (`"ddp":null`) get
none.

DDP broadcasts its parameters (at construction) and buffers (BatchNorm's running statistics,
at each forward) through torch.distributed._broadcast_coalesced, one NCCL broadcast per bucket of
tensors, whose marker lists the buckets' bytes in order (`bucketBytes`; nvtx/distributed.py): the
k-th NCCL broadcast kernel launched inside that marker, on its thread, is bucket k's.

Each such kernel's record gets the call as NCCL's payload would have said it (`nccl`:
`ncclAllReduce` or `ncclBroadcast`, the bucket's bytes, no communicator id, the group size of the
marker), so prof prices it as it prices one from a payload. Read once per export before the
sweep, from a few small queries: the markers, and the launches of NCCL all-reduce and broadcast
kernels.
"""
from __future__ import annotations

import bisect
import json

from pyprof.parse.export import KERNEL, STRINGS, Export
from pyprof.parse.nccl import Call
from pyprof.parse.queries import KERNEL_AT, PID_MASK_SQL, SRC_KERNEL, activity_sql, marker_sql

_DDP = '%"ddp":%'
_DIST_OP = '%"kind":"op","mod":"torch.distributed"%'
_COALESCED = '%"op":"_broadcast_coalesced"%'
# NCCL's all-reduce and broadcast kernels: 2.19+ and older names.
_ALLREDUCE = ("ncclDevKernel_AllReduce%", "ncclKernel_AllReduce%")
_BROADCAST = ("ncclDevKernel_Broadcast%", "ncclKernel_Broadcast%")
ALLREDUCE_CALL, BROADCAST_CALL = "ncclAllReduce", "ncclBroadcast"


def _layout(text: object) -> tuple[list[int], int | None] | None:
    """(each bucket's bytes, the group size) of a DDP module marker; None for any other text or
    a DDP marker without a layout."""
    m = _decoded(text)
    if m is None or m.get("kind") != "module" or not isinstance(m.get("ddp"), dict):
        return None
    buckets = m["ddp"].get("bucketBytes")
    if not isinstance(buckets, list) or not buckets or not all(type(b) is int and b > 0 for b in buckets):
        return None
    return buckets, _group_size(m)


def _coalesced(text: object) -> tuple[list[int], int | None] | None:
    """(each bucket's bytes, the group size) of a _broadcast_coalesced marker, None for any other."""
    m = _decoded(text)
    if m is None or m.get("kind") != "op" or m.get("op") != "_broadcast_coalesced":
        return None
    kwargs = m.get("kwargs")
    buckets = kwargs.get("bucketBytes") if isinstance(kwargs, dict) else None
    if not isinstance(buckets, list) or not all(type(b) is int and b >= 0 for b in buckets):
        return None
    return buckets, _group_size(m)


def _decoded(text: object) -> dict | None:
    try:
        m = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return m if isinstance(m, dict) else None


def _group_size(m: dict) -> int | None:
    dist = m.get("dist")
    n = dist.get("groupSize") if isinstance(dist, dict) else None
    return n if type(n) is int and n > 0 else None


def _ddp_calls(exp: Export) -> dict[tuple[int, int], Call]:
    with exp.errors():
        # The marker queries scan the NVTX table: only for an export with such NCCL kernels.
        return {**(_bucket_allreduces(exp) if _named(exp, _ALLREDUCE) else {}),
                **(_coalesced_broadcasts(exp) if _named(exp, _BROADCAST) else {})}


def _named(exp: Export, names: tuple[str, ...]) -> bool:
    """Whether a string of the export is LIKE one of `names` (True where the export keeps no
    StringIds to tell: its names are then in the tables themselves)."""
    if not exp.has(STRINGS, "id", "value"):
        return True
    likes = " OR ".join("value LIKE ?" for _ in names)
    rows = exp.rows(f"SELECT 1 FROM {STRINGS} WHERE {likes} LIMIT 1", names)
    try:
        return rows.fetchone() is not None
    finally:
        rows.close()


def _bucket_allreduces(exp: Export) -> dict[tuple[int, int], Call]:
    ddp = marker_sql(exp, _DDP)
    if ddp is None:
        return {}
    # Process -> its DDP calls' starts and layouts (None: a DDP call that gives none).
    starts: dict[int, list[int]] = {}
    layouts: dict[int, list[tuple[list[int], int | None] | None]] = {}
    for gtid, start, _end, text in exp.rows(*ddp):
        if gtid is None or '"kind":"module"' not in text:
            continue
        pid = gtid & PID_MASK_SQL
        starts.setdefault(pid, []).append(start)
        layouts.setdefault(pid, []).append(_layout(text))
    if not any(any(v) for v in layouts.values()):
        return {}
    # Thread -> the outermost torch.distributed markers' (start, end), by start.
    marked: dict[int, list[tuple[int, int]]] = {}
    dist = marker_sql(exp, _DIST_OP)
    for gtid, start, end, _text in exp.rows(*dist) if dist else ():
        spans = marked.setdefault(gtid, [])
        if end is not None and not (spans and spans[-1][1] >= end):
            spans.append((start, end))
    kernels = _launch_sql(exp, _ALLREDUCE)
    if kernels is None:
        return {}
    at_launch, at_tid = KERNEL_AT["launch_start"], KERNEL_AT["launch_tid"]
    at_pid, at_corr = KERNEL_AT["global_pid"], KERNEL_AT["correlation_id"]
    taken: dict[tuple[int, int], int] = {}  # (process, DDP call) -> buckets given so far
    calls: dict[tuple[int, int], Call] = {}
    for row in exp.rows(*kernels):
        t, tid, pid = row[at_launch], row[at_tid], row[at_pid]
        if t is None or tid is None or pid not in starts or _span_at(marked.get(tid), t) >= 0:
            continue
        i = bisect.bisect_right(starts[pid], t) - 1
        if i < 0:
            continue
        k = taken.get((pid, i), 0)
        taken[(pid, i)] = k + 1
        layout = layouts[pid][i]
        if layout is not None and k < len(layout[0]):
            calls[(pid, row[at_corr])] = Call(ALLREDUCE_CALL, layout[0][k], None, layout[1])
    return calls


def _span_at(spans: list | None, t: int) -> int:
    """The index of the span of `spans` ((start, end, ...) by start, none inside another) that
    holds time `t`, else -1."""
    if not spans:
        return -1
    i = bisect.bisect_right(spans, (t, float("inf"))) - 1
    return i if i >= 0 and spans[i][1] >= t else -1


def _coalesced_broadcasts(exp: Export) -> dict[tuple[int, int], Call]:
    markers = marker_sql(exp, _COALESCED)
    if markers is None:
        return {}
    # Thread -> its _broadcast_coalesced calls: (start, end, each bucket's bytes, group size).
    spans: dict[int, list[tuple[int, int, list[int], int | None]]] = {}
    for gtid, start, end, text in exp.rows(*markers):
        said = _coalesced(text)
        if gtid is not None and end is not None and said is not None:
            spans.setdefault(gtid, []).append((start, end, *said))
    kernels = _launch_sql(exp, _BROADCAST) if spans else None
    if kernels is None:
        return {}
    at_launch, at_tid = KERNEL_AT["launch_start"], KERNEL_AT["launch_tid"]
    at_pid, at_corr = KERNEL_AT["global_pid"], KERNEL_AT["correlation_id"]
    taken: dict[tuple[int, int], int] = {}  # (thread, call) -> broadcasts launched in it so far
    calls: dict[tuple[int, int], Call] = {}
    for row in exp.rows(*kernels):
        t, tid = row[at_launch], row[at_tid]
        i = -1 if t is None else _span_at(spans.get(tid), t)
        if i < 0:
            continue
        k = taken.get((tid, i), 0)
        taken[(tid, i)] = k + 1
        buckets, n = spans[tid][i][2:]
        if k < len(buckets):
            calls[(row[at_pid], row[at_corr])] = Call(BROADCAST_CALL, buckets[k], None, n)
    return calls


def _launch_sql(exp: Export, names: tuple[str, ...]) -> tuple[str, tuple] | None:
    """The launches of the kernels whose short name is LIKE one of `names` (KERNEL_ROW rows, in
    launch order)."""
    if not exp.has(KERNEL, "shortName"):
        return None
    name = exp.col(KERNEL, "x", "shortName")
    likes = " OR ".join("value LIKE ?" for _ in names)
    cond = " OR ".join(f"{name} LIKE ?" for _ in names)
    params = names
    if exp.has(STRINGS, "id", "value"):
        cond = f"{name} IN (SELECT id FROM {STRINGS} WHERE {likes}) OR {cond}"
        params = names + names
    return activity_sql(exp, KERNEL, SRC_KERNEL, where=f"({cond})"), params


def ddp_calls(exp: Export) -> dict[tuple[int, int], Call]:
    """(global pid, correlation id) of each DDP bucket all-reduce and coalesced broadcast kernel
    pyprof's markers size (the module docstring) -> its call, as a record's `nccl` says it.
    Empty for an export without such markers. Made once per export."""
    return exp.once(_ddp_calls)


def know_ddp_calls(exp: Export, calls: dict[tuple[int, int], Call]) -> None:
    """Make ddp_calls(exp) return `calls`, read once for the whole export (zones.survey) and
    handed to each window's worker."""
    exp.know(_ddp_calls, calls)
