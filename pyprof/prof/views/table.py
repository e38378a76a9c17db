"""The default view: one row per kernel record, the columns that `-c` names (columns.py), written
as each record is read. Forms (io/output.py): space separated when stdout is a pipe or a file (for
awk and sort), columnated to the terminal's width on a terminal or to `-w WIDTH`, `--csv`,
`--json` (one object per line) and `--parquet FILE` (io/parquet_table.py). The machine-read forms are
keyed by column name and typed (columns.typed): `na` and `-` are empty in CSV, null in JSON."""
from __future__ import annotations

import argparse
import contextlib
import sys
from types import ModuleType
from typing import Any, Callable, TextIO

from ...errors import EXIT_USAGE, PyprofError
from ...parse.output import open_output
from ..pricing.analysis import Facts
from ..columns import ABSENT, DEFAULT, NA, Column, select
from ..io.output import (TextColumn, check_width, columnated_writer, csv_writer, json_lines_writer, narrowest,
                      space_writer, terminal_width)

JSON = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """-c COLUMNS, --parquet FILE."""
    parser.add_argument("-c", "--columns", default=None, metavar="COLUMNS",
                        help=f"comma-separated column names (default {DEFAULT})")
    parser.add_argument("--parquet", metavar="FILE",
                        help="write the per-kernel table to FILE as Parquet, typed columns keyed by name "
                             "(needs pyarrow: pip install 'pyprof-nvtx[parquet]')")


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """-c and --parquet go with this view only (the others have a FLAG); -w holds the columns."""
    others = [v.FLAG for v in chosen if hasattr(v, "FLAG")]
    if args.columns is not None and others:
        raise PyprofError(f"-c selects per-kernel columns; it does not apply to {' and '.join(others)}", EXIT_USAGE)
    if args.parquet is not None:
        if others:
            raise PyprofError(f"--parquet writes the per-kernel table; it does not apply to {' and '.join(others)}",
                              EXIT_USAGE)
        if args.width is not None or args.csv or args.json:
            raise PyprofError("--parquet is an output form of its own: no -w, --csv or --json with it", EXIT_USAGE)
        from ..io.parquet_table import require_pyarrow
        require_pyarrow()
    if not others and args.width is not None:
        check_width(text_columns(args.columns), args.width)


def columns(spec: str | None) -> list[Column]:
    """The columns of a -c value (None: the default ones); PyprofError for an unknown name."""
    try:
        return select(spec or DEFAULT)
    except KeyError as err:
        raise PyprofError(f"unknown column {err.args[0]!r} (-h lists them)", EXIT_USAGE) from None


# The default columns a narrow line leaves out, first to go first (-c: every column named is shown).
LEFT_OUT_FIRST = ["sub", "mod", "dir", "idx", "params"]


def text_columns(spec: str | None) -> list[TextColumn]:
    """The columnated layout of a -c value: the default columns with their priorities (a narrow
    line leaves out LEFT_OUT_FIRST's in order), named ones all kept."""
    return [TextColumn(c.header, c.width, c.elastic,
                       None if spec or c.name not in LEFT_OUT_FIRST else LEFT_OUT_FIRST.index(c.name), c.middle)
            for c in columns(spec)]


class Cells:
    """The cells of one record for `cols`, as prof prints them; `idx` counts the rows made."""

    def __init__(self, cols: list[Column]) -> None:
        self.values = [c.value for c in cols]
        self.needs_facts = any(c.needs_facts for c in cols)
        self.idx = 0

    def __call__(self, rec: dict, facts: Facts) -> list[str]:
        cells = [v(rec, facts, self.idx) for v in self.values]
        self.idx += 1
        return cells


def _csv_cells(write: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
    """CSV rows with `na` and `-` as empty cells: pandas and spreadsheets read numbers as numbers."""
    def row(values: list[str]) -> None:
        write(["" if v == NA or v == ABSENT else v for v in values])
    return row


class Table:
    """A scan.Sink writing one row per record to `out` as it comes (a file of its own for
    `parquet`). `width`: columnated to that width; None: space separated. The header is written
    with the first row or by close(): an input that turns out not to be records leaves stdout
    empty. The Parquet file is written to a temporary file, renamed by close(); a context manager,
    so that a failed run removes it."""

    def __init__(self, out: TextIO, cols: list[Column], width: int | None = None, as_csv: bool = False,
                 as_json: bool = False, parquet: str | None = None, text: list[TextColumn] | None = None) -> None:
        self._form = (out, cols, width, as_csv, as_json, parquet, text)
        self._finish: Callable[[], None] = lambda: None
        self._files = contextlib.ExitStack()
        self.write = self._first_row
        self.cells = Cells(cols)
        self.needs_facts = self.cells.needs_facts

    def _begin(self) -> Callable[[list[str]], None]:
        out, cols, width, as_csv, as_json, parquet, text = self._form
        names = [c.name for c in cols]
        if parquet is not None:
            from ..io.parquet_table import ParquetWriter
            writer = ParquetWriter(self._files.enter_context(open_output(parquet, binary=True)), parquet, cols)
            self._files.callback(writer.abort)  # before the file is closed and removed
            self._finish = writer.close
            return writer.write
        if as_json:
            return json_lines_writer(out, names, [c.type for c in cols])
        if as_csv:
            return _csv_cells(csv_writer(out, names))
        if width is not None:
            return columnated_writer(out, text or [TextColumn(c.header, c.width, c.elastic, None, c.middle)
                                                   for c in cols], width)
        return space_writer(out, [c.header for c in cols])

    def _first_row(self, values: list[str]) -> None:
        self.write = self._begin()
        self.write(values)

    def close(self) -> None:
        """Finish the output (an input without records: the header alone, an empty Parquet file)."""
        if self.write == self._first_row:
            self.write = self._begin()
        self._finish()
        self._files.close()

    def __enter__(self) -> "Table":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._files.__exit__(*exc)  # a run that failed: the Parquet file's temporary file removed

    def add(self, rec: dict, facts: Facts) -> None:
        """Write the row of one record."""
        self.write(self.cells(rec, facts))

    def skip(self) -> None:
        """A record left out by a filter: no row, but it keeps its place in idx."""
        self.cells.idx += 1


def sink(args: argparse.Namespace) -> Table:
    """The table the command line asks for, on stdout: columnated to the terminal when stdout is
    one and no other form is asked for."""
    cols = columns(args.columns)
    text = text_columns(args.columns)
    width = args.width
    if width is None and not (args.csv or args.json or args.parquet):
        term = terminal_width()
        if term is not None:  # a terminal too narrow even for what is never left out wraps, no error
            width = max(term, narrowest(text))
    return Table(sys.stdout, cols, width, args.csv, args.json, args.parquet, text)


def write(sink: Table, args: argparse.Namespace) -> None:
    """The rows went out as they were read; a Parquet file is completed."""
    sink.close()
