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
from typing import Any, Dict, Iterator, List, Optional, Union

__all__ = ["records", "rows", "dataframe", "summary"]

_SQLITE = b"SQLite format 3\x00"
NEEDS_PANDAS = "pyprof.dataframe() needs pandas: pip install pandas (or pip install 'pyprof[pandas]')"
# Columns whose values are numbers (the others stay strings); `na` becomes None.
_INTEGER = frozenset(("idx", "seq", "tid", "sub", "device", "stream", "pid", "regs", "smem", "sil", "flops",
                      "bytes", "start"))
_FLOAT = frozenset(("tflops", "gbps", "ai", "peak", "bw"))


def _is_sqlite(path: str) -> bool:
    if path.endswith((".sqlite", ".nsys-rep")):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE
    except OSError:
        return False


def records(path: str, *, memcpy: bool = False, strict: bool = False) -> Iterator[Dict[str, Any]]:
    """Yield the records (docs/records.md) of `path`, one dict per kernel, in launch order.

    path: an nsys SQLite export or .nsys-rep (parsed now; `memcpy` adds memcpy/memset records,
        as `pyprof.parse --memcpy`), or a record file written by `python -m pyprof.parse`.
    strict: for record files, raise PyprofError on a malformed line instead of skipping it
        (skipped lines are reported on stderr).
    """
    if _is_sqlite(path):
        from pyprof.parse import Export, Stats
        from pyprof.parse import records as parse_records
        from pyprof.parse.export import check_export
        from pyprof.parse.nsysrep import sqlite_path

        with sqlite_path(path, True) as db, Export(db) as exp:
            check_export(exp, memcpy)
            with contextlib.closing(parse_records(exp, Stats(), memcpy)) as recs:
                yield from recs
        return
    from pyprof.prof.reader import open_input
    from pyprof.prof.reader import records as read_records
    from pyprof.prof.summary import Summary

    summary = Summary()
    with open_input(path) as stream:
        for _lineno, rec in read_records(stream, summary, strict):
            yield rec
    summary.report()


def _typed(name: str, value: str) -> Any:
    if value == "na":
        return None
    if name in _INTEGER:
        try:
            return int(value)
        except ValueError:
            return value  # "-" (absent) and the like stay as printed
    if name in _FLOAT:
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _columns(columns: Union[str, List[str], None]) -> List[Any]:
    """prof's Column objects for a `columns` argument (default: all); ValueError naming the
    known columns for an unknown one."""
    from pyprof.prof.columns import COLUMNS, select

    if columns is None:
        return list(COLUMNS)
    try:
        return select(columns if isinstance(columns, str) else ",".join(columns))
    except KeyError as err:
        raise ValueError(f"unknown column {err.args[0]!r}; known: {', '.join(c.name for c in COLUMNS)}") from None


def rows(path: str, columns: Union[str, List[str], None] = None, *, memcpy: bool = False,
         typed: bool = True) -> Iterator[Dict[str, Any]]:
    """Yield one dict per record: {column name: value} with the values `python -m pyprof.prof`
    prints (docs/prof.md lists the columns; default: all of them).

    typed: numbers as int/float and `na` as None (default); False keeps prof's strings.
    Records whose fields have the wrong types are skipped and counted on stderr, as in prof.
    """
    from pyprof.prof.analysis import Analyzer, Facts
    from pyprof.prof.scan import FIELD_ERRORS
    from pyprof.prof.summary import Summary

    cols = _columns(columns)
    summary = Summary()
    analyzer = Analyzer(summary) if any(c.needs_facts for c in cols) else None
    blank = Facts()
    idx = 0
    for rec in records(path, memcpy=memcpy):
        summary.records += 1
        try:
            facts = analyzer.facts(rec) if analyzer else blank
            values = [(c.name, c.value(rec, facts, idx)) for c in cols]
        except FIELD_ERRORS as err:
            summary.bad_line(idx + 1, f"record fields not understood ({type(err).__name__}: {err})")
            continue
        yield {n: _typed(n, v) for n, v in values} if typed else dict(values)
        idx += 1
    summary.report()


def dataframe(path: str, columns: Union[str, List[str], None] = None, *, memcpy: bool = False) -> Any:
    """A pandas DataFrame of rows(path, columns): one row per kernel, numeric columns numeric,
    unknown values NaN/None. Raises ImportError naming the install when pandas is missing, and
    ValueError for an unknown column, as rows() does."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(NEEDS_PANDAS) from None
    names = [c.name for c in _columns(columns)]
    return pd.DataFrame.from_records(list(rows(path, columns, memcpy=memcpy)), columns=names)


def summary(path: str, by: str = "op", sort: str = "time", top: Optional[int] = None, *,
            memcpy: bool = False) -> Dict[str, Any]:
    """The `--summary --json` object of `path`: header (span, busy %, gaps, Tensor Core shares),
    rows per group (`by`: op, kernel, layer, module, dir, tc, stream), advice and notes."""
    from pyprof.prof.analysis import Analyzer
    from pyprof.prof.groups import KEYS, SORTS
    from pyprof.prof.summary import Summary
    from pyprof.prof.views import Profile, report

    if by not in KEYS:
        raise ValueError(f"by must be one of {', '.join(KEYS)}")
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    warnings = Summary()
    analyzer = Analyzer(warnings)
    prof = Profile(by)
    for rec in records(path, memcpy=memcpy):
        prof.add(rec, analyzer.facts(rec))
    return report(prof, sort, top)
