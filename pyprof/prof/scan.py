"""Records with their derived facts, one at a time: the one loop over records. The per-kernel
table, every view and the Python API (pyprof.rows, pyprof.summary) go through it, so they skip,
warn and count alike."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol

from ..progress import Progress
from .pricing.analysis import Analyzer, Facts
from .io.reader import bad_record
from .warnings_tally import Tally

# Valid JSON whose fields have the wrong types (or nest absurdly deep) surfaces as one of these
# from a value function.
FIELD_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError)


def time_field(rec: dict, key: str) -> int:
    """The time field `key` (kStart, kEnd, kDuration) of a record, in ns: an integer of 64 bits,
    as nsys stores times (parse writes no other); TypeError or ValueError, one of FIELD_ERRORS,
    for anything else: a number past 64 bits would overflow the statistics and units later."""
    v = rec.get(key)
    if type(v) is not int:  # bool is not a time either
        raise TypeError(f"{key} is {type(v).__name__}, not an integer")
    if not -2**63 <= v < 2**63:
        raise ValueError(f"{key} is outside the signed 64-bit range")
    return v


TIME_FIELDS = ("kStart", "kEnd", "kDuration")


def check_times(rec: dict) -> None:
    """Raise time_field's error for a time field of `rec` that is there (not None) but no 64-bit
    integer: such a record is malformed for every view alike (the table would print 1e19 that
    --summary skips, Parquet could not hold it, a NaN would reach the plot's axes)."""
    for key in TIME_FIELDS:
        v = rec.get(key)
        if v is not None and (type(v) is not int or not -2**63 <= v < 2**63):
            time_field(rec, key)


class Sink(Protocol):
    """What a view feeds on: every usable record with its Facts, in input order."""

    needs_facts: bool  # False: the records are not analysed (every record gets one blank Facts)

    def add(self, rec: dict, facts: Facts) -> None:
        """Take one record; raise one of FIELD_ERRORS, before changing anything, for a record
        whose fields have the wrong types. A sink may also have `skip()`, called instead for a
        record a filter leaves out (filters.Filtered)."""


def analysed(numbered: Iterable[tuple[int, dict]], tally: Tally, strict: bool = False, analyse: bool = True,
             fn: Callable[[dict, Facts], Any] | None = None,
             progress: Progress | None = None) -> Iterator[tuple[dict, Facts, Any]]:
    """Yield (record, Facts, fn(record, Facts)) per usable record of `numbered` ((line number,
    record) pairs, e.g. reader.records), in input order.

    `analyse=False` gives every record one blank Facts (for columns that need no analysis).
    A record whose fields have the wrong types (a time field that is no 64-bit integer, an
    error from the analysis or from `fn`) is reported like a malformed line and skipped, or is
    fatal under `strict`. `progress`, when on,
    shows the records read.
    """
    analyzer = Analyzer(tally) if analyse else None
    if analyzer is not None:  # the aten level reads an output's shape from its consumers
        numbered = analyzer.flow.ahead(numbered)
    blank = Facts()
    shown = progress is not None and progress.enabled
    for lineno, rec in numbered:
        if shown and not lineno & 0x3FFF:
            progress.update(lineno)
        try:
            check_times(rec)
            facts = analyzer.facts(rec) if analyzer else blank
            value = fn(rec, facts) if fn is not None else None
        except FIELD_ERRORS as err:
            bad_record(tally, strict, lineno, f"record fields not understood ({type(err).__name__}: {err})")
            continue
        yield rec, facts, value
    if shown:
        progress.finish()


def feed(numbered: Iterable[tuple[int, dict]], tally: Tally, sinks: list[Sink], strict: bool = False,
         progress: Progress | None = None) -> None:
    """One pass over `numbered`: each usable record, analysed when any sink needs Facts, goes
    to every sink in turn."""
    adds = [s.add for s in sinks]
    fn = adds[0] if len(adds) == 1 else (lambda rec, f: [add(rec, f) for add in adds])
    for _ in analysed(numbered, tally, strict, any(s.needs_facts for s in sinks), fn, progress):
        pass
