"""The three output forms: space separated (default, for awk and sort), --csv, and -w WIDTH
columnated. Each writes one row per record as it comes: nothing is held back."""
from __future__ import annotations

import csv
import re
from typing import Callable, TextIO

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


def csv_cell(v: object) -> object:
    """A --summary/--diff CSV cell: na for unknown, floats to 4 significant digits."""
    return "na" if v is None else (f"{v:.4g}" if isinstance(v, float) else v)


def columnated_writer(out: TextIO, headers: list[str], widths: list[int], total: int) -> Callable[[list[str]], None]:
    """Fixed-width columns: fixed-width columns keep their width, the others (width 0: kernel,
    params, trace, ...) share what is left of `total`; longer values are cut. One pass."""
    flexible = [i for i, w in enumerate(widths) if w == 0]
    fixed = sum(w for w in widths if w) + len(widths) - 1
    share = max(8, (total - fixed) // len(flexible)) if flexible else 0
    widths = [w or share for w in widths]
    last = len(widths) - 1
    write = out.write

    def row(values: list[str]) -> None:
        cells = []
        for i, (v, w) in enumerate(zip(values, widths)):
            v = v[:w]
            cells.append(v if i == last else v.ljust(w))
        write(" ".join(cells) + "\n")
    row(headers)
    return row
