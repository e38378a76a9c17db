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
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from pyprof.formats import NCCL
from pyprof.parse.export import Export
from pyprof.parse.ranges import encode_str

NCCL_DOMAIN = "NCCL"
GROUP_START, GROUP_END = "ncclGroupStart", "ncclGroupEnd"
SCHEMA_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
ENUMS = "NVTX_PAYLOAD_ENUMS"
# The entries read, by the name NCCL gives them.
BYTES_ENTRY = "Message size [bytes]"
COMM_ENTRY = "NCCL communicator ID"
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
    (hex, as NCCL's 64-bit hash does not fit a JSON reader's float)."""

    name: str
    bytes: int
    comm: str | None

    def js(self) -> str:
        """The call as a record's JSON object."""
        comm = "null" if self.comm is None else f'"{self.comm}"'
        return f'{{"call":{encode_str(self.name)},"bytes":{self.bytes},"comm":{comm}}}'


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
                        "WHERE name IN (?, ?)", (BYTES_ENTRY, COMM_ENTRY))
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

    def decode(self, domain_id: int | None, blob: object) -> tuple[int | None, str | None] | None:
        """(message size, communicator id) of the first payload in `blob` whose schema has a
        message size; None when there is none (a malformed blob, an unknown schema)."""
        if not isinstance(blob, bytes) or len(blob) < _HEAD.size:
            return None
        (count,) = _HEAD.unpack_from(blob)
        if count > _MAX_PAYLOADS or _HEAD.size + count * _ENTRY.size > len(blob):
            return None
        for i in range(count):
            sid, size, offset = _ENTRY.unpack_from(blob, _HEAD.size + i * _ENTRY.size)
            fields = self.fields.get((domain_id, sid))
            if fields is None or BYTES_ENTRY not in fields:
                continue
            data = blob[offset:offset + size] if offset + size <= len(blob) else b""
            value = _integer(data, fields[BYTES_ENTRY])
            if value is None or value < 0:
                return None
            comm = _integer(data, fields.get(COMM_ENTRY))
            return value, None if comm is None else f"{comm & 0xFFFFFFFFFFFFFFFF:016x}"
        return None


def _integer(data: bytes, field: tuple[int, int, bool] | None) -> int | None:
    if field is None:
        return None
    offset, size, signed = field
    if offset + size > len(data):
        return None
    return int.from_bytes(data[offset:offset + size], "little", signed=signed)


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
        self.schemas = Schemas(exp)
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
            if fresh:
                self.unknown += 1
            return None
        call = (Call(text, *decoded),)
        if fresh:
            self.nested.add(gtid)
            if depth:
                self.state[gtid] = (depth, calls + call)
        return call


def member_js(calls: tuple[Call, ...]) -> str:
    """The record's `nccl` member, with its leading comma: a list of the calls."""
    return f',"{NCCL}":[{",".join(c.js() for c in calls)}]'
