"""`python -m pyprof.parse --merge A.dict B.dict ...`: record files whose records carry `rank`
(each parsed where its traces are, one parse per node) combined into one, in rank order.

A job too big for one machine is parsed by its own launcher, one parse per node (docs/parse.md,
"Past one machine"); this is the step after. Records are copied as bytes, never re-encoded:
a file is read once to find where each rank's records lie, then those spans are copied in rank
order.
"""
from __future__ import annotations

import json
import re
from typing import NamedTuple

from pyprof.errors import EXIT_BAD_FORMAT, EXIT_INCOMPLETE, EXIT_NO_INPUT, EXIT_USAGE, PyprofError
from pyprof.formats import VERSION
from pyprof.parse.output import deferred_interrupt, mark_incomplete, open_output

_RANKED = re.compile(rb'\{"v":(\d+),"rank":(\d+),')
_RECORD = re.compile(rb'\{"v":\d+,')
_FAILED = b"pyprof.parse: "
_CHUNK = 1 << 20


class Span(NamedTuple):
    """Consecutive records of one rank in one file: bytes [start, end)."""

    rank: int
    path: str
    start: int
    end: int
    records: int


def spans(path: str) -> list[Span]:
    """Where each rank's records lie in record file `path` (one pass over its lines)."""
    out: list[Span] = []
    try:
        f = open(path, "rb")
    except OSError as err:
        raise PyprofError(f"{path}: {err.strerror.lower() if err.strerror else err}", EXIT_NO_INPUT) from None
    with f:
        offset = 0
        rank = start = None
        count = 0
        for lineno, line in enumerate(f, 1):
            m = _RANKED.match(line)
            if m is None:
                if line.startswith(_FAILED):
                    raise PyprofError(f"{path}: line {lineno}: the file is incomplete, parse failed while writing it",
                                      EXIT_INCOMPLETE)
                if _RECORD.match(line):
                    raise PyprofError(f"{path}: line {lineno}: records without `rank`: parse several exports (or "
                                      "one with --rank) to get records that can be merged", EXIT_BAD_FORMAT)
                if not line.strip():
                    offset += len(line)
                    continue
                raise PyprofError(f"{path}: line {lineno}: not a pyprof.parse record", EXIT_BAD_FORMAT)
            if not line.endswith(b"\n"):
                raise PyprofError(f"{path}: line {lineno}: the file ends inside a record", EXIT_INCOMPLETE)
            version, r = _checked(line, path, lineno)
            if version > VERSION:
                raise PyprofError(f"{path}: line {lineno}: record schema version {version} is newer than this "
                                  f"pyprof ({VERSION})", EXIT_BAD_FORMAT)
            if r != rank:
                if rank is not None:
                    out.append(Span(rank, path, start, offset, count))
                rank, start, count = r, offset, 0
            count += 1
            offset += len(line)
        if rank is not None:
            out.append(Span(rank, path, start, offset, count))
    return out


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _checked(line: bytes, path: str, lineno: int) -> tuple[int, int]:
    """The version and rank of a line that starts like a ranked record, once the whole line is
    one JSON object with those values: records are copied as bytes, and a line that only starts
    like one (garbage after it, a number of thousands of digits) must not pass as a record."""
    try:
        rec = json.loads(line, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        why = getattr(err, "msg", None) or str(err).split(":")[0]
        raise PyprofError(f"{path}: line {lineno}: not a pyprof.parse record ({why})", EXIT_BAD_FORMAT) from None
    version, rank = (rec.get("v"), rec.get("rank")) if isinstance(rec, dict) else (None, None)
    if type(version) is not int or type(rank) is not int or rank < 0:  # a key given twice, the last one odd
        raise PyprofError(f"{path}: line {lineno}: not a pyprof.parse record (its v and rank are no counts)",
                          EXIT_BAD_FORMAT)
    return version, rank


def order(all_spans: list[Span]) -> list[Span]:
    """Spans in output order (rank, then file and position); a rank found in two files is an error."""
    home: dict[int, str] = {}
    for s in all_spans:
        if home.setdefault(s.rank, s.path) != s.path:
            raise PyprofError(f"rank {s.rank} is in both {home[s.rank]} and {s.path}", EXIT_USAGE)
    return sorted(all_spans, key=lambda s: (s.rank, s.start))


def merge(paths: list[str], output: str | None) -> tuple[int, list[int]]:
    """Write the records of `paths` to `output` (or stdout) in rank order; returns the number of
    records and the ranks."""
    for i, p in enumerate(paths):
        if p in paths[:i]:
            raise PyprofError(f"{p} is given twice", EXIT_USAGE)
    plan = order([s for p in paths for s in spans(p)])
    records = 0
    with open_output(output) as out, deferred_interrupt() as interrupted:
        out.flush()
        dst = out.buffer if hasattr(out, "buffer") else out
        for s in plan:
            with open(s.path, "rb") as f:
                f.seek(s.start)
                left = s.end - s.start
                while left:
                    chunk = f.read(min(_CHUNK, left))
                    if not chunk:
                        raise PyprofError(f"{s.path}: the file changed while being merged", EXIT_NO_INPUT)
                    dst.write(chunk)
                    left -= len(chunk)
            records += s.records
            if interrupted:
                dst.flush()
                if output is None:
                    mark_incomplete(out, interrupted[0], records)
                raise interrupted[0]
        dst.flush()
    return records, sorted({s.rank for s in plan})
