"""JSON Lines records -> the Parquet record store: a folder with one Parquet file per rank
(`rank=N/part-0.parquet`, hive partitioning; `part-0.parquet` for records without rank), columns
as schema.FIELDS says. Records are converted a batch at a time and kept as Arrow arrays until a
row group is full: memory stays flat whatever the number of records."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from typing import Any, BinaryIO, Callable, Iterator

from ..errors import EXIT_BAD_FORMAT, PyprofError, cannot_write
from . import schema
from .schema import FIELDS, JSON, PARTITION, STRUCT, STRUCT_KEYS

try:  # optional (pyprof-nvtx[fast]); the same records either way
    from orjson import dumps as _fast_dumps
except ImportError:
    _fast_dumps = None

BATCH = 8192          # records decoded at a time (their dicts are the largest thing held)
ROW_GROUP = 65536     # rows per Parquet row group
SUFFIX = ".parquet"


def wants_store(output: str | None) -> bool:
    """Whether the output `output` is to be the Parquet record store (its name ends in .parquet)."""
    return output is not None and output.endswith(SUFFIX)


def _dumps(v: Any) -> str | None:
    if v is None:
        return None
    if _fast_dumps is not None:
        try:
            return _fast_dumps(v).decode()
        except TypeError:  # a lone surrogate, an int beyond 64 bits: json says it exactly
            pass
    text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape: kept escaped, read back the same
        text = json.dumps(v, separators=(",", ":"))
    return text


def _utf8(v: str) -> bool:
    try:
        v.encode()
    except UnicodeEncodeError:
        return False
    return True


def _int(v: Any) -> bool:
    return type(v) is int and -2**63 <= v < 2**63


def _scalar_fits(kind: type) -> Callable[[Any], bool]:
    if kind is int:
        return lambda v: v is None or _int(v)
    return lambda v: v is None or (type(v) is str and (v.isascii() or _utf8(v)))


def _fits(name: str) -> Callable[[Any], bool]:
    """The test of a value that field `name`'s column holds exactly (else it goes to _extra)."""
    kind = FIELDS[name]
    if kind == JSON:
        return lambda v: True
    if kind == STRUCT:
        inner = {k: _scalar_fits(t) for k, t in STRUCT_KEYS[name].items()}
        return lambda v: v is None or (type(v) is dict and v.keys() == inner.keys()
                                       and all(ok(v[k]) for k, ok in inner.items()))
    if kind in (int, str):
        return _scalar_fits(kind)
    item = _scalar_fits(kind.__args__[0])
    return lambda v: v is None or (type(v) is list and all(map(item, v)))


_FITS = {name: _fits(name) for name in FIELDS}
_OK_TYPES = {int: {int, type(None)}, str: {str, type(None)}}


def _column(name: str, values: list, extra: list) -> list:
    """`values` of field `name` as its column holds them; a value that does not fit is moved to
    its record's `extra` dict and the column gets null."""
    kind = FIELDS[name]
    if kind == JSON:
        return [_dumps(v) for v in values]
    # The common case, checked per column rather than per value; Arrow refuses an int beyond
    # int64 and text that is no UTF-8 (add() then sorts the values one by one).
    if kind in (int, str) and {type(v) for v in values} <= _OK_TYPES[kind]:
        return values
    if kind in (list[int], list[str]) and {type(v) for v in values} <= {list, type(None)} and \
            {type(x) for v in values if v for x in v} <= _OK_TYPES[kind.__args__[0]]:
        return values
    if kind == STRUCT:
        inner = STRUCT_KEYS[name]
        given = [v for v in values if v is not None]
        if {type(v) for v in given} <= {dict} and {tuple(v) for v in given} <= {tuple(inner)} and \
                all({type(v[k]) for v in given} <= _OK_TYPES[t] for k, t in inner.items()):
            return values
    fits = _FITS[name]
    out = []
    for i, v in enumerate(values):
        if fits(v):
            out.append(v)
        else:
            out.append(None)
            extra[i][name] = v
    return out


class _Store:
    """The dataset folder being written: one Parquet writer per rank, opened on its first record."""

    def __init__(self, folder: str | None, path: str) -> None:
        self.pa = schema.require_pyarrow()
        self.schema = schema.file_schema()
        self.folder = folder
        self.path = path  # the output named in messages
        self.writers: dict[int | None, Any] = {}
        self.held: dict[int | None, list] = {}
        self._keys: dict[tuple, tuple[str, list[str]]] = {}

    def _keys_of(self, rec: dict) -> tuple[str, list[str]]:
        """(_keys text, the keys with no column) of a record with `rec`'s keys, in order."""
        names = tuple(rec)
        got = self._keys.get(names)
        if got is None:
            got = self._keys[names] = (json.dumps(names), [k for k in names if k not in FIELDS and k != PARTITION])
        return got

    def add(self, rank: int | None, recs: list[dict]) -> None:
        """Convert `recs` (all of one rank, in order) and hold them, writing full row groups."""
        self.held.setdefault(rank, []).append(self.batch(rank, recs))
        if sum(b.num_rows for b in self.held[rank]) >= ROW_GROUP:
            self.flush(rank)

    def batch(self, rank: int | None, recs: list[dict]) -> Any:
        """`recs` (all of rank `rank`) as an Arrow record batch of the store's file schema."""
        pa = self.pa
        extra: list[dict] = [{} for _ in recs]
        keys = []
        for rec, ext in zip(recs, extra):
            text, others = self._keys_of(rec)
            keys.append(text)
            for k in others:
                ext[k] = rec[k]
            if PARTITION in rec and rank is None:  # a rank that is no partition: kept as it is
                ext[PARTITION] = rec[PARTITION]
        arrays = []
        # Transposed in C: each record's values in FIELDS order, then the columns.
        by_field = zip(*[tuple(map(r.get, FIELDS)) for r in recs])
        for name, f, column in zip(FIELDS, self.schema, by_field):
            values = _column(name, list(column), extra)
            try:
                arrays.append(pa.array(values, f.type))
            except (pa.ArrowException, OverflowError, UnicodeEncodeError):  # what the column tests let pass
                for i, v in enumerate(values):
                    if v is not None and not _FITS[name](v):
                        values[i], extra[i][name] = None, v
                arrays.append(pa.array(values, f.type))
        arrays.append(pa.array(keys, pa.string()).dictionary_encode())
        arrays.append(pa.array([_dumps(e) if e else None for e in extra], pa.string()))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def flush(self, rank: int | None) -> None:
        """Write what is held for `rank` as one row group."""
        held = self.held.pop(rank, None)
        if not held:
            return
        try:
            writer = self.writers.get(rank)
            if writer is None:
                sub = self.folder if rank is None else os.path.join(self.folder, f"{PARTITION}={rank}")
                os.makedirs(sub, exist_ok=True)
                writer = self.writers[rank] = self.pa.parquet.ParquetWriter(
                    os.path.join(sub, "part-0.parquet"), self.schema, compression="zstd")
            writer.write_table(self.pa.Table.from_batches(held, self.schema), row_group_size=ROW_GROUP)
        except OSError as err:
            raise cannot_write(self.path, err) from None

    def close(self) -> None:
        """Write what is held and finish every file."""
        for rank in list(self.held):
            self.flush(rank)
        for writer in self.writers.values():
            try:
                writer.close()
            except OSError as err:
                raise cannot_write(self.path, err) from None


def ranked_table(lines: BinaryIO, name: str) -> Any:
    """The records of the JSON Lines stream `lines` as one Arrow table of the store's columns, with
    `rank` (int64) when any record has one: what read.table gives for a store, built in memory."""
    pa = schema.require_pyarrow()
    conv = _Store(None, name)
    parts = []
    for rank, recs in _ranked(lines, name):
        b = conv.batch(rank, recs)
        parts.append(pa.Table.from_batches([b]).append_column(PARTITION, pa.array([rank] * b.num_rows, pa.int64())))
    if not parts:
        return conv.schema.empty_table().append_column(PARTITION, pa.array([], pa.int64()))
    return pa.concat_tables(parts)


def _ranked(lines: BinaryIO, name: str) -> Iterator[tuple[int | None, list[dict]]]:
    """(rank, records) batches of the record file `lines`, each of one rank (None: no rank, or
    one that cannot name a folder), in order."""
    batch: list[dict] = []
    rank = None
    for n, line in enumerate(lines, 1):
        try:
            rec = schema.loads(line)
        except ValueError:
            rec = None
        if not isinstance(rec, dict):
            raise PyprofError(f"{name}: line {n}: not a pyprof.parse record", EXIT_BAD_FORMAT)
        r = rec.get(PARTITION)
        r = r if _int(r) and r >= 0 else None
        if batch and (r != rank or len(batch) >= BATCH):
            yield rank, batch
            batch = []
        rank = r
        batch.append(rec)
    if batch:
        yield rank, batch


def convert(lines: BinaryIO, name: str, folder: str, output: str) -> int:
    """Write the records of the JSON Lines stream `lines` (named `name` in messages) as the store
    folder `folder` (created; the output is called `output` in messages); returns the records."""
    store = _Store(folder, output)
    n = 0
    for rank, recs in _ranked(lines, name):
        store.add(rank, recs)
        n += len(recs)
    store.close()
    return n


def _is_store(path: str) -> bool:
    """Whether the folder `path` holds nothing but what convert() writes (so it may be replaced)."""
    for entry in os.scandir(path):
        if entry.is_file(follow_symlinks=False) and entry.name.endswith(SUFFIX):
            continue
        if entry.is_dir(follow_symlinks=False) and entry.name.startswith(PARTITION + "=") and all(
                e.is_file(follow_symlinks=False) and e.name.endswith(SUFFIX) for e in os.scandir(entry.path)):
            continue
        return False
    return True


@contextlib.contextmanager
def storing(output: str) -> Iterator[str]:
    """Yield the path of a temporary JSON Lines file for the records; when the block succeeds, they
    become the store `output` (a folder, which appears only when complete and replaces an earlier
    store or file of that name; another folder there is refused: PyprofError EXIT_OUTPUT). The
    temporary files sit in a hidden folder beside `output` and are removed in any case."""
    schema.require_pyarrow()
    target = os.path.realpath(output)
    if os.path.isdir(target) and not _is_store(target):
        raise cannot_write(output, OSError(errno.EEXIST, "a folder that is no Parquet record store is in the way"))
    try:
        scratch = tempfile.mkdtemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.")
    except OSError as err:
        raise cannot_write(output, err) from None
    try:
        lines = os.path.join(scratch, "records.dict")
        yield lines
        folder = os.path.join(scratch, "store")
        with open(lines, "rb") as stream:
            convert(stream, output, folder, output)
        os.unlink(lines)
        try:
            if os.path.isdir(target):
                os.rename(target, os.path.join(scratch, "old"))
            elif os.path.lexists(target):
                os.unlink(target)
            os.rename(folder, target)
        except OSError as err:
            raise cannot_write(output, err) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
