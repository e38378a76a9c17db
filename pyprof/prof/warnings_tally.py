"""Warnings that do not stop the run, counted and reported once at the end on stderr."""
from __future__ import annotations

import sys
from collections import Counter
from typing import TextIO

from ..text import count

# Per-line messages for malformed lines stop after this many; the rest are only counted.
MAX_LINE_MESSAGES = 20


class Tally:
    """Counts of what prof could not work out, by kind and by name."""

    def __init__(self) -> None:
        self.records = 0
        self.bad_lines = 0
        self.warnings: dict = {}

    def warn(self, kind: str, name: str) -> None:
        """Count one kernel whose value is na for reason `kind` (e.g. "unknown op") about `name`."""
        bucket = self.warnings.get(kind)
        if bucket is None:
            bucket = self.warnings[kind] = Counter()
        bucket[name] += 1

    def bad_line(self, lineno: int, reason: str, err: TextIO | None = None) -> None:
        """Report a malformed input line (the first MAX_LINE_MESSAGES of them) on `err` (default
        stderr) and count it."""
        err = err or sys.stderr
        self.bad_lines += 1
        if self.bad_lines <= MAX_LINE_MESSAGES:
            print(f"pyprof.prof: line {lineno}: {reason}; line skipped", file=err)
        elif self.bad_lines == MAX_LINE_MESSAGES + 1:
            print("pyprof.prof: more malformed lines; counting them in the summary only", file=err)

    def report(self, err: TextIO | None = None) -> None:
        """One closing block on `err` (default stderr), only when something was not understood."""
        err = err or sys.stderr
        if not self.bad_lines and not self.warnings:
            return
        print(f"pyprof.prof: {count(self.records, 'record')}; warnings:", file=err)
        if self.bad_lines:
            print(f"  {count(self.bad_lines, 'malformed line')} skipped", file=err)
        for kind, names in sorted(self.warnings.items()):
            top = ", ".join(f"{n} ({c})" for n, c in names.most_common(5))
            more = f", ... {len(names) - 5} more" if len(names) > 5 else ""
            print(f"  {kind}: {count(sum(names.values()), 'kernel')}: {top}{more}", file=err)
