"""Warnings that do not stop the run, counted and reported once at the end on stderr (the
command line), or handed over as text and counts (the Python API: pyprof.ProfWarning)."""
from __future__ import annotations

import sys
from collections import Counter
from typing import TextIO

from ..text import count

# Per-line messages for malformed lines stop after this many; the rest are only counted.
MAX_LINE_MESSAGES = 20


class Tally:
    """Counts of what prof could not work out, by kind and by name.

    echo: print each malformed line's message as it comes (the command line); False keeps the
    first MAX_LINE_MESSAGES of them for lines()."""

    def __init__(self, echo: bool = True) -> None:
        self.records = 0
        self.bad_lines = 0
        self.warnings: dict = {}
        self.echo = echo
        self.line_messages: list[str] = []

    def warn(self, kind: str, name: str) -> None:
        """Count one kernel whose value is na for reason `kind` (e.g. "unknown op") about `name`."""
        bucket = self.warnings.get(kind)
        if bucket is None:
            bucket = self.warnings[kind] = Counter()
        bucket[name] += 1

    def bad_line(self, lineno: int, reason: str, err: TextIO | None = None) -> None:
        """Report a malformed input line (the first MAX_LINE_MESSAGES of them) on `err` (default
        stderr), or keep its message when not echoing, and count it."""
        self.bad_lines += 1
        if self.bad_lines <= MAX_LINE_MESSAGES:
            message = f"line {lineno}: {reason}; line skipped"
            if not self.echo:
                self.line_messages.append(message)
                return
            print(f"pyprof.prof: {message}", file=err or sys.stderr)
        elif self.bad_lines == MAX_LINE_MESSAGES + 1 and self.echo:
            print("pyprof.prof: more malformed lines; counting them in the summary only", file=err or sys.stderr)

    def lines(self) -> list[str]:
        """The closing block as lines (none when everything was understood); when not echoing,
        the kept malformed-line messages come first."""
        if not self.bad_lines and not self.warnings:
            return []
        lines = [] if self.echo else list(self.line_messages)
        lines.append(f"{count(self.records, 'record')}; warnings:")
        if self.bad_lines:
            lines.append(f"  {count(self.bad_lines, 'malformed line')} skipped")
        for kind, names in sorted(self.warnings.items()):
            top = ", ".join(f"{n} ({c})" for n, c in names.most_common(5))
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
        """One closing block on `err` (default stderr), only when something was not understood."""
        lines = self.lines()
        if lines:
            err = err or sys.stderr
            print(f"pyprof.prof: {lines[0]}", file=err)
            for line in lines[1:]:
                print(line, file=err)
