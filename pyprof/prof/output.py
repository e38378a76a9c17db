"""The three output forms: space separated (default, for awk and sort), --csv, and -w WIDTH
columnated. Each writes one row per record as it comes: nothing is held back.

Columnated text is laid out here, not by a table library (rich and the like): rows stream out as
records are read, a million of them at a flat memory, and widths are decided once, before the
first row, from the column table rather than from the data.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from typing import Callable, Iterable, Sequence, TextIO

from ..errors import EXIT_USAGE, PyprofError

_SPACE = re.compile(r"\s+")


def space_writer(out: TextIO, headers: list[str]) -> Callable[[list[str]], None]:
    """Fields separated by one space; whitespace inside a field becomes `_` so awk columns hold."""
    write = out.write
    write(" ".join(headers) + "\n")

    gaps = len(headers) - 1

    def row(values: list[str]) -> None:
        line = " ".join(values)
        if line.count(" ") != gaps or "\n" in line or "\t" in line:  # rare: whitespace inside a field
            line = " ".join([_SPACE.sub("_", v) for v in values])
        write(line + "\n")
    return row


def csv_writer(out: TextIO, headers: list[str]) -> Callable[[list[str]], None]:
    """RFC 4180 CSV through the csv module (quotes commas and quotes inside fields)."""
    w = csv.writer(out, lineterminator="\n")
    w.writerow(headers)
    return w.writerow


def json_lines_writer(out: TextIO, names: list[str], kinds: list[type]) -> Callable[[list[str]], None]:
    """One JSON object per row, {name: typed value} (columns.typed: null for na and -)."""
    from .columns import typed

    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    write = out.write

    def row(values: list[str]) -> None:
        write(dumps(dict(zip(names, map(typed, kinds, values)))) + "\n")
    return row


def csv_cell(v: object) -> object:
    """A --summary/--diff CSV cell: empty for unknown (pandas reads the column as numbers),
    floats to 4 significant digits."""
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else v)


# An elastic column (free text: op, kernel, params, ...) is never cut below this many characters.
MIN_ELASTIC = 8


def terminal_width(out: TextIO = sys.stdout) -> int | None:
    """The width of the terminal `out` writes to; None when it is not a terminal (a pipe, a file)."""
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


def text_width(asked: int | None, widths: Sequence[int], names: Iterable[str] = ()) -> int:
    """The line width of a view's text table, whose one elastic column is its first, holding
    `names` (group or module names, all known before the first row is written): -w as `asked`;
    else the terminal's width, never less than the columns' starting `widths` need; else (a pipe,
    a file: no width to fit) as wide as the longest name needs, so that none is cut."""
    need = sum(widths) + len(widths) - 1
    if asked is not None:
        return asked
    term = terminal_width()
    if term is None:
        return need + max(0, max(map(len, names), default=0) - widths[0])
    return max(term, need)


def layout(widths: Sequence[int], elastic: Sequence[bool], total: int) -> list[int]:
    """The width of each column in a line of `total` characters (one space between columns).

    Fixed columns keep `widths`; elastic ones start from theirs (at least MIN_ELASTIC) and share
    what is left over in proportion to them, or, when `total` is smaller, shrink in proportion
    to what they have above MIN_ELASTIC. PyprofError (usage) when `total` cannot hold the fixed
    columns and the elastic ones at MIN_ELASTIC."""
    need = sum(MIN_ELASTIC if e else w for w, e in zip(widths, elastic)) + len(widths) - 1
    if total < need:
        raise PyprofError(f"-w {total} is narrower than these columns need: at least {need}", EXIT_USAGE)
    flex = [i for i, e in enumerate(elastic) if e]
    if not flex:
        return list(widths)
    room = total - (sum(w for w, e in zip(widths, elastic) if not e) + len(widths) - 1)
    start = {i: max(widths[i], MIN_ELASTIC) for i in flex}
    full = sum(start.values())
    out = list(widths)
    for i in flex:
        if room >= full:
            out[i] = start[i] + (room - full) * start[i] // full
        else:
            above = full - MIN_ELASTIC * len(flex)
            out[i] = MIN_ELASTIC + ((room - MIN_ELASTIC * len(flex)) * (start[i] - MIN_ELASTIC) // above
                                    if above else 0)
    out[flex[0]] += room - sum(out[i] for i in flex)  # what rounding left over
    return out


def ellipsis_for(out: TextIO) -> str:
    """The mark of a cut value: `…` where the output can encode it, else `~`."""
    encoding = getattr(out, "encoding", None)
    try:
        if encoding:  # None: a text buffer (StringIO), which holds any character
            "\u2026".encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return "~"
    return "\u2026"


def fit(value: str, width: int, mark: str = "\u2026") -> str:
    """`value` cut to `width` characters, its last one replaced by `mark` when cut."""
    return value if len(value) <= width else value[:width - 1] + mark


def columnated_writer(out: TextIO, headers: list[str], widths: list[int], total: int,
                      elastic: Sequence[bool] | None = None) -> Callable[[list[str]], None]:
    """Columns laid out by layout() for a `total`-character line (elastic: default, the columns
    of width 0); a longer value is cut with an ellipsis. One pass."""
    if elastic is None:
        elastic = [w == 0 for w in widths]
    widths = layout(widths, elastic, total)
    last = len(widths) - 1
    mark = ellipsis_for(out)
    write = out.write

    def row(values: list[str]) -> None:
        cells = []
        for i, (v, w) in enumerate(zip(values, widths)):
            v = fit(v, w, mark)
            cells.append(v if i == last else v.ljust(w))
        write(" ".join(cells) + "\n")
    row(headers)
    return row
