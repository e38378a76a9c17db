"""Which Parquet column holds which record field, and how: the one definition of the record
store's columns (docs/records.md, "Parquet"). Writer and reader both follow FIELDS, which takes
the keys, their order and their JSON types from the record contract, pyprof/formats.py: a key
added there gets a column here (JSON text unless its type says int or text).

Encodings:
- scalars (`int`, `str`): a typed column, null for a JSON null;
- `list[int]`, `list[str]` (grid, block, altSeqId, layer, ranges): a list column;
- STRUCT fields (`launch`, `gpu`): a struct column of their fixed keys (`None` when null);
- JSON fields (`marker`, `fwd`, `torchOps`, `nccl`, `compiled`): free-form objects (a
  marker's arguments are whatever the user passed), kept as their compact JSON text;
- `rank`: not a column of the files but the dataset's partition (folder `rank=N`).

Two columns make the round trip exact whatever a record holds: `_keys`, the record's keys in
order (dictionary-encoded: a few distinct values per file), and `_extra`, the JSON text of every
key whose value does not fit its column (a float where an int is due, text that is no UTF-8, a
key a newer parse writes) or that has none; null for nearly every record.
"""
from __future__ import annotations

import json
from typing import Any

from .. import formats
from ..errors import EXIT_TOOL, PyprofError

NEEDS = "Parquet records need pyarrow: pip install pyarrow (or pip install 'pyprof-nvtx[parquet]')"

JSON = "json"      # compact JSON text
STRUCT = "struct"  # a struct column of the keys in STRUCT_KEYS

STRUCT_KEYS: dict[str, dict[str, type]] = {
    formats.LAUNCH: {"api": str, "start": int, "duration": int},
    formats.GPU: {"name": str, "memoryBandwidth": int, "smCount": int, "clockRate": int},
}
# Lists whose items have one type (formats.FIELDS says only "list").
_LISTS: dict[str, Any] = {formats.GRID: list[int], formats.BLOCK: list[int], formats.ALT_SEQ_ID: list[int],
                          formats.LAYER: list[str], formats.RANGES: list[str]}


def _encoding(field: formats.Field) -> Any:
    """How the store holds a record field of the contract: a struct or typed list where said
    above, a typed column for an int or a text (null or not), else JSON text."""
    if field.key in STRUCT_KEYS:
        return STRUCT
    if field.key in _LISTS:
        return _LISTS[field.key]
    types = set(field.types) - {formats.NULL}
    return int if types == {formats.INT} else str if types == {formats.STR} else JSON


# Record field -> encoding: every key of the record contract (pyprof/formats.py), in its order,
# but rank, which is the partition.
FIELDS: dict[str, Any] = {f.key: _encoding(f) for f in formats.FIELDS if f.key != formats.RANK}
PARTITION = formats.RANK
KEYS = "_keys"
EXTRA = "_extra"


try:  # optional (pyprof-nvtx[fast]): 3x faster; loads() falls back to json where it is not exact
    from orjson import loads as _fast_loads
except ImportError:
    _fast_loads = None
# orjson reads integers from -2**63 to 2**64 exactly and makes floats of the rest: a JSON text
# with a run of 20 digits, or a minus and 19, goes to json. Found by mapping every digit to 0.
_DIGITS = bytes(48 if 48 <= i <= 57 else 45 if i == 45 else 32 for i in range(256))
_HUGE, _HUGE_NEGATIVE = b"0" * 20, b"-" + b"0" * 19


def loads(text: str | bytes) -> Any:
    """JSON `text` decoded exactly: orjson where installed, except where it is not exact (an
    integer beyond 64 bits, which it makes a float; a lone surrogate's escape, which it refuses)."""
    if _fast_loads is not None:
        digits = (text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")).translate(_DIGITS)
        if _HUGE not in digits and _HUGE_NEGATIVE not in digits:
            try:
                return _fast_loads(text)
            except ValueError:
                pass
    return json.loads(text)


def require_pyarrow(needs: str = NEEDS) -> Any:
    """pyarrow (with its parquet and dataset modules), or PyprofError `needs` (EXIT_TOOL)."""
    try:
        import pyarrow
        import pyarrow.dataset  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise PyprofError(needs, EXIT_TOOL) from None
    return pyarrow


def arrow_type(kind: Any) -> Any:
    """The Arrow type of a value of `kind`: int, float, bool, str (prof's --parquet table types
    its columns so too), list[int], list[str], or a record field's STRUCT / JSON encoding
    (arrow_type(STRUCT) needs the field: use field_type)."""
    pa = require_pyarrow()
    scalar = {int: pa.int64(), float: pa.float64(), bool: pa.bool_(), str: pa.string(), JSON: pa.string()}
    if kind in scalar:
        return scalar[kind]
    return pa.list_(scalar[kind.__args__[0]])


def field_type(name: str) -> Any:
    """The Arrow type of record field `name`'s column."""
    kind = FIELDS[name]
    if kind == STRUCT:
        pa = require_pyarrow()
        return pa.struct([(k, arrow_type(t)) for k, t in STRUCT_KEYS[name].items()])
    return arrow_type(kind)


def file_schema() -> Any:
    """The schema of each Parquet file of the store (rank is the folder's, not a column)."""
    pa = require_pyarrow()
    return pa.schema([(name, field_type(name)) for name in FIELDS]
                     + [(KEYS, pa.dictionary(pa.int32(), pa.string())), (EXTRA, pa.string())])
