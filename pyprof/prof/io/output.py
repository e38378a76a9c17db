"""The three output forms: space separated (default, for awk and sort), --csv, and -w WIDTH
columnated. Each writes one row per record as it comes: nothing is held back.

Columnated text is laid out here, not by a table library (rich and the like): rows stream out as
records are read, a million of them at a flat memory, and widths are decided once, before the
first row, from the column table rather than from the data.
"""
from __future__ import annotations

import csv
import json
import math
import re
import shutil
import sys
import textwrap
from typing import Any, Callable, Iterable, NamedTuple, Sequence, TextIO

from ...errors import EXIT_USAGE, PyprofError

# \s: spaces, tabs and every character str.splitlines() breaks a line at (\r, \x1c, \x85, \u2028, ...).
_SPACE = re.compile(r"\s+")


def finite(value: Any) -> Any:
    """`value` with NaN and infinities as None (JSON has neither; a record may carry them), dict
    keys as strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write_json(value: Any, out: TextIO) -> None:
    """A view's --json object, strict JSON (a NaN a record carried, a device say, is null)."""
    json.dump(finite(value), out, indent=1, allow_nan=False)
    out.write("\n")


def flat(value: str, fill: str = " ") -> str:
    """`value` on one line: every run of whitespace (line breaks included) made one `fill`.
    Names come from traces, and a kernel name holding a line break must not split a row."""
    return value if value.isprintable() else _SPACE.sub(fill, value)


def space_writer(out: TextIO, headers: list[str]) -> Callable[[list[str]], None]:
    """Fields separated by one space; whitespace inside a field becomes `_` so awk columns hold."""
    write = out.write
    write(" ".join(headers) + "\n")

    gaps = len(headers) - 1

    def row(values: list[str]) -> None:
        line = " ".join(values)
        if line.count(" ") != gaps or not line.isprintable():  # rare: whitespace inside a field
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
    from ..columns import typed

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


def terminal_width(out: TextIO | None = None) -> int | None:
    """The width of the terminal `out` (default: sys.stdout, -o's file under -o) writes to; None
    when it is not a terminal (a pipe, a file)."""
    if out is None:
        out = sys.stdout
    try:
        if not out.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


class TextColumn(NamedTuple):
    """One column of a columnated text table."""
    header: str
    width: int                   # a fixed column's width; an elastic one's starting width
    elastic: bool = False        # free text: widens with the line, cut (with an ellipsis) to fit a narrower one
    priority: int | None = None  # lowest is left out first where the line is too narrow; None: always shown
    middle: bool = False         # cut in the middle: names whose end tells them apart (kernels, modules, files)
    floor: int = 0               # elastic: the narrowest it gets before others are left out (0: half its width)


def text_width(asked: int | None, cols: Sequence[TextColumn], names: Iterable[str] = ()) -> int:
    """The line width of a view's text table, whose one elastic column is its first, holding
    `names` (group or module names, all known before the first row is written): -w as `asked`;
    else the terminal's width (fitted() leaves out what does not fit); else (a pipe, a file: no
    width to fit) as wide as the longest name needs, so that none is cut."""
    if asked is not None:
        return asked
    term = terminal_width()
    if term is not None:  # a terminal too narrow even for what is never left out wraps, no error
        return max(term, narrowest(cols))
    return sum(c.width for c in cols) + len(cols) - 1 + max(0, max(map(len, names), default=0) - cols[0].width)


def wrapped(lines: Iterable[str], width: int | None, indent: int = 2) -> list[str]:
    """Prose lines (a view's header, advice) broken to `width` characters, each continuation
    indented by `indent` spaces; as they are where there is no width to fit (a pipe, a file)."""
    if width is None:
        return list(lines)
    out: list[str] = []
    for line in lines:
        out += textwrap.wrap(line, width, subsequent_indent=" " * indent, break_on_hyphens=False) or [""]
    return out


def floor_width(c: TextColumn) -> int:
    """The narrowest `c` is given before columns of lower priority are left out for it: a fixed
    column's width; an elastic one's floor, by default half its starting width, at least MIN_ELASTIC."""
    return max(MIN_ELASTIC, c.floor or c.width // 2) if c.elastic else c.width


def fitted(cols: Sequence[TextColumn], total: int) -> list[int]:
    """The indices of the columns a `total`-character line shows. While the columns cannot each
    have their floor_width(), the one of lowest priority is left out (of equal ones the
    rightmost); a priority of None is never left out. layout() then shares the line among the
    columns kept."""
    kept = list(range(len(cols)))

    def need(ix: list[int]) -> int:
        return sum(floor_width(cols[i]) for i in ix) + len(ix) - 1

    while need(kept) > total:
        droppable = [i for i in kept if cols[i].priority is not None]
        if not droppable:
            break
        kept.remove(min(droppable, key=lambda i: (cols[i].priority, -i)))
    return kept


def narrowest(cols: Sequence[TextColumn]) -> int:
    """The narrowest line that holds `cols`: those never left out, elastic ones at MIN_ELASTIC."""
    kept = [c for c in cols if c.priority is None]
    return sum(MIN_ELASTIC if c.elastic else c.width for c in kept) + len(kept) - 1


def check_width(cols: Sequence[TextColumn], total: int) -> None:
    """PyprofError (usage) when not even the columns fitted() keeps fit a `total`-wide line."""
    kept = [cols[i] for i in fitted(cols, total)]
    layout([c.width for c in kept], [c.elastic for c in kept], total)


def left_out_note(cols: Sequence[TextColumn], kept: Sequence[int], total: int) -> None:
    """Say on stderr which columns a `total`-wide table left out, and the -w that shows them all
    (broken to `total` too: the note must not wrap where the table does not)."""
    gone = [c.header for i, c in enumerate(cols) if i not in kept]
    if gone:
        full = sum(map(floor_width, cols)) + len(cols) - 1
        note = f"pyprof.prof: to fit {total} characters, left out {', '.join(gone)}; -w {full} shows all"
        print("\n".join(wrapped([note], max(total, 40))), file=sys.stderr)


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


def fit(value: str, width: int, mark: str = "\u2026", middle: bool = False) -> str:
    """`value` cut to `width` characters, the cut marked by `mark`: its end replaced, or with
    `middle`, its middle (the end of a kernel, module or file name is what tells it apart)."""
    if len(value) <= width:
        return value
    if not middle or width < 3:
        return value[:width - 1] + mark
    head = (width - 1) // 2
    return value[:head] + mark + value[len(value) - (width - 1 - head):]


def distinct(names: Iterable[str], width: int, mark: str = "\u2026", middle: bool = True) -> dict[str, str]:
    """Each of `names` (the values of a name column, all known before the first row) cut to
    `width` so that different names stay different: cut as fit() cuts, and where two cuts meet,
    the kept tail moved to where the name first differs from its nearest neighbours in sort
    order; a cut that still meets another ends in a number."""
    names = sorted(set(names))
    cut = {n: fit(n, width, mark, middle) for n in names}
    seen: dict[str, int] = {}
    for v in cut.values():
        seen[v] = seen.get(v, 0) + 1
    clash = [n for n in names if seen[cut[n]] > 1]
    if not clash:
        return cut

    def common(a: str, b: str) -> int:
        i = 0
        while i < min(len(a), len(b)) and a[i] == b[i]:
            i += 1
        return i
    for k, n in enumerate(names):
        if seen[cut[n]] < 2 or len(n) <= width:
            continue
        differs = max(common(n, names[k - 1]) if k else 0, common(n, names[k + 1]) if k + 1 < len(names) else 0)
        head = min(differs, max(1, (width - 1) // 3))
        tail = width - 1 - head
        start = max(head, min(differs - 1, len(n) - tail))  # one character of context before the difference
        cut[n] = n[:head] + mark + n[start:start + tail]
    taken: dict[str, int] = {}
    for n in names:
        v = cut[n]
        taken[v] = taken.get(v, 0) + 1
        if taken[v] > 1:
            suffix = f"~{taken[v]}"
            cut[n] = v[:width - len(suffix)] + suffix
    return cut


def columnated_writer(out: TextIO, cols: Sequence[TextColumn], total: int,
                      names: Iterable[str] = ()) -> Callable[[list[str]], None]:
    """A writer of rows laid out for a `total`-character line: columns that do not fit are left
    out (fitted(); said on stderr), the others laid out by layout(); a longer value is cut with
    an ellipsis. Each row gives every column's value. `names`: the values of the first column,
    known before the first row, cut so that they stay distinct (distinct()). One pass."""
    kept = fitted(cols, total)
    left_out_note(cols, kept, total)
    shown = [cols[i] for i in kept]
    widths = layout([c.width for c in shown], [c.elastic for c in shown], total)
    middle = [c.middle for c in shown]
    last = len(widths) - 1
    mark = ellipsis_for(out)
    write = out.write
    first = distinct(map(flat, names), widths[0], mark, middle[0]) if kept[0] == 0 else {}
    every = len(kept) == len(cols)

    def row(values: list[str]) -> None:
        cells = []
        for i, v in enumerate(values if every else [values[k] for k in kept]):
            v = flat(v)
            v = first[v] if i == 0 and v in first else fit(v, widths[i], mark, middle[i])
            cells.append(v if i == last else v.ljust(widths[i]))
        write(" ".join(cells) + "\n")
    row([c.header for c in cols])
    return row
