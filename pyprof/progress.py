"""A progress line on stderr for long runs, shared by parse and prof.

It overwrites itself at most once a second and is only ever enabled where a person watches a
terminal: results go to stdout, which pipes must receive clean.
"""
from __future__ import annotations

import sys
import time


class Progress:
    """`prog: N records (P%)` on stderr, at most once a second; silent when disabled. `unit`
    names what is counted."""

    def __init__(self, prog: str, total: int | None, enabled: bool, unit: str = "records") -> None:
        self.prog = prog
        self.total = total
        self.enabled = enabled
        self.unit = unit
        self._next = time.monotonic() + 1.0

    def update(self, done: int) -> None:
        """Show `done` units, when enabled and a second has passed since the last line."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 1.0
        share = f" ({100 * done / self.total:.0f}%)" if self.total else ""
        sys.stderr.write(f"\r{self.prog}: {done} {self.unit}{share}")
        sys.stderr.flush()

    def finish(self) -> None:
        """Clear the progress line."""
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def on_terminal(prog: str, results_at_end: bool) -> Progress:
    """A Progress that is on when stderr is a terminal and the line cannot break into result
    rows: stdout is redirected, or the results are printed only at the end."""
    return Progress(prog, None, sys.stderr.isatty() and (results_at_end or not sys.stdout.isatty()))
