"""The Parquet record store, read: records as dicts, in rank order and within a rank in the order
parse wrote them (prof's views need them so), or as an Arrow table of chosen fields with a filter
applied by the Parquet reader (row groups whose statistics exclude it are not read)."""
from __future__ import annotations

import json
import os
import stat
from operator import itemgetter
from typing import Any, Iterator

from ..errors import EXIT_BAD_FORMAT, EXIT_CORRUPT, PyprofError, open_input
from ..magic import PARQUET
from . import schema
from .schema import EXTRA, FIELDS, JSON, KEYS, PARTITION

BATCH = 4096  # records made into dicts at a time: their Python objects are most of the memory held


def is_store(path: str) -> bool:
    """Whether `path` is a record store to read as Parquet: a folder, a file whose name ends in
    .parquet, or a file that starts as Parquet does."""
    if path == "-":
        return False
    if os.path.isdir(path):  # a folder without Parquet files stays what it was: no record file (status 3)
        return any(_parquet_in(path))
    if path.endswith(".parquet"):
        return True
    try:
        # Only a regular file is looked into: a read from a FIFO would take bytes the record
        # reader needs (and Parquet cannot be read from one anyway: its footer is at the end).
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as f:
            return f.read(4) == PARQUET
    except OSError:
        return False


def _parquet_in(folder: str) -> Iterator[str]:
    """The Parquet files of a store folder: at its top and in its `rank=N` folders."""
    try:
        for entry in os.scandir(folder):
            if entry.name.endswith(".parquet") and entry.is_file():
                yield entry.path
            elif entry.name.startswith(PARTITION + "=") and entry.is_dir():
                yield from (e.path for e in os.scandir(entry.path) if e.name.endswith(".parquet"))
    except OSError:
        return


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
        return ds.dataset([f.path for f in frags], format="parquet", partitioning=part, partition_base_dir=base)
    except (pa.ArrowException, OSError) as err:
        raise _bad(path, err) from None


def _rank(frag: Any) -> int | None:
    """The rank of a fragment's folder (`rank=N`), or None."""
    return schema.require_pyarrow().dataset.get_partition_keys(frag.partition_expression).get(PARTITION)


_SHARED_MAX = 4096  # JSON texts whose decoded object is kept for the records after (shared=True)


def _decoded(column: Any, kind: Any, shared: dict | None) -> list:
    """A column's values as the record holds them. A JSON text is decoded once while it stays in
    `shared` (a dict text -> object, bounded), its object then shared by the records; without it
    each record gets its own."""
    values = column.to_pylist()
    if kind != JSON:
        return values
    if shared is None:
        return [None if t is None else schema.loads(t) for t in values]
    if len(shared) > _SHARED_MAX:
        shared.clear()
    out = []
    for t in values:
        if t is None:
            out.append(None)
            continue
        obj = shared.get(t)
        if obj is None:
            obj = shared[t] = schema.loads(t)
        out.append(obj)
    return out


def records(path: str, fields: list[str] | None = None, shared: bool = False) -> Iterator[dict]:
    """The records of the store `path`, one dict each, exactly as the JSON Lines they were written
    from (keys, order of keys, values). `fields`: only these keys (the others are not read).
    `shared`: records with equal `marker`, `fwd`, `torchOps` or `compiled` share one object
    (decoded once; for readers that never change a record, as prof's views)."""
    wanted = list(FIELDS) if fields is None else [f for f in FIELDS if f in fields]
    keep = None if fields is None else set(fields)
    cache = {} if shared else None
    for rank, batch in batches(path, wanted, BATCH):
        yield from _batch_records(batch, wanted, rank, keep, cache)


def batches(path: str, fields: list[str], size: int, dictionary: tuple = ()) -> Iterator[tuple[int | None, Any]]:
    """(rank, Arrow record batch of `size` rows at most) of the store `path`, in the order of
    records(): columns `fields` (in FIELDS' order) and the store's own two (_keys, _extra); the
    text columns named in `dictionary` as dictionary arrays (the file's own dictionary, read as
    it is: its values are not made into strings row by row)."""
    pa = schema.require_pyarrow()
    for frag in _dataset(path).get_fragments():
        try:
            # One file at a time, a batch at a time (the dataset scanner reads ahead: 3x the memory),
            # without pre-buffering: its cache keeps every column chunk read till the file is done.
            with pa.parquet.ParquetFile(frag.path, read_dictionary=list(dictionary), pre_buffer=False) as file:
                for batch in file.iter_batches(size, columns=fields + [KEYS, EXTRA]):
                    yield _rank(frag), batch
        except (pa.ArrowException, OSError) as err:
            raise _bad(path, err) from None


def record_at(batch: Any, row: int, fields: list[str], rank: int | None) -> dict:
    """Row `row` of a batch of batches(path, fields, ...) as records() gives it with `fields`."""
    return next(_batch_records(batch.slice(row, 1), fields, rank, {*fields, PARTITION}, None))


def _batch_records(batch: Any, wanted: list[str], rank: int | None, keep: set | None,
                   shared: dict | None) -> Iterator[dict]:
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
            for k, v in schema.loads(ext).items():
                if keep is None or k in keep:
                    rec[k] = v
        yield rec


def table(path: str, fields: list[str] | None = None, where: Any = None) -> Any:
    """An Arrow table of the records at `path` (a store; or JSON Lines, built in memory): `fields`
    (record field names, `rank` among them; default all but rank), the JSON fields as their text,
    nothing decoded into Python objects; `where`, a pyarrow.compute expression on record fields
    (pyarrow.dataset.field("op") == "linear"), is applied by the Parquet reader: row groups whose
    statistics rule it out are skipped, as are the folders of ranks it rules out. Rows in rank
    order, then in the order parse wrote them. ValueError for an unknown field."""
    pa = schema.require_pyarrow()
    names = list(FIELDS) if fields is None else list(fields)
    unknown = [f for f in names if f not in FIELDS and f != PARTITION]
    if unknown:
        raise ValueError(f"unknown record field {unknown[0]!r}; known: {', '.join([PARTITION, *FIELDS])}")
    if not (os.path.isdir(path) or is_store(path)):
        from .write import ranked_table

        with open_input(path) as stream:
            whole = pa.dataset.dataset(ranked_table(stream, path))
        return whole.to_table(columns=names, filter=where)
    try:
        return _dataset(path).to_table(columns=names, filter=where)
    except (pa.ArrowException, OSError) as err:
        raise _bad(path, err) from None
