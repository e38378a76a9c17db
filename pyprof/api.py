"""pyprof from Python (notebooks): records, analysed rows, a pandas DataFrame, the summary.

    import pyprof
    for rec in pyprof.records("net.sqlite"): ...          # parse's records, one dict per kernel
    rows = list(pyprof.rows("net.dict", columns="op,kernel,sil,tc,flops"))
    df = pyprof.dataframe("net.sqlite")                   # needs pandas
    pyprof.summary("net.sqlite", by="op")["rows"][0]      # the --summary --json object

A path ending in `.sqlite` or `.nsys-rep` (or any file that is an SQLite database) is parsed on
the fly with pyprof.parse; anything else is read as a record file (`python -m pyprof.parse`
output). Nothing here imports torch; pandas only inside dataframe(). Fatal problems raise
pyprof.errors.PyprofError (with the message the command-line tools print).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

__all__ = ["records", "rows", "dataframe", "summary"]

_SQLITE = b"SQLite format 3\x00"
NEEDS_PANDAS = "pyprof.dataframe() needs pandas: pip install pandas (or pip install 'pyprof[pandas]')"


def _is_sqlite(path: str) -> bool:
    if path.endswith((".sqlite", ".nsys-rep")):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE
    except OSError:
        return False


def _numbered(path: str, tally: Any, memcpy: bool, strict: bool) -> Iterator[tuple[int, dict[str, Any]]]:
    """(number, record) pairs of `path`, counted in `tally` (prof's warnings tally): what prof's
    record loop (pyprof.prof.scan) reads. Numbers are line numbers of a record file, record
    numbers of a parsed export."""
    if _is_sqlite(path):
        from pyprof.parse import Export, Stats
        from pyprof.parse import records as parse_records
        from pyprof.parse.export import check_export
        from pyprof.parse.nsysrep import sqlite_path

        with sqlite_path(path, True) as db, Export(db) as exp:
            check_export(exp, memcpy)
            with contextlib.closing(parse_records(exp, Stats(), memcpy)) as recs:
                for n, rec in enumerate(recs, 1):
                    tally.records += 1
                    yield n, rec
        return
    from pyprof.prof.reader import open_input
    from pyprof.prof.reader import records as read_records

    with open_input(path) as stream:
        yield from read_records(stream, tally, strict)


def records(path: str, *, memcpy: bool = False, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the records (docs/records.md) of `path`, one dict per kernel, in launch order.

    path: an nsys SQLite export or .nsys-rep (parsed now; `memcpy` adds memcpy/memset records,
        as `pyprof.parse --memcpy`), or a record file written by `python -m pyprof.parse`.
    strict: for record files, raise PyprofError on a malformed line instead of skipping it
        (skipped lines are reported on stderr).
    """
    from pyprof.prof.warnings_tally import Tally

    tally = Tally()
    for _n, rec in _numbered(path, tally, memcpy, strict):
        yield rec
    tally.report()


def _typed(kind: type, value: str) -> Any:
    """A printed value as `kind` (the column's type); `na` becomes None."""
    if value == "na":
        return None
    if kind is str:
        return value
    try:
        return kind(value)
    except ValueError:
        return value  # "-" (absent) and the like stay as printed


def _columns(columns: str | list[str] | None) -> list[Any]:
    """prof's Column objects for a `columns` argument (default: all); ValueError naming the
    known columns for an unknown one."""
    from pyprof.prof.columns import COLUMNS, select

    if columns is None:
        return list(COLUMNS)
    try:
        return select(columns if isinstance(columns, str) else ",".join(columns))
    except KeyError as err:
        raise ValueError(f"unknown column {err.args[0]!r}; known: {', '.join(c.name for c in COLUMNS)}") from None


def rows(path: str, columns: str | list[str] | None = None, *, memcpy: bool = False,
         typed: bool = True) -> Iterator[dict[str, Any]]:
    """Yield one dict per record: {column name: value} with the values `python -m pyprof.prof`
    prints (docs/prof.md lists the columns; default: all of them).

    typed: numbers as int/float (the column's type) and `na` as None (default); False keeps
    prof's strings. Records whose fields have the wrong types are skipped and counted on stderr,
    as in prof.
    """
    from pyprof.prof.scan import analysed
    from pyprof.prof.views.table import Cells
    from pyprof.prof.warnings_tally import Tally

    cols = _columns(columns)
    names = [c.name for c in cols]
    kinds = [c.type for c in cols]
    cells = Cells(cols)
    tally = Tally()
    for _rec, _facts, values in analysed(_numbered(path, tally, memcpy, False), tally, False, cells.needs_facts,
                                         cells):
        yield dict(zip(names, map(_typed, kinds, values) if typed else values))
    tally.report()


def dataframe(path: str, columns: str | list[str] | None = None, *, memcpy: bool = False) -> Any:
    """A pandas DataFrame of rows(path, columns): one row per kernel, numeric columns numeric,
    unknown values NaN/None. Raises ImportError naming the install when pandas is missing, and
    ValueError for an unknown column, as rows() does."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(NEEDS_PANDAS) from None
    names = [c.name for c in _columns(columns)]
    return pd.DataFrame.from_records(list(rows(path, columns, memcpy=memcpy)), columns=names)


def summary(path: str, by: str = "op", sort: str = "time", top: int | None = None, *,
            memcpy: bool = False) -> dict[str, Any]:
    """The `--summary --json` object of `path`: header (span, busy %, gaps, Tensor Core shares),
    rows per group (`by`: op, kernel, layer, module, dir, tc, stream), advice and notes.
    Records skipped and warnings are reported on stderr, as in prof."""
    from pyprof.prof.groups import KEYS, SORTS
    from pyprof.prof.views.summary import collect, report
    from pyprof.prof.warnings_tally import Tally

    if by not in KEYS:
        raise ValueError(f"by must be one of {', '.join(KEYS)}")
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    tally = Tally()
    prof = collect(_numbered(path, tally, memcpy, False), tally, by)
    tally.report()
    return report(prof, sort, top)
