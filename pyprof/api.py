"""pyprof from Python (notebooks): records, analysed rows, a pandas DataFrame, and every view of
prof as data: the same object its --json writes.

    import pyprof
    for rec in pyprof.records("net.sqlite"): ...          # parse's records, one dict per kernel
    rows = list(pyprof.rows("net.dict", columns="op,kernel,sil,tc,flops"))
    df = pyprof.dataframe("net.sqlite")                   # needs pandas
    t = pyprof.table("net.parquet", ["op", "kDuration"])  # record fields as a pyarrow Table
    pyprof.summary("net.sqlite", by="op")["rows"][0]      # the --summary --json object
    pyprof.summary("net.dict", by="call")["rows"]         # one row per op call: its honest rate
    pyprof.modules("net.dict")["rows"]                    # --modules
    pyprof.diff("base.dict", "new.dict", by="op")         # --diff
    pyprof.overlap("ranks.dict"); pyprof.stragglers("ranks.dict")
    pyprof.roofline("net.dict")["points"]                 # --plot's points and roofs
    pyprof.report("net.dict", html="report.html")         # --html: the page, and its data
    pyprof.trace("net.dict", "net.json.gz")               # --trace: for ui.perfetto.dev

A path ending in `.sqlite` or `.nsys-rep` (or any file that is an SQLite database) is parsed on
the fly with pyprof.parse; anything else is read as a record file (`python -m pyprof.parse`
output). Nothing here imports torch; pandas only inside dataframe(). Fatal problems raise
pyprof.errors.PyprofError (with the message the command-line tools print).
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Iterator

__all__ = ["records", "rows", "dataframe", "table", "summary", "modules", "diff", "overlap", "stragglers", "roofline",
           "report", "trace", "ProfWarning"]

NEEDS_PANDAS = "pyprof.dataframe() needs pandas: pip install pandas (or pip install 'pyprof-nvtx[pandas]')"


class ProfWarning(UserWarning):
    """What prof could not work out in a file (lines skipped, values `na` and why), raised
    through the `warnings` module once per call: Python shows a given message once per place
    it comes from, and `warnings.simplefilter("ignore", pyprof.ProfWarning)` silences it."""


def _tally() -> Any:
    from pyprof.prof.warnings_tally import Tally

    return Tally()


def _warn(path: Any, tally: Any, stacklevel: int) -> None:
    """The tally of `path`, if it holds anything, as one ProfWarning."""
    text = ""
    for line in tally.lines():  # the CLI's block on one line: "N records; warnings: kind: ...; kind: ..."
        text += (" " if text.endswith(":") else "; " if text else "") + line.strip()
    if text:
        warnings.warn(f"{os.fspath(path)}: {text}", ProfWarning, stacklevel=stacklevel + 1)


def records(path: str | os.PathLike, *, memcpy: bool = False, strict: bool = False) -> Iterator[dict[str, Any]]:
    """Yield the records (docs/records.md) of `path`, one dict per kernel, in launch order.

    path: an nsys SQLite export or .nsys-rep (parsed now; `memcpy` adds memcpy/memset records,
        as `pyprof.parse --memcpy`), or a record file written by `python -m pyprof.parse`.
    strict: for record files, raise PyprofError on a malformed line instead of skipping it
        (skipped lines are reported as one ProfWarning at the end).
    """
    from pyprof.prof.io.reader import numbered

    tally = _tally()
    for _n, rec in numbered(path, tally, strict, memcpy, fresh=True):
        yield rec
    _warn(path, tally, 2)


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


def _rows(path: str | os.PathLike, cols: list[Any], memcpy: bool, typed: bool, tally: Any) -> Iterator[dict]:
    from pyprof.prof.columns import typed as as_type
    from pyprof.prof.io.reader import numbered
    from pyprof.prof.scan import analysed
    from pyprof.prof.views.table import Cells

    names = [c.name for c in cols]
    kinds = [c.type for c in cols]
    cells = Cells(cols)
    for _rec, _facts, values in analysed(numbered(path, tally, False, memcpy), tally, False, cells.needs_facts,
                                         cells):
        yield dict(zip(names, map(as_type, kinds, values) if typed else values))


def rows(path: str | os.PathLike, columns: str | list[str] | None = None, *, memcpy: bool = False,
         typed: bool = True) -> Iterator[dict[str, Any]]:
    """Yield one dict per record: {column name: value} with the values `python -m pyprof.prof`
    prints (docs/prof.md lists the columns; default: all of them).

    typed: each value as its column's type, as --json and --parquet write them (int, float,
    tc as True/False, text) with None for `na` and `-` (default); False keeps prof's strings.
    Records whose fields have the wrong types are skipped; what was skipped or is `na` and why
    comes as one ProfWarning at the end.
    """
    tally = _tally()
    yield from _rows(path, _columns(columns), memcpy, typed, tally)
    _warn(path, tally, 2)


def table(path: str | os.PathLike, fields: list[str] | None = None, where: Any = None) -> Any:
    """The records of `path` as a pyarrow Table of record fields (docs/records.md, "Parquet"):
    `fields` (default: all; `rank` too where the records have it), `where` a filter such as
    `pyarrow.dataset.field("op") == "linear"`. On a Parquet record store (`python -m pyprof.parse
    -o net.parquet`) only those columns are read, the filter is applied by the Parquet reader
    and no record becomes a Python object; a JSON Lines file is converted in memory first.
    Raises PyprofError (pyarrow missing: status 8; a damaged store) and ValueError (unknown field)."""
    from pyprof.store.read import table as read_table

    return read_table(os.fspath(path), fields, where)


def dataframe(path: str | os.PathLike, columns: str | list[str] | None = None, *, memcpy: bool = False,
              fields: list[str] | None = None, where: Any = None) -> Any:
    """A pandas DataFrame of rows(path, columns): one row per kernel; integer and float columns
    numeric (float with NaN where a value is unknown), `tc` boolean (pandas' nullable dtype,
    <NA> where not applicable), text columns with None for `na` and `-`. The warnings tally is
    in `df.attrs["warnings"]` ({kind: {name: kernels}}, and "malformed lines") and comes as one
    ProfWarning. Raises ImportError naming the install when pandas is missing, and ValueError
    for an unknown column, as rows() does.

    `fields` or `where` instead of `columns`: the record fields themselves, table(path, fields,
    where).to_pandas(): on a Parquet store no record is made a Python dict (10M kernels fit)."""
    try:
        import pandas as pd
    except ImportError:
        raise ImportError(NEEDS_PANDAS) from None
    if fields is not None or where is not None:
        if columns is not None or memcpy:
            raise ValueError("dataframe(): columns and memcpy are prof's analysed columns; fields and where "
                             "are record fields: give one or the other")
        return table(path, fields, where).to_pandas()
    cols = _columns(columns)
    tally = _tally()
    df = pd.DataFrame.from_records(list(_rows(path, cols, memcpy, True, tally)), columns=[c.name for c in cols])
    for c in cols:
        if c.type is bool:
            df[c.name] = df[c.name].astype("boolean")
        elif c.type in (int, float) and df[c.name].dtype == object:  # no rows, or every value None
            df[c.name] = df[c.name].astype("float64")
    df.attrs["warnings"] = tally.as_dict()
    _warn(path, tally, 2)
    return df


def _scan(path: str | os.PathLike, sinks: list[Any], memcpy: bool, stacklevel: int = 3) -> None:
    """One pass over the records of `path` into `sinks` (scan.Sink); the tally as one ProfWarning."""
    from pyprof.prof.io.reader import numbered
    from pyprof.prof.scan import feed

    tally = _tally()
    feed(numbered(path, tally, False, memcpy), tally, sinks)
    _warn(path, tally, stacklevel)


def summary(path: str | os.PathLike, by: str = "op", sort: str = "time", top: int | None = None, *,
            memcpy: bool = False) -> dict[str, Any]:
    """The `--summary --json` object of `path`: header (span, busy %, gaps, Tensor Core shares),
    rows per group (`by`: op, kernel, shape, layer, module, dir, tc, level, stream, rank, coll,
    call, or several joined by commas, e.g. "op,shape"; "call": one row per op call, with its
    dir, op, module and shape: its kernels' summed time, FLOPs, bytes and rates), advice and
    notes.
    Records skipped and warnings come as one ProfWarning, as in rows()."""
    from pyprof.prof.groups import SORTS, by_keys
    from pyprof.prof.views.summary import Profile, report

    by = ",".join(by_keys(by))  # ValueError naming the keys
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    prof = Profile(by)
    _scan(path, [prof], memcpy)
    return report(prof, sort, top)


def modules(path: str | os.PathLike, *, memcpy: bool = False) -> dict[str, Any]:
    """The `--modules --json` object of `path`: {"rows": [...]}, one row per nn.Module path,
    parents before children (module, depth, self_ns, total_ns, pct_total, self_count, count)."""
    from pyprof.prof.views.modules import Tree, report

    tree = Tree()
    _scan(path, [tree], memcpy)
    return report(tree)


def diff(base: str | os.PathLike, new: str | os.PathLike, by: str = "op", top: int | None = None) -> dict[str, Any]:
    """The `--diff --json` object of two runs: per group (`by`, as in summary()) the time
    before and after, sorted by absolute change (`top`: the first N rows), and the totals."""
    from pyprof.prof.groups import by_keys
    from pyprof.prof.views.diff import Totals, compare

    by = ",".join(by_keys(by))
    sides = [Totals(by), Totals(by)]
    for path, side in zip((base, new), sides):
        _scan(path, [side], False)
    d = compare(*sides)
    return dict(d, rows=d["rows"][:top]) if top else d


def overlap(path: str | os.PathLike) -> dict[str, Any]:
    """The `--overlap --json` object of `path` (records of one or several ranks): per rank and
    step compute, communication, both and exposed time; per rank and collective kind the
    exposed time (docs/prof.md, "Overlap")."""
    from pyprof.prof.comms.passes import Comms
    from pyprof.prof.views.overlap import report

    comms = Comms()
    _scan(path, [comms], False)
    return report(comms)


def stragglers(path: str | os.PathLike) -> dict[str, Any]:
    """The `--stragglers --json` object of `path`: every collective instance across the ranks
    (arrivals, skew, slowest rank, bus bandwidth), in time order, and per rank its waits."""
    from pyprof.prof.comms.passes import Comms
    from pyprof.prof.views.stragglers import report

    comms = Comms()
    _scan(path, [comms], False)
    return report(comms)


def roofline(path: str | os.PathLike, *, memcpy: bool = False) -> dict[str, Any]:
    """What `--plot` draws, as data: the GPU's roofs (memory GB/s, compute TFLOP/s per math
    path) and one point per kernel with known, non-trivial FLOPs and bytes (ai FLOP/B, tflops,
    dur ns, tc, op, kernel, over, module, shapes, flops, bytes, pct_peak); `skipped` and
    `trivial` count the kernels left out."""
    from pyprof.prof.views.roofline import Points, report

    pts = Points()
    _scan(path, [pts], memcpy)
    return report(pts)


def report(path: str | os.PathLike, html: str | os.PathLike | None = None, *, compare: str | os.PathLike | None = None,
           memcpy: bool = False) -> dict[str, Any]:
    """What `--html` shows, as data (docs/views.md, "--html"): answers (costliest module, calls
    furthest below their roof, idle gaps), summary, tables, modules, roofline, timeline, gaps,
    overlap, and with `compare` (a base run) the diff by op, module and kernel. `html`: also
    write the page there (needs plotly; PyprofError naming the install when it is missing)."""
    from pyprof.prof.report.data import Collector, base_sinks
    from pyprof.prof.report.data import report as data

    collector = Collector()
    _scan(path, [collector], memcpy)
    base = None
    if compare is not None:
        base = base_sinks()
        _scan(compare, list(base.values()), memcpy)
    if html is None:
        return data(collector, base)
    from pyprof.prof.report.html import require_plotly
    from pyprof.prof.views.html import write_page

    require_plotly()
    title = os.path.basename(os.fspath(path)) + (f" compared with {os.path.basename(os.fspath(compare))}"
                                                 if compare is not None else "")
    return write_page(collector, os.fspath(html), title, base)


def trace(path: str | os.PathLike, out: str | os.PathLike, *, memcpy: bool = False) -> list[str]:
    """Write the timeline of `path` for Perfetto and chrome://tracing to `out` (`--trace`;
    gzip-compressed when it ends in .gz); returns the files written (several when it is split)."""
    from pyprof.prof.report.trace import TraceWriter, remove_stale_parts

    writer = TraceWriter(os.fspath(out))
    _scan(path, [writer], memcpy)
    paths = writer.close()
    remove_stale_parts(os.fspath(out), len(paths))
    return paths
