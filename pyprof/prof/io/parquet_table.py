"""`--parquet FILE`: the per-kernel table as a Parquet file (pyarrow, optional), typed columns
keyed by column name (int64, float64, bool, string; null for `na` and `-`), as --json and
pyprof.rows give them. Rows are written in row groups as they come: memory stays flat."""
from __future__ import annotations

import contextlib
from typing import IO, Any, Iterator

from ...errors import cannot_write
from ...store import schema
from ..columns import Column, typed

NEEDS = "--parquet needs pyarrow: pip install pyarrow (or pip install 'pyprof-nvtx[parquet]')"
ROW_GROUP = 65536  # rows held before a row group is written


def require_pyarrow() -> Any:
    """pyarrow, or PyprofError naming the install (EXIT_TOOL, as --plot without matplotlib)."""
    return schema.require_pyarrow(NEEDS)


def _storable(name: str, kind: type, v: Any) -> Any:
    """`v` as Parquet can hold it: text the way stdout shows it (a lone surrogate from a JSON
    escape is no UTF-8: written `\\udcff`, as run_cli's stdout writes it); ValueError for an
    integer beyond int64."""
    if kind is str and v is not None and not v.isascii():
        try:
            v.encode()
        except UnicodeEncodeError:
            return v.encode("utf-8", "backslashreplace").decode()
    elif kind is int and v is not None and not -2**63 <= v < 2**63:
        raise ValueError(f"{name} is outside the signed 64-bit range of Parquet's int64")
    return v


class ParquetWriter:
    """Typed rows of `cols` into `out`, the binary file of the Parquet output `path` (named in
    messages; written in full by close())."""

    def __init__(self, out: IO[bytes], path: str, cols: list[Column]) -> None:
        pa = require_pyarrow()
        self._pa = pa
        self._cols = cols
        self._kinds = [c.type for c in cols]
        self._schema = pa.schema([(c.name, schema.arrow_type(c.type)) for c in cols])
        self._columns: list[list] = [[] for _ in cols]
        self._path = path
        with self._writing():
            self._writer = pa.parquet.ParquetWriter(out, self._schema)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        # Opening, a row group or the footer: a missing folder or a full disk is the output's error.
        try:
            yield
        except OSError as err:
            raise cannot_write(self._path, err) from None

    def write(self, values: list[str]) -> None:
        """Add one row (prof's printed cells). ValueError, before anything is added, for an
        integer Parquet's int64 cannot hold: the record is skipped and counted (scan.Sink)."""
        row = [_storable(c.name, kind, typed(kind, v)) for c, kind, v in zip(self._cols, self._kinds, values)]
        for column, v in zip(self._columns, row):
            column.append(v)
        if len(self._columns[0]) >= ROW_GROUP:
            self._flush()

    def abort(self) -> None:
        """Stop writing after a failure (the file is removed): pyarrow's writer is closed now, not
        when it is collected, after its file was closed ("Exception ignored ... closed file")."""
        with contextlib.suppress(Exception):
            self._writer.close()

    def _flush(self) -> None:
        if self._columns[0]:
            with self._writing():
                self._writer.write_table(self._pa.Table.from_arrays(
                    [self._pa.array(col, type=f.type) for col, f in zip(self._columns, self._schema)],
                    schema=self._schema))
            for col in self._columns:
                col.clear()

    def close(self) -> None:
        """Write what is held and finish the file."""
        self._flush()
        with self._writing():
            self._writer.close()
