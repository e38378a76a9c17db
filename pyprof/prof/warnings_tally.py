"""Warnings that do not stop the run, counted and reported once at the end on stderr (the
command line), or handed over as text and counts (the Python API: pyprof.ProfWarning)."""
from __future__ import annotations

import sys
from collections import Counter
from typing import TextIO

from ..errors import one_line
from ..text import count


class Tally:
    """Counts of what prof could not work out, by kind and by name, and of the input lines that
    were no usable record (the first of them kept with its reason: one line says it all, however
    many there are)."""

    def __init__(self) -> None:
        self.records = 0
        self.bad_lines = 0
        self.first_bad: str | None = None  # "line N: reason"
        self.warnings: dict = {}

    def warn(self, kind: str, name: str) -> None:
        """Count one kernel whose value is na for reason `kind` (e.g. "unknown op") about `name`."""
        bucket = self.warnings.get(kind)
        if bucket is None:
            bucket = self.warnings[kind] = Counter()
        bucket[name] += 1

    def bad_line(self, lineno: int, reason: str) -> None:
        """Count a malformed input line; the first one's number and reason are kept."""
        self.bad_lines += 1
        if self.first_bad is None:
            self.first_bad = f"line {lineno}: {one_line(reason)}"

    def lines(self) -> list[str]:
        """The closing block as lines (none when everything was understood)."""
        if not self.bad_lines and not self.warnings:
            return []
        lines = [f"{count(self.records, 'record')}; warnings:"]
        if self.bad_lines:
            lines.append(f"  {count(self.bad_lines, 'malformed line')} skipped (the first: {self.first_bad})")
        for kind, names in sorted(self.warnings.items()):
            # Names come from the trace: one holding a line break is shown escaped, on its line.
            top = ", ".join(f"{one_line(str(n))} ({c})" for n, c in names.most_common(5))
            more = f", ... {len(names) - 5} more" if len(names) > 5 else ""
            lines.append(f"  {kind}: {count(sum(names.values()), 'kernel')}: {top}{more}")
        return lines

    def as_dict(self) -> dict:
        """{kind: {name: kernels}}, plus "malformed lines": n when any were skipped."""
        out: dict = {kind: dict(names) for kind, names in sorted(self.warnings.items())}
        if self.bad_lines:
            out["malformed lines"] = self.bad_lines
        return out

    def report(self, err: TextIO | None = None) -> None:
        """One closing block on `err` (stderr as it is at the call, not at import: redirect_stderr
        and notebooks replace it), only when something was not understood."""
        lines = self.lines()
        if lines:
            err = err or sys.stderr
            print(f"pyprof.prof: {lines[0]}", file=err)
            for line in lines[1:]:
                print(line, file=err)
