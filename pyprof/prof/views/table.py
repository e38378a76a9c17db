"""The default view: one row per kernel record, the columns that `-c` names (columns.py), written
as each record is read (space separated, `--csv` or `-w WIDTH` columnated: output.py)."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import TextIO

from ...errors import EXIT_USAGE, PyprofError
from ..analysis import Facts
from ..columns import DEFAULT, Column, select
from ..output import columnated_writer, csv_writer, space_writer

JSON = False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """-c COLUMNS."""
    parser.add_argument("-c", "--columns", default=None, metavar="COLUMNS",
                        help=f"comma-separated column names (default {DEFAULT})")


def check(args: argparse.Namespace, chosen: list[ModuleType]) -> None:
    """-c goes with this view only (the others have a FLAG)."""
    others = [v.FLAG for v in chosen if hasattr(v, "FLAG")]
    if args.columns is not None and others:
        raise PyprofError(f"-c selects per-kernel columns; it does not apply to {' and '.join(others)}", EXIT_USAGE)


def columns(spec: str | None) -> list[Column]:
    """The columns of a -c value (None: the default ones); PyprofError for an unknown name."""
    try:
        return select(spec or DEFAULT)
    except KeyError as err:
        raise PyprofError(f"unknown column {err.args[0]!r} (-h lists them)", EXIT_USAGE) from None


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


class Table:
    """A scan.Sink writing one row per record to `out` as it comes."""

    def __init__(self, out: TextIO, cols: list[Column], width: int | None = None, as_csv: bool = False) -> None:
        headers = [c.header for c in cols]
        if as_csv:
            self.write = csv_writer(out, headers)
        elif width is not None:
            self.write = columnated_writer(out, headers, [c.width for c in cols], width)
        else:
            self.write = space_writer(out, headers)
        self.cells = Cells(cols)
        self.needs_facts = self.cells.needs_facts

    def add(self, rec: dict, facts: Facts) -> None:
        """Write the row of one record."""
        self.write(self.cells(rec, facts))


def sink(args: argparse.Namespace) -> Table:
    """The table the command line asks for, on stdout."""
    return Table(sys.stdout, columns(args.columns), args.width, args.csv)


def write(sink: Table, args: argparse.Namespace) -> None:
    """Nothing left to write: the rows went out as they were read."""
