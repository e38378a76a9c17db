"""The contract between pyprof's stages, in one place: what annotation writes into a trace and
parse reads back (the NVTX domain, the markers' kinds, keys and versions), and what parse writes
and prof reads (the record's keys, their JSON types, the record version).

docs/markers.md and docs/records.md describe each key; tests/test_formats.py holds this module,
parse's output on the shipped captures, the markers in them and both documents to one another.
This module imports no other part of pyprof and no torch: every stage reads it.

A record carries `"v": VERSION`. The version goes up when keys are added or change meaning; prof
reads records of its own version and older, and analyses newer ones as far as it knows them,
with a warning that names both versions.
"""
from __future__ import annotations

from json.encoder import encode_basestring_ascii as _quote
from typing import NamedTuple

# The NVTX domain of every pyprof range and mark.
DOMAIN = "pyprof"

# ---- Markers (docs/markers.md): JSON texts in DOMAIN, one object per range or mark.

# The version of op, module, layer, graph and kernel markers; a marker's `v` is the version that
# introduced its form, so these keep 1.
MARKER_VERSION = 1
# The most elements past a marker list's first 16 that annotation reads to write them as runs
# (`{"more": N, "runs": [...]}`, docs/markers.md): readers expand no more than that.
MAX_RUN_ELEMENTS = 1024
# The version that introduced `kind: "bwd"` markers.
BWD_MARKER_VERSION = 2
# Text of a user range in any domain that means a layer (`torch.cuda.nvtx.range_push("layer:x")`),
# as with the original PyProf.
LAYER_PREFIX = "layer:"


class MarkerKind(NamedTuple):
    """One kind of marker: the version its `v` carries, the keys it always has, and those it may have."""

    version: int
    required: tuple[str, ...]
    optional: tuple[str, ...] = ()


MARKERS: dict[str, MarkerKind] = {
    "op": MarkerKind(MARKER_VERSION, ("v", "kind", "mod", "op", "args"),
                     ("kwargs", "site", "module", "autocast", "dist", "out")),
    "module": MarkerKind(MARKER_VERSION, ("v", "kind", "module", "cls", "repr"), ("dist",)),
    "layer": MarkerKind(MARKER_VERSION, ("v", "kind", "name")),
    "bwd": MarkerKind(BWD_MARKER_VERSION, ("v", "kind", "node", "fwd")),
    # NVTX marks, not ranges: the compile-time table of torch.compile'd graphs.
    "graph": MarkerKind(MARKER_VERSION, ("v", "kind", "graph", "bwd", "device", "cudagraphs", "calls")),
    "kernel": MarkerKind(MARKER_VERSION, ("v", "kind", "graph", "call", "name", "extern", "nodes"), ("bytes",)),
    # An NVTX mark inside an op's range: what a call whose output size its data decide returned.
    "out": MarkerKind(MARKER_VERSION, ("v", "kind", "out")),
}


# Op markers' `mod` for the calls parse and prof single out: torch.distributed's (rank, collectives),
# optimizer steps (`<Class>.step`) and GradScaler's unscale and update (`GradScaler.unscale_`), the
# last two direction `optim`.
DIST_MOD = "torch.distributed"
OPTIM_MOD = "torch.optim"
AMP_MOD = "torch.amp"


def op_marker_head(mod: str) -> str:
    """The text every op marker of `mod` starts with, up to its `"op":` key: annotation builds its
    markers from it, parse finds a module's markers among the trace's strings by it."""
    return '{"v":' + str(MARKER_VERSION) + ',"kind":"op","mod":' + _quote(mod) + ',"op":'


# ---- Records (docs/records.md): one JSON object per line, written by parse, read by prof.

VERSION = 1

KERNEL, MEMCPY, MEMSET = "kernel", "memcpy", "memset"  # the record kinds
_ALL = (KERNEL, MEMCPY, MEMSET)
_COPIES = (MEMCPY, MEMSET)

# The record keys, as names to read them by.
V, RANK, KIND = "v", "rank", "kind"
SHORT_NAME, LONG_NAME = "kShortName", "kLongName"
DURATION, START, END = "kDuration", "kStart", "kEnd"
DEVICE, STREAM, GRID, BLOCK = "device", "stream", "grid", "block"
REGS, STATIC_SHARED, DYNAMIC_SHARED = "regs", "staticShared", "dynamicShared"
PID, TID, CORRELATION_ID, LAUNCH, GRAPH_NODE, GPU = "pid", "tid", "correlationId", "launch", "graphNode", "gpu"
BYTES, COPY_KIND = "bytes", "copyKind"
DIR, MOD, OP, MARKER, FWD = "dir", "mod", "op", "marker", "fwd"
TORCH_OPS, SEQ_ID, ALT_SEQ_ID, SUB_SEQ_ID = "torchOps", "seqId", "altSeqId", "subSeqId"
LAYER, MODULE, TRACE, RANGES, COMPILED = "layer", "module", "trace", "ranges", "compiled"
CONSUMERS, NCCL = "consumers", "nccl"
# PyTorch's views that broadcast their input (a stride of 0 where they grow a dim), as its op
# ranges name them: parse carries each such range in the next record's `consumers`, whoever
# listens (docs/records.md), and prof reads its first input's shape as what an op reading the view
# reads once.
BROADCAST_VIEWS = frozenset(("aten::expand", "aten::expand_as", "aten::broadcast_to"))

# JSON types, as docs/records.md names them.
INT, STR, LIST, OBJECT, NULL = "int", "str", "list", "object", "null"


class Field(NamedTuple):
    """One record key: the JSON types its value may have, the record kinds that carry it, and
    whether it is only there sometimes (`rank`: several exports; `consumers`: the first launch
    after a data-sized op's, on its thread, where ranges that read its output came between, or
    after a broadcasting view's range;
    `nccl`: a launch inside an NCCL call's range with a payload; `compiled`: a joined kernel)."""

    key: str
    types: tuple[str, ...]
    kinds: tuple[str, ...] = _ALL
    sometimes: bool = False


# In the order parse writes them.
FIELDS: tuple[Field, ...] = (
    Field(V, (INT,)),
    Field(RANK, (INT,), sometimes=True),
    Field(KIND, (STR,)),
    Field(SHORT_NAME, (STR,)),
    Field(LONG_NAME, (STR,), (KERNEL,)),
    Field(DURATION, (INT,)),
    Field(START, (INT,)),
    Field(END, (INT,)),
    Field(DEVICE, (INT,)),
    Field(STREAM, (INT,)),
    Field(GRID, (LIST,), (KERNEL,)),
    Field(BLOCK, (LIST,), (KERNEL,)),
    Field(REGS, (INT,), (KERNEL,)),
    Field(STATIC_SHARED, (INT,), (KERNEL,)),
    Field(DYNAMIC_SHARED, (INT,), (KERNEL,)),
    Field(PID, (INT,)),
    Field(TID, (INT, NULL)),
    Field(CORRELATION_ID, (INT,)),
    Field(LAUNCH, (OBJECT, NULL)),
    Field(GRAPH_NODE, (INT, NULL), (KERNEL,)),
    Field(GPU, (OBJECT, NULL), (KERNEL,)),
    Field(BYTES, (INT,), _COPIES),
    Field(COPY_KIND, (STR, NULL), (MEMCPY,)),
    Field(DIR, (STR,)),
    Field(MOD, (STR, NULL)),
    Field(OP, (STR, NULL)),
    Field(MARKER, (OBJECT, NULL)),
    Field(FWD, (OBJECT, NULL)),
    Field(TORCH_OPS, (LIST,)),
    Field(SEQ_ID, (INT, NULL)),
    Field(ALT_SEQ_ID, (LIST,)),
    Field(SUB_SEQ_ID, (INT,)),
    Field(LAYER, (LIST,)),
    Field(MODULE, (STR, NULL)),
    Field(TRACE, (STR, NULL)),
    Field(RANGES, (LIST,)),
    Field(CONSUMERS, (LIST,), sometimes=True),
    Field(NCCL, (LIST,), sometimes=True),
    Field(COMPILED, (OBJECT,), (KERNEL,), sometimes=True),
)
RECORD_KEYS = frozenset(f.key for f in FIELDS)

_JSON_TYPES = {int: INT, str: STR, list: LIST, dict: OBJECT, type(None): NULL, bool: "bool", float: "float"}


def json_type(value: object) -> str:
    """The JSON type name of a decoded value (`int`, `str`, `list`, `object`, `null`, `bool`,
    `float`); a bool is no int here."""
    return _JSON_TYPES.get(type(value), type(value).__name__)
