"""DDP's collectives sized from pyprof's markers, where NCCL's payloads are absent.

DDP launches its collectives from C++, under no marker of their own; an export made without
`--include-blobs=true` (`nsys profile --export sqlite`) has NCCL's ranges but not their payloads,
so nothing else sizes those kernels (docs/parse.md, "NCCL's calls"). pyprof.init() writes what
they send into its markers (pyprof/nvtx/ddp_buckets.py, nvtx/distributed.py; docs/markers.md):

- The torch.distributed C++ bindings DDP calls list the NCCL calls they make, in order:
  `_broadcast_coalesced` (`bucketBytes`: one broadcast per bucket; DDP's parameters at
  construction, its buffers at each forward), `_verify_params_across_processes` (`calls`: its
  construction's check of the parameters' shapes), `_rebuild_buckets` (the reducer's rebuild of
  its buckets: a broadcast of 4 x (`params` + 1) bytes, then one of 4 bytes per new bucket, their
  number that of the final layout of DDP module `ddp`). The k-th NCCL kernel launched inside
  such a marker, on its thread, is its k-th call, where the kernel is of the call's collective.
- DDP's module marker carries the layout of the buckets the reducer all-reduces after it (`ddp`):
  `bucketBytes` (final), `initialBytes` (before the reducer rebuilt its buckets: these until the
  call whose `_rebuild_buckets` marker launched kernels, from which on the final layout of the
  same module `id`), or only `id` (rebuilt: the final layout, which a later call gives). The
  reducer launches bucket i only after buckets 0..i-1, so after the start of a DDP call, the k-th
  NCCL all-reduce kernel its process launches under no torch.distributed marker is bucket k's, up
  to the last bucket and until that process's next DDP call. A later one (find_unused_parameters'
  all-reduce of which parameters were used) and those after a DDP call with no layout known get
  none.

Each such kernel's record gets the call as NCCL's payload would have said it (`nccl`: the call,
its bytes, no communicator id, the group size of the marker), so prof prices it as it prices one
from a payload. Read once per export before the sweep, from a few small queries: the markers,
and the launches of NCCL kernels.
"""
from __future__ import annotations

import bisect
import json
from typing import NamedTuple

from pyprof.parse.export import KERNEL, STRINGS, Export
from pyprof.parse.nccl import Call
from pyprof.parse.queries import KERNEL_AT, PID_MASK_SQL, SRC_KERNEL, activity_sql, marker_sql

_DDP = '%"ddp":%'
_DIST_OP = '%"kind":"op","mod":"torch.distributed"%'
# NCCL's kernels, 2.19+ and older names: the collective follows the prefix (ncclDevKernel_AllReduce_Sum_f32_RING_LL).
_NCCL_HEADS = ("ncclDevKernel_", "ncclKernel_")
_NCCL = tuple(h + "%" for h in _NCCL_HEADS)
ALLREDUCE_CALL, BROADCAST_CALL = "ncclAllReduce", "ncclBroadcast"
_ALLREDUCE = "AllReduce"
# sync_bucket_indices broadcasts int32s.
_INT32 = 4


class _Module(NamedTuple):
    """What one DDP call's marker says of the buckets all-reduced after it."""

    id: int | None              # the DDP module's number in its process (None: an older marker)
    bucket_bytes: list[int] | None  # the layout: final, or the first one with `initial`
    initial: bool               # bucket_bytes is the reducer's first layout, until it rebuilds
    ranks: int | None           # the group size


def _family(name: object) -> str | None:
    """The collective of an NCCL kernel's or call's name (AllReduce), None for another name."""
    if not isinstance(name, str):
        return None
    if name.startswith("nccl") and "_" not in name:
        return name[4:]
    for head in _NCCL_HEADS:
        if name.startswith(head):
            return name[len(head):].split("_", 1)[0]
    return None


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


def _nonneg_int(v: object) -> bool:
    return type(v) is int and v >= 0


def _byte_list(v: object, least: int) -> list[int] | None:
    ok = isinstance(v, list) and v and all(type(b) is int and b >= least for b in v)
    return v if ok else None


def _module(text: object) -> _Module | None:
    """What a DDP module marker says (None for any other text); `bucket_bytes` None where it
    gives no layout."""
    m = _decoded(text)
    if m is None or m.get("kind") != "module" or "ddp" not in m:
        return None
    ddp, ranks = m["ddp"], _group_size(m)
    if not isinstance(ddp, dict):
        return _Module(None, None, False, ranks)
    n = ddp.get("id") if type(ddp.get("id")) is int else None
    final = _byte_list(ddp.get("bucketBytes"), 1)
    if final is not None:
        return _Module(n, final, False, ranks)
    first = _byte_list(ddp.get("initialBytes"), 1) if n is not None else None
    return _Module(n, first, first is not None, ranks)


def _said(m: dict, pid: int, final: dict[tuple[int, int], list[int]]) -> list[Call | None] | None:
    """The NCCL calls a torch.distributed op marker of process `pid` says its C++ call makes, in
    order (None for one it does not know), given (process, DDP module) -> its final layout; None
    for a marker that says none."""
    op, ranks = m.get("op"), _group_size(m)
    kwargs = m.get("kwargs") if isinstance(m.get("kwargs"), dict) else {}
    if op == "_broadcast_coalesced":
        buckets = _byte_list(kwargs.get("bucketBytes"), 0)
        return None if buckets is None else [Call(BROADCAST_CALL, b, None, ranks) for b in buckets]
    if op == "_rebuild_buckets":
        n, params = kwargs.get("ddp"), kwargs.get("params")
        if not _nonneg_int(params):
            return None
        layout = final.get((pid, n)) if type(n) is int else None
        return [Call(BROADCAST_CALL, _INT32 * (params + 1), None, ranks),
                None if layout is None else Call(BROADCAST_CALL, _INT32 * len(layout), None, ranks)]
    calls = kwargs.get("calls")
    if not isinstance(calls, list):
        return None
    said: list[Call | None] = []
    for c in calls:
        ok = isinstance(c, list) and len(c) == 2 and _family(c[0]) and _nonneg_int(c[1])
        said.append(Call(c[0], c[1], None, ranks) if ok else None)
    return said


def _ddp_calls(exp: Export) -> dict[tuple[int, int], Call]:
    with exp.errors():
        # The marker queries scan the NVTX table: only for an export with NCCL kernels.
        if not _named(exp, _NCCL):
            return {}
        kernels = _nccl_kernels(exp)
        if not kernels:
            return {}
        modules = _ddp_modules(exp)
        final = {(pid, m.id): m.bucket_bytes for pid, calls in modules.items() for _, m in calls
                 if m.id is not None and m.bucket_bytes is not None and not m.initial}
        outer, said = _dist_markers(exp, final)
        calls, rebuilt = _marked_calls(kernels, said)
        if modules:
            calls.update(_bucket_allreduces(kernels, modules, final, outer, rebuilt))
        return calls


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


def _nccl_kernels(exp: Export) -> list[tuple[int, int, int, int, str]]:
    """(launch start, launch thread, global pid, correlation id, collective) of each NCCL kernel,
    in launch order."""
    if not exp.has(KERNEL, "shortName"):
        return []
    name = exp.col(KERNEL, "x", "shortName")
    likes = " OR ".join("value LIKE ?" for _ in _NCCL)
    cond = " OR ".join(f"{name} LIKE ?" for _ in _NCCL)
    params: tuple = _NCCL
    names: dict = {}
    if exp.has(STRINGS, "id", "value"):
        names = dict(exp.rows(f"SELECT id, value FROM {STRINGS} WHERE {likes}", _NCCL).fetchall())
        cond = f"{name} IN (SELECT id FROM {STRINGS} WHERE {likes}) OR {cond}"
        params = _NCCL + _NCCL
    at_launch, at_tid = KERNEL_AT["launch_start"], KERNEL_AT["launch_tid"]
    at_pid, at_corr, at_name = KERNEL_AT["global_pid"], KERNEL_AT["correlation_id"], KERNEL_AT["short_name"]
    out = []
    for row in exp.rows(activity_sql(exp, KERNEL, SRC_KERNEL, where=f"({cond})"), params):
        t, tid, short = row[at_launch], row[at_tid], row[at_name]
        family = _family(names.get(short, short))
        if t is not None and tid is not None and family is not None:
            out.append((t, tid, row[at_pid], row[at_corr], family))
    return out


def _ddp_modules(exp: Export) -> dict[int, list[tuple[int, _Module]]]:
    """Process -> its DDP calls: (start, what the marker says), by start."""
    ddp = marker_sql(exp, _DDP)
    modules: dict[int, list[tuple[int, _Module]]] = {}
    for gtid, start, _end, text in exp.rows(*ddp) if ddp else ():
        if gtid is None or '"kind":"module"' not in text:
            continue
        said = _module(text)
        if said is not None:
            modules.setdefault(gtid & PID_MASK_SQL, []).append((start, said))
    return modules


def _dist_markers(exp: Export, final: dict[tuple[int, int | None], list[int]]) -> tuple[dict, dict]:
    """(thread -> its outermost torch.distributed markers' (start, end), thread -> the markers
    that say their NCCL calls: (start, end, the calls, ddp module or None)), each by start."""
    outer: dict[int, list[tuple[int, int]]] = {}
    said: dict[int, list[tuple[int, int, list[Call | None]]]] = {}
    dist = marker_sql(exp, _DIST_OP)
    for gtid, start, end, text in exp.rows(*dist) if dist else ():
        if end is None or gtid is None:
            continue
        spans = outer.setdefault(gtid, [])
        if not (spans and spans[-1][1] >= end):
            spans.append((start, end))
        if '"op":"_' in text:  # the C++ bindings' markers: cheaper than decoding every collective's
            m = _decoded(text)
            calls = None if m is None else _said(m, gtid & PID_MASK_SQL, final)
            if calls is not None:
                ddp = m.get("kwargs", {}).get("ddp") if m.get("op") == "_rebuild_buckets" else None
                said.setdefault(gtid, []).append((start, end, calls, ddp))
    return outer, said


def _span_at(spans: list | None, t: int) -> int:
    """The index of the span of `spans` ((start, end, ...) by start, none inside another) that
    holds time `t`, else -1."""
    if not spans:
        return -1
    i = bisect.bisect_right(spans, (t, float("inf"))) - 1
    return i if i >= 0 and spans[i][1] >= t else -1


def _marked_calls(kernels: list, said: dict) -> tuple[dict[tuple[int, int], Call], dict[tuple[int, int], list[int]]]:
    """(the calls of the kernels launched inside markers that say them, (process, DDP module) ->
    the times its reducer's rebuild launched kernels)."""
    taken: dict[tuple[int, int], int] = {}  # (thread, marker) -> kernels launched in it so far
    calls: dict[tuple[int, int], Call] = {}
    rebuilt: dict[tuple[int, int], list[int]] = {}
    for t, tid, pid, corr, family in kernels:
        spans = said.get(tid)
        i = _span_at(spans, t)
        if i < 0:
            continue
        k = taken.get((tid, i), 0)
        taken[(tid, i)] = k + 1
        start, _end, listed, ddp = spans[i]
        if k == 0 and type(ddp) is int:
            rebuilt.setdefault((pid, ddp), []).append(start)
        call = listed[k] if k < len(listed) else None
        if call is not None and _family(call.name) == family:
            calls[(pid, corr)] = call
    return calls, rebuilt


def _bucket_allreduces(kernels: list, modules: dict, final: dict, outer: dict,
                       rebuilt: dict) -> dict[tuple[int, int], Call]:
    starts = {pid: [s for s, _ in v] for pid, v in modules.items()}
    # (process, DDP call) -> its buckets (None: unknown), resolved at its first all-reduce.
    layouts: dict[tuple[int, int], list[int] | None] = {}
    taken: dict[tuple[int, int], int] = {}  # (process, DDP call) -> buckets given so far
    calls: dict[tuple[int, int], Call] = {}
    for t, tid, pid, corr, family in kernels:
        if family != _ALLREDUCE or pid not in starts or _span_at(outer.get(tid), t) >= 0:
            continue
        i = bisect.bisect_right(starts[pid], t) - 1
        if i < 0:
            continue
        k = taken.get((pid, i), 0)
        taken[(pid, i)] = k + 1
        said = modules[pid][i][1]
        if (pid, i) not in layouts:
            layouts[(pid, i)] = _layout(said, pid, i, starts[pid], final, rebuilt)
        layout = layouts[(pid, i)]
        if layout is not None and k < len(layout):
            calls[(pid, corr)] = Call(ALLREDUCE_CALL, layout[k], None, said.ranks)
    return calls


def _layout(said: _Module, pid: int, i: int, starts: list[int], final: dict, rebuilt: dict) -> list[int] | None:
    """The buckets the reducer all-reduces after DDP call `i` of process `pid`."""
    if said.id is None or (said.bucket_bytes is not None and not said.initial):
        return said.bucket_bytes
    if said.initial and not any(bisect.bisect_right(starts, r) - 1 == i for r in rebuilt.get((pid, said.id), ())):
        return said.bucket_bytes
    return final.get((pid, said.id))


def ddp_calls(exp: Export) -> dict[tuple[int, int], Call]:
    """(global pid, correlation id) of each DDP collective kernel pyprof's markers size (the
    module docstring) -> its call, as a record's `nccl` says it. Empty for an export without
    such markers. Made once per export."""
    return exp.once(_ddp_calls)


def know_ddp_calls(exp: Export, calls: dict[tuple[int, int], Call]) -> None:
    """Make ddp_calls(exp) return `calls`, read once for the whole export (zones.survey) and
    handed to each window's worker."""
    exp.know(_ddp_calls, calls)
