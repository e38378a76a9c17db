"""NCCL's own NVTX ranges: which NCCL calls launched a kernel, and their message sizes.

NCCL (2.19+) marks every API call with a push/pop range in its domain "NCCL" (`ncclAllReduce`,
`ncclSend`, `ncclGroupStart`, ...) carrying an NVTX extended payload: a binary struct whose
layout is registered as a schema. An export made with `nsys export --include-blobs=true` holds
the bytes (NVTX_EVENTS.binaryData) and the layouts (NVTX_PAYLOAD_SCHEMA_ENTRIES); the default
export holds only the layouts. The entries are found by their names, never by schema ids,
which NCCL may renumber.

A call outside any group launches its kernel inside its own range; the calls between
`ncclGroupStart` and `ncclGroupEnd` launch theirs inside the outermost `ncclGroupEnd` (groups
nest). So the sweep (attribute.py) hands every NCCL range to `Groups.take`, which returns the
calls a kernel launched inside that range ran. Anything odd (an unknown entry type, a blob cut
short, a schema defined twice differently) gives no call and is counted, never raised.

Each call also carries its communicator's size where the export says it (comm_sizes): NCCL's own
communicator-creation range (`ncclCommInitRank`, its payload's "No. of ranks") or a pyprof marker
with a group size (`dist`: a torch.distributed call's, or the module marker of a module that owns
a process group) around a collective call on that communicator. A communicator's size is fixed,
so what one call says holds for every call on it: DDP's bucket all-reduces, which no marker
encloses, take the size a marked collective on their communicator showed.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

import json

from pyprof.formats import DIST_MOD, NCCL
from pyprof.parse.export import NVTX, Export
from pyprof.parse.queries import marker_sql, nvtx_sql
from pyprof.parse.ranges import encode_str

NCCL_DOMAIN = "NCCL"
GROUP_START, GROUP_END = "ncclGroupStart", "ncclGroupEnd"
SCHEMA_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
ENUMS = "NVTX_PAYLOAD_ENUMS"
# The entries read, by the name NCCL gives them.
BYTES_ENTRY = "Message size [bytes]"
COMM_ENTRY = "NCCL communicator ID"
RANKS_ENTRY = "No. of ranks"   # ncclCommInitRank's (and ncclCommDestroy's) payload: the communicator's size
# ncclCommSplit's payload pairs the new communicator's id with the *parent's* size (NCCL 2.28's
# init.cc): a schema with this entry says no communicator's size.
PARENT_ENTRY = "Parent NCCL communicator ID"
# NCCL's point-to-point calls: PyTorch runs them on a communicator of the two peers, whatever
# the size of the group the call named, so they teach no group size.
P2P_CALLS = frozenset({"ncclSend", "ncclRecv"})
# torch.distributed's point-to-point functions, for the same reason.
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})
# NVTX_PAYLOAD_ENTRY_TYPE_* (nvToolsExtPayload.h) of integers -> (size, signed) on LP64 hosts,
# where NCCL runs: char .. unsigned long long, int8 .. uint64, size_t, an address.
_INTEGERS = {1: (1, True), 2: (1, False), 3: (2, True), 4: (2, False), 5: (4, True), 6: (4, False),
             7: (8, True), 8: (8, False), 9: (8, True), 10: (8, False), 11: (1, True), 12: (1, False),
             13: (2, True), 14: (2, False), 15: (4, True), 16: (4, False), 17: (8, True), 18: (8, False),
             22: (8, False), 23: (8, False)}
# The binaryData layout: a uint64 count, then per payload (uint64 schema id, uint64 size, uint64
# offset of its data from the blob's start): nvtxPayloadData_t with the pointer made an offset.
_HEAD = struct.Struct("<Q")
_ENTRY = struct.Struct("<QQQ")
_MAX_PAYLOADS = 64  # NCCL attaches one; a count past this is a damaged blob, not a loop to run


class Call(NamedTuple):
    """One NCCL call: its range's text (`ncclAllReduce`), message size in bytes, communicator id
    (hex, as NCCL's 64-bit hash does not fit a JSON reader's float), and the communicator's
    size when the export says it (comm_sizes)."""

    name: str
    bytes: int
    comm: str | None
    ranks: int | None = None

    def js(self) -> str:
        """The call as a record's JSON object."""
        comm = "null" if self.comm is None else f'"{self.comm}"'
        ranks = "" if self.ranks is None else f',"ranks":{self.ranks}'
        return f'{{"call":{encode_str(self.name)},"bytes":{self.bytes},"comm":{comm}{ranks}}}'


class Schemas:
    """The export's payload layouts: (domainId, schemaId) -> {entry name: field}, for the entries read."""

    def __init__(self, exp: Export) -> None:
        self.fields: dict[tuple[int, int], dict[str, tuple[int, int, bool] | None]] = {}
        if not exp.has(SCHEMA_ENTRIES, "domainId", "schemaId", "idx", "type", "name", "offset"):
            return
        enums: dict[tuple[int, int], int | None] = {}
        if exp.has(ENUMS, "domainId", "schemaId", "size"):
            for dom, sid, size in exp.rows(f"SELECT domainId, schemaId, size FROM {ENUMS}"):
                enums[(dom, sid)] = size if enums.get((dom, sid), size) == size else None
        rows = exp.rows(f"SELECT domainId, schemaId, idx, type, offset, name FROM {SCHEMA_ENTRIES} "
                        "WHERE name IN (?, ?, ?, ?)", (BYTES_ENTRY, COMM_ENTRY, RANKS_ENTRY, PARENT_ENTRY))
        for dom, sid, idx, etype, offset, name in rows:
            key = (dom, sid)
            width = _INTEGERS.get(etype)
            if width is None and (dom, etype) in enums and enums[(dom, etype)] in (1, 2, 4, 8):
                width = (enums[(dom, etype)], False)
            if offset is None and idx == 0:
                offset = 0  # the first entry's offset may be left out
            field = (offset, *width) if width is not None and type(offset) is int and offset >= 0 else None
            fields = self.fields.setdefault(key, {})
            # The same schema registered by several processes of one export: equal, or unreadable.
            fields[name] = field if fields.get(name, field) == field else None

    def _payload(self, domain_id: int | None, blob: object, entry: str,
                 unless: str | None = None) -> tuple[int, str | None] | None:
        """(the value of `entry`, communicator id) of the first payload in `blob` whose schema
        has `entry` (and not `unless`); None when there is none or its value is no non-negative
        integer (a malformed blob, an unknown schema)."""
        if not isinstance(blob, bytes) or len(blob) < _HEAD.size:
            return None
        (count,) = _HEAD.unpack_from(blob)
        if count > _MAX_PAYLOADS or _HEAD.size + count * _ENTRY.size > len(blob):
            return None
        for i in range(count):
            sid, size, offset = _ENTRY.unpack_from(blob, _HEAD.size + i * _ENTRY.size)
            fields = self.fields.get((domain_id, sid))
            if fields is None or entry not in fields or unless in fields:
                continue
            data = blob[offset:offset + size] if offset + size <= len(blob) else b""
            value = _integer(data, fields[entry])
            if value is None or value < 0:
                return None
            comm = _integer(data, fields.get(COMM_ENTRY))
            return value, None if comm is None else f"{comm & 0xFFFFFFFFFFFFFFFF:016x}"
        return None

    def decode(self, domain_id: int | None, blob: object) -> tuple[int, str | None] | None:
        """(message size, communicator id) of a call's payload; None when `blob` has none."""
        return self._payload(domain_id, blob, BYTES_ENTRY)

    def comm_size(self, domain_id: int | None, blob: object) -> tuple[int, str | None] | None:
        """(number of ranks, communicator id) of a communicator creation's (or destruction's)
        payload, or None (also for a split's, whose size is its parent's)."""
        return self._payload(domain_id, blob, RANKS_ENTRY, PARENT_ENTRY)


def _integer(data: bytes, field: tuple[int, int, bool] | None) -> int | None:
    if field is None:
        return None
    offset, size, signed = field
    if offset + size > len(data):
        return None
    return int.from_bytes(data[offset:offset + size], "little", signed=signed)


# The text that marks a pyprof marker with a group size (annotation writes it compactly).
_GROUP_SIZE = '%"groupSize":%'


def _group_size(text: object) -> int | None:
    """The group size a pyprof marker's text gives the NCCL calls inside it: a torch.distributed
    collective's `dist` (not a point-to-point call's) or a module marker's; None for any other."""
    try:
        m = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    if not isinstance(m, dict) or not isinstance(m.get("dist"), dict):
        return None
    if not (m.get("kind") == "module" or (m.get("kind") == "op" and m.get("mod") == DIST_MOD
                                         and m.get("op") not in P2P_OPS)):
        return None
    n = m["dist"].get("groupSize")
    return n if type(n) is int and n > 0 else None


def _comm_sizes(exp: Export) -> dict[str, int]:
    schemas = exp.once(Schemas)
    if not schemas.fields or not exp.has(NVTX, "binaryData", "globalTid", "domainId"):
        return {}
    learnt: dict[str, int | None] = {}

    def learn(comm: str | None, n: int) -> None:
        # Id 0 is no communicator's (a payload filled before the communicator existed). Two
        # sizes for one communicator: something is not what it seems; say neither.
        if comm is not None and int(comm, 16) and n > 0:
            learnt[comm] = n if learnt.get(comm, n) == n else None

    calls = nvtx_sql(exp, ("global_tid", "start", "end", "domain_id", "text", "blob"), "n.binaryData IS NOT NULL")
    with exp.errors():
        found = []
        for gtid, start, end, dom, text, blob in exp.rows(*calls) if calls else ():
            created = schemas.comm_size(dom, blob)
            if created is not None:
                learn(created[1], created[0])
            elif text not in P2P_CALLS and end is not None:
                called = schemas.decode(dom, blob)
                if called is not None and called[1] is not None:
                    found.append((gtid, start, end, called[1]))
        markers = marker_sql(exp, _GROUP_SIZE) if found else None
        if markers is None:
            return {c: n for c, n in learnt.items() if n}
        # One sweep of both by start: each thread's stack of open markers (push/pop ranges nest).
        by_thread: dict[int, list[tuple[int, int, str]]] = {}
        for gtid, start, end, comm in found:
            by_thread.setdefault(gtid, []).append((start, end, comm))
        stacks: dict[int, list[tuple[int, int | None]]] = {}
        pending = {t: iter(v) for t, v in by_thread.items()}
        heads = {t: next(it) for t, it in pending.items()}

        def settle(gtid: int, upto: int | None) -> None:
            # The calls of `gtid` that start before `upto` (None: all), against the open markers.
            head = heads.get(gtid)
            stack = stacks.get(gtid, [])
            while head is not None and (upto is None or head[0] < upto):
                start, end, comm = head
                while stack and stack[-1][0] is not None and stack[-1][0] < start:
                    stack.pop()
                if stack and (stack[-1][0] is None or stack[-1][0] >= end) and stack[-1][1]:
                    learn(comm, stack[-1][1])
                head = next(pending[gtid], None)
            heads[gtid] = head

        for gtid, start, end, text in exp.rows(*markers):
            if gtid not in heads:
                continue
            settle(gtid, start)
            stack = stacks.setdefault(gtid, [])
            while stack and stack[-1][0] is not None and stack[-1][0] < start:
                stack.pop()
            stack.append((end, _group_size(text)))
        for gtid in heads:
            settle(gtid, None)
    return {c: n for c, n in learnt.items() if n}


def comm_sizes(exp: Export) -> dict[str, int]:
    """Communicator id -> its number of ranks, where the export says it: the payload of NCCL's
    communicator creation, or the group size of the innermost pyprof marker with one (the
    module docstring) around a collective call on it. A communicator two sources give two
    sizes is left out. Empty for an export without NCCL's payloads. Made once per export."""
    return exp.once(_comm_sizes)


# A thread's group: (nesting depth, the calls made in it so far; once it ended, those it ran).
Group = tuple[int, tuple[Call, ...]]
NO_GROUP: Group = (0, ())


class Groups:
    """NCCL groups per thread, fed every NCCL range of the sweep in start order.

    `state`: globalTid -> Group of the threads that made a group; a time window's sweep starts
    from the one the window before left (window.Seed.nccl). A speculative window notes the
    threads whose state at its start it depended on: `nested` (a group range or call met while
    the seed may have had a group open) and `ended` (a group end an earlier window took in,
    whose calls the seed holds): window.stale."""

    def __init__(self, exp: Export, state: dict[int, Group] | None = None) -> None:
        self.schemas = exp.once(Schemas)
        self.sizes = comm_sizes(exp)
        self.state: dict[int, Group] = dict(state or {})
        self.nested: set[int] = set()
        self.ended: set[int] = set()
        self.unknown = 0   # ranges whose payload was there and could not be read

    def take(self, gtid: int, domain_id: int | None, text: str, blob: object,
             fresh: bool) -> tuple[Call, ...] | None:
        """The calls a kernel launched inside this range ran, or None. `fresh`: the range was
        not taken in by an earlier window (an inherited one changes no group)."""
        depth, calls = self.state.get(gtid, NO_GROUP)
        if text == GROUP_END:
            if not fresh:
                self.ended.add(gtid)
                return calls if not depth and calls else None
            self.nested.add(gtid)
            if depth > 1:
                self.state[gtid] = (depth - 1, calls)
            elif depth == 1:
                self.state[gtid] = (0, calls)
                return calls or None
            # A group end with no start seen (the capture began inside the group) says nothing
            # of the calls before it: none rather than a part of them.
            return None
        if text == GROUP_START:
            if fresh:
                self.nested.add(gtid)
                self.state[gtid] = (depth + 1, calls if depth else ())
            return None
        if blob is None:
            return None
        decoded = self.schemas.decode(domain_id, blob)
        if decoded is None:
            # A communicator's creation has a payload of its own, read by comm_sizes.
            if fresh and self.schemas.comm_size(domain_id, blob) is None:
                self.unknown += 1
            return None
        call = (Call(text, *decoded, self.sizes.get(decoded[1])),)
        if fresh:
            self.nested.add(gtid)
            if depth:
                self.state[gtid] = (depth, calls + call)
        return call


def member_js(calls: tuple[Call, ...]) -> str:
    """The record's `nccl` member, with its leading comma: a list of the calls."""
    return f',"{NCCL}":[{",".join(c.js() for c in calls)}]'
