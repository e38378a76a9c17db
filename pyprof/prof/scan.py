"""Records with their derived facts, one at a time: the loop every view of prof shares."""
from __future__ import annotations

from typing import Any, BinaryIO, Callable, Iterator, Optional, Tuple

from ..progress import Progress
from .analysis import Analyzer, Facts
from .reader import bad_record, records
from .summary import Summary

# Valid JSON whose fields have the wrong types (or nest absurdly deep) surfaces as one of these
# from a value function.
FIELD_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, RecursionError)


def analysed(stream: BinaryIO, summary: Summary, strict: bool = False, analyse: bool = True,
             fn: Optional[Callable[[dict, Facts], Any]] = None,
             progress: Optional[Progress] = None) -> Iterator[Tuple[dict, Facts, Any]]:
    """Yield (record, Facts, fn(record, Facts)) per usable record of `stream`, in input order.

    `analyse=False` gives every record one blank Facts (for columns that need no analysis).
    A record whose fields have the wrong types (an error from the analysis or from `fn`) is
    reported like a malformed line and skipped, or is fatal under `strict`. `progress`, when on,
    shows the records read.
    """
    analyzer = Analyzer(summary) if analyse else None
    blank = Facts()
    shown = progress is not None and progress.enabled
    for lineno, rec in records(stream, summary, strict):
        if shown and not lineno & 0x3FFF:
            progress.update(lineno)
        try:
            facts = analyzer.facts(rec) if analyzer else blank
            value = fn(rec, facts) if fn is not None else None
        except FIELD_ERRORS as err:
            bad_record(summary, strict, lineno, f"record fields not understood ({type(err).__name__}: {err})")
            continue
        yield rec, facts, value
    if shown:
        progress.finish()
