"""The output sizes of op calls whose size their input's values decide, from pyprof's `out` marks.

An op marker is pushed before its call, so it cannot say what a call of nonzero, where(condition)
or unique returns: the size depends on the data. pyprof marks those calls' outputs instead: an
instant `out` mark in the pyprof domain on the calling thread, inside the op's range, just before
it closes (docs/markers.md, pyprof/nvtx/wrappers.py `sized`). The marks come with the domain
names' one scan of the NVTX table (queries.domain_events, handed to parallel windows as it is) and
are kept here per thread in time order, before the sweep; a kernel's op marker then takes the mark
inside its range as its `out` member (the marker's JSON with `"out":...` added), so that prof
prices what the call wrote. Traces without marks (earlier pyprof, or no such op) change nothing.
"""
from __future__ import annotations

import bisect
import json

from pyprof.formats import DOMAIN
from pyprof.parse import queries
from pyprof.parse.export import Export
from pyprof.parse.ranges import encode

# The kind field as pyprof writes it (compact JSON): marks without it are left unread.
_KIND = '"kind":"out"'


class OutMarks:
    """pyprof's `out` marks of one export by thread, and the markers they complete."""

    __slots__ = ("threads",)

    def __init__(self, threads: dict[int, tuple[list[int], list[str]]]) -> None:
        self.threads = threads  # globalTid -> (mark times, their `out` values as JSON), by time

    def marker_js(self, js: str, tid: int | None, start: int, end: int) -> str:
        """The JSON of op marker `js` (a range on thread `tid` from `start` to `end`) with the `out`
        member of the first out mark inside the range added; `js` itself where there is none."""
        marks = self.threads.get(tid) if tid is not None else None
        if not marks or not js.endswith("}"):
            return js
        times, values = marks
        i = bisect.bisect_left(times, start)
        return js[:-1] + ',"out":' + values[i] + "}" if i < len(times) and times[i] <= end else js


def out_marks(exp: Export) -> OutMarks:
    """The export's `out` marks (OutMarks), gathered once. A mark that is not valid JSON, or
    whose `out` member is absent, is skipped."""
    return exp.once(_read)


def _read(exp: Export) -> OutMarks:
    domains, marks = queries.domain_events(exp)
    threads: dict[int, tuple[list[int], list[str]]] = {}
    for gtid, dom, text, start in marks:  # in time order
        if not isinstance(text, str) or _KIND not in text or start is None or gtid is None \
                or domains.get((gtid & queries.PID_MASK_SQL, dom)) != DOMAIN:
            continue
        try:
            mark = json.loads(text)
            value = encode(mark["out"]) if isinstance(mark, dict) and mark.get("kind") == "out" else None
        except (ValueError, KeyError):  # not JSON, NaN in it, or no `out` member
            continue
        if value is not None:
            times, values = threads.setdefault(gtid, ([], []))
            times.append(start)
            values.append(value)
    return OutMarks(threads)
