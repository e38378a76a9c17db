"""The Parquet record store, read: records as dicts, in rank order and within a rank in the order
parse wrote them (prof's views need them so), or as an Arrow table of chosen fields with a filter
applied by the Parquet reader (row groups whose statistics exclude it are not read)."""
from __future__ import annotations

import json
import os
from operator import itemgetter
from typing import Any, Iterator

from ..errors import EXIT_BAD_FORMAT, EXIT_CORRUPT, PyprofError
from . import schema
from .schema import EXTRA, FIELDS, JSON, KEYS, PARTITION

try:  # optional (pyprof-nvtx[fast]); the same records either way
    from orjson import loads as _loads
except ImportError:
    _loads = json.JSONDecoder().decode

PARQUET = b"PAR1"  # a Parquet file's first (and last) four bytes


def is_store(path: str) -> bool:
    """Whether `path` is a record store to read as Parquet: a folder, a file whose name ends in
    .parquet, or a file that starts as Parquet does."""
    if path == "-":
        return False
    if os.path.isdir(path) or path.endswith(".parquet"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(4) == PARQUET
    except OSError:
        return False


def _bad(path: str, err: Exception) -> PyprofError:
    """The one-line error for a store pyarrow cannot read: corrupted (EXIT_CORRUPT) or not
    pyprof's records (EXIT_BAD_FORMAT)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, FileNotFoundError):
        from ..errors import EXIT_NO_INPUT
        return PyprofError(f"cannot read {path}: No such file or directory", EXIT_NO_INPUT)
    return PyprofError(f"{path}: the Parquet record store is truncated or corrupted ({text})", EXIT_CORRUPT)


def _dataset(path: str) -> Any:
    """The store as a pyarrow dataset, its files in rank order (records without rank first),
    `rank` an int64 partition field."""
    pa = schema.require_pyarrow()
    ds = pa.dataset
    part = ds.partitioning(pa.schema([(PARTITION, pa.int64())]), flavor="hive")
    try:
        found = ds.dataset(path, format="parquet", partitioning=part, exclude_invalid_files=False)
        frags = sorted(found.get_fragments(), key=lambda f: (_rank(f) is not None, _rank(f) or 0, f.path))
        for frag in frags:
            if KEYS not in frag.physical_schema.names:
                raise PyprofError(f"{path}: {frag.path} is Parquet but holds no pyprof records (no {KEYS} column; "
                                  "prof reads the store `python -m pyprof.parse -o X.parquet` writes, not the table "
                                  "prof --parquet writes)", EXIT_BAD_FORMAT)
        if not frags:
            raise PyprofError(f"{path}: a folder with no Parquet file in it (expected a record store written by "
                              "`python -m pyprof.parse -o X.parquet`)", EXIT_BAD_FORMAT)
        base = path if os.path.isdir(path) else None
        # JSON texts repeat (one marker per op call and shape): read as dictionaries, decoded once each.
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(
            dictionary_columns=[f for f, kind in FIELDS.items() if kind == JSON]))
        return ds.dataset([f.path for f in frags], format=fmt, partitioning=part, partition_base_dir=base)
    except (pa.ArrowException, OSError) as err:
        raise _bad(path, err) from None


def _rank(frag: Any) -> int | None:
    """The rank of a fragment's folder (`rank=N`), or None."""
    return schema.require_pyarrow().dataset.get_partition_keys(frag.partition_expression).get(PARTITION)


def _decoded(column: Any, kind: Any, shared: bool) -> list:
    """A column's values as the record holds them; a JSON column (read dictionary-encoded) is
    decoded once per distinct text when `shared`, its objects then shared by the records."""
    if kind != JSON:
        return column.to_pylist()
    texts = column.dictionary.to_pylist()
    objs = [_loads(t) for t in texts] if shared else texts
    picked = [None if i is None else objs[i] for i in column.indices.to_pylist()]
    return picked if shared else [None if t is None else _loads(t) for t in picked]


def records(path: str, fields: list[str] | None = None, shared: bool = False) -> Iterator[dict]:
    """The records of the store `path`, one dict each, exactly as the JSON Lines they were written
    from (keys, order of keys, values). `fields`: only these keys (the others are not read).
    `shared`: records with equal `marker`, `fwd`, `torchOps` or `compiled` share one object
    (decoded once; for readers that never change a record, as prof's views)."""
    pa = schema.require_pyarrow()
    wanted = list(FIELDS) if fields is None else [f for f in FIELDS if f in fields]
    keep = None if fields is None else set(fields)
    for frag in _dataset(path).get_fragments():
        try:
            for batch in frag.to_batches(columns=wanted + [KEYS, EXTRA]):
                yield from _batch_records(batch, wanted, _rank(frag), keep, shared)
        except (pa.ArrowException, OSError) as err:
            raise _bad(path, err) from None


def _batch_records(batch: Any, wanted: list[str], rank: int | None, keep: set | None,
                   shared: bool) -> Iterator[dict]:
    n = batch.num_rows
    names = [*wanted, PARTITION, None]  # None: the column of a key held in _extra alone
    cols = [_decoded(batch.column(name), FIELDS[name], shared) for name in wanted]
    cols += [[rank] * n, [None] * n]
    at = {name: i for i, name in enumerate(names)}
    keys = batch.column(KEYS)
    order = [tuple(json.loads(t)) for t in keys.dictionary.to_pylist()]
    if keep is not None:
        order = [tuple(k for k in ks if k in keep) for ks in order]
    # Per set of keys, the positions of their values in a row: dict(zip(keys, pick(row))).
    picks = [(ks, itemgetter(*[at.get(k, at[None]) for k in ks]) if len(ks) > 1 else None) for ks in order]
    extra = batch.column(EXTRA)
    extras = extra.to_pylist() if extra.null_count < n else [None] * n
    for row, i, ext in zip(zip(*cols), keys.indices.to_pylist(), extras):
        ks, pick = picks[i]
        rec = dict(zip(ks, pick(row))) if pick is not None else {k: row[at.get(k, at[None])] for k in ks}
        if ext is not None:
            for k, v in _loads(ext).items():
                if keep is None or k in keep:
                    rec[k] = v
        yield rec


def table(path: str, fields: list[str] | None = None, where: Any = None) -> Any:
    """An Arrow table of the store `path`: `fields` (record field names; default all), with
    `rank` as an int64 column when the store is ranked, the JSON fields as their text; `where`,
    a pyarrow.compute expression on those fields (pyarrow.dataset.field("op") == "linear"),
    is applied by the Parquet reader: row groups whose statistics rule it out are skipped. Rows
    in rank order, then in the order parse wrote them."""
    pa = schema.require_pyarrow()
    names = list(FIELDS) if fields is None else list(fields)
    unknown = [f for f in names if f not in FIELDS and f != PARTITION]
    if unknown:
        raise ValueError(f"unknown record field {unknown[0]!r}; known: {', '.join([PARTITION, *FIELDS])}")
    try:
        return _dataset(path).to_table(columns=names, filter=where)
    except (pa.ArrowException, OSError) as err:
        raise _bad(path, err) from None
