"""What every window of one export would otherwise read from the whole export, found once, by
the workers in rowid slices, before the windows are parsed (parallel.py, window.py).

A window's queries test times and correlation ids that no index covers: each would scan whole
tables (the NVTX table for its ranges, the runtime table to join its launches), so a window's
cost grew with the export rather than with the window. Here each table's rows are taken in
blocks of BLOCK rowids, and per block the least and greatest start, correlation id and (NVTX)
end are kept: a zone map. A window then reads only the blocks whose ranges can hold one of its
rows (nsys writes rows about in time order, so those are few and together), by rowid, which
SQLite seeks. The tests on the blocks only narrow the window's own exact conditions: the rows
read are the same, whatever the order of the table.

The survey also reads the NVTX domain names and marks (queries.domain_events) and the threads
that made runtime calls (queries.nvtx_sql's filter), so that no window scans for them again.
"""
from __future__ import annotations

import math
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Callable, Sequence

from pyprof.errors import PyprofError
from pyprof.parse import ddp_buckets, queries
from pyprof.parse.export import KERNEL, MEMCPY, MEMSET, NVTX, RUNTIME, Export

BLOCK = 1 << 14
# A window's rowid spans are bound as parameters: past this many, the nearest are joined (more
# rows read, the same rows kept).
MAX_SPANS = 64
# Rowids spread over more blocks than this leave the table unmapped (read whole): nsys numbers
# rows 1, 2, 3, ..., and each block is one query of the survey.
MAX_BLOCKS = 1 << 20
# The runtime threads are bound as parameters of the NVTX query: past this many it reads them itself.
MAX_THREADS = 1000
_BY_ID = (KERNEL, MEMCPY, MEMSET, RUNTIME)  # mapped by start and correlation id
# The end given a range still open at capture stop (end NULL): the greatest int64, so that it
# encloses every time an export can hold.
OPEN_END = (1 << 63) - 1

# A block: (first rowid, last rowid, least start, greatest start, then least and greatest
# correlation id (activity tables) or the greatest end (NVTX)). A statistic is None when the
# block holds no value there (no row can pass a test on it); a block holding a value that is no
# integer is given -inf/+inf everywhere (always read: SQLite orders text above every number).
Block = tuple


@dataclass
class Zones:
    """The survey of one export: `blocks` per mapped table, in rowid order; `threads`: the
    globalTids of the runtime calls (None: not read); `domains`: queries.domain_events' result;
    `ddp`: ddp_buckets.ddp_calls' (a whole-export pass, read once here instead of by every window)."""

    blocks: dict[str, list[Block]] = field(default_factory=dict)
    threads: tuple[int, ...] | None = None
    domains: tuple[dict, list] | None = None
    ddp: dict | None = None

    def by_start(self, table: str, start: int | None, end: int | None) -> list[tuple[int, int]] | None:
        """Rowid spans of `table` that hold every row with start in [start, end); None: the whole table."""
        return self._spans(table, lambda b: _meets(b[2], b[3], start, end))

    def by_correlation(self, table: str, ranges: Sequence[tuple[int, int]], start: int | None = None,
                       end: int | None = None, started: bool = False) -> list[tuple[int, int]] | None:
        """Rowid spans of `table` that hold every row with a correlation id in one of `ranges`
        (inclusive), and with `started`, every row with start in [start, end) too."""
        return self._spans(table, lambda b: any(_meets(b[4], b[5], lo, hi + 1) for lo, hi in ranges)
                           or (started and _meets(b[2], b[3], start, end)))

    def nvtx(self, start: int | None, end: int | None) -> list[tuple[int, int]] | None:
        """Rowid spans of the NVTX table that hold every row window.nvtx_clause selects: started
        before `end`, and at or after `start` or ending at or after it (or open)."""
        def holds(b: Block) -> bool:
            if end is not None and (b[2] is None or not b[2] < end):
                return False
            return start is None or any(v is not None and v >= start for v in b[3:])
        return self._spans(NVTX, holds)

    def _spans(self, table: str, holds: Callable[[Block], bool]) -> list[tuple[int, int]] | None:
        blocks = self.blocks.get(table)
        if blocks is None:
            return None
        spans: list[list[int]] = []
        for b in blocks:
            if holds(b):
                if spans and spans[-1][1] == b[0] - 1:
                    spans[-1][1] = b[1]
                else:
                    spans.append([b[0], b[1]])
        while len(spans) > MAX_SPANS:  # join the two spans with the fewest rowids between them
            i = min(range(1, len(spans)), key=lambda k: spans[k][0] - spans[k - 1][1])
            spans[i - 1][1] = spans.pop(i)[1]
        return [(lo, hi) for lo, hi in spans]


def _meets(lo: float | None, hi: float | None, start: int | None, end: int | None) -> bool:
    """Whether values between `lo` and `hi` may lie in [start, end)."""
    if lo is None:
        return start is None and end is None
    return (start is None or hi >= start) and (end is None or lo < end)


def rowid_terms(alias: str, spans: list[tuple[int, int]] | None) -> tuple[str, tuple[int, ...]]:
    """(SQL, parameters) keeping the rows of `alias` within `spans` ("1": no bound)."""
    if spans is None:
        return "1", ()
    if not spans:
        return "0", ()
    return (f"({' OR '.join([f'{alias}.rowid BETWEEN ? AND ?'] * len(spans))})",
            tuple(b for span in spans for b in span))


def survey(ex: Executor, path: str, slices: int) -> Zones | None:
    """The Zones of export `path`, read by `slices` tasks of pool `ex` side by side; None when
    the export cannot be read (the windows then read it whole and meet the error themselves)."""
    parts = list(ex.map(_survey_slice, [path] * slices, range(slices), [slices] * slices))
    if any(p is None for p in parts):
        return None
    zones = Zones({table: [b for p in parts for b in p[0][table]] for table in parts[0][0]})
    if parts[0][1] is not None:
        threads = set().union(*(p[1] for p in parts))
        zones.threads = tuple(threads) if len(threads) <= MAX_THREADS else None
    zones.domains = queries.domain_events_of([row for p in parts for row in p[2]])
    zones.ddp = parts[-1][3]
    return zones


def _survey_slice(path: str, k: int, slices: int) -> tuple[dict[str, list[Block]], set | None, list, dict | None] | None:
    """Slice `k` of `slices` (by rowid) of the tables' blocks, the runtime calls' threads and
    the NVTX domain rows, and for the last slice the DDP calls (in a worker); None when the
    export cannot be read."""
    try:
        with Export(path) as exp, exp.errors():
            blocks: dict[str, list[Block]] = {}
            for table in _BY_ID + (NVTX,):
                mapped = _map(exp, table, k, slices)
                if mapped is not None:
                    blocks[table] = mapped
            threads = None
            if exp.has(NVTX, "globalTid") and exp.has(RUNTIME, "globalTid"):
                span = _rowids(exp, RUNTIME, k, slices)
                threads = set() if span is None else {t for (t,) in exp.rows(
                    f"SELECT DISTINCT globalTid FROM {RUNTIME} WHERE rowid BETWEEN ? AND ?", span)}
            span = _rowids(exp, NVTX, k, slices) if exp.has(NVTX) else None
            domains = [] if span is None else queries.domain_rows(exp, span)
            ddp = ddp_buckets.ddp_calls(exp) if k == slices - 1 else None
    except PyprofError:
        return None
    return blocks, threads, domains, ddp


def _map(exp: Export, table: str, k: int, slices: int) -> list[Block] | None:
    """The blocks of slice `k` of `table`; None when it cannot be mapped (it is read whole)."""
    nvtx = table == NVTX
    if not exp.has(table, *(("start", "end") if nvtx else ("start", "correlationId"))):
        return None
    first, last = _ends(exp, table)
    if first is None:
        return []
    b0, b1 = first // BLOCK, last // BLOCK + 1
    if b1 - b0 > MAX_BLOCKS:
        return None
    stats = (f'min(start), max(start), max(ifnull("end", {OPEN_END}))' if nvtx
             else "min(start), max(start), min(correlationId), max(correlationId)")
    sql = f"SELECT {stats} FROM {table} WHERE rowid BETWEEN ? AND ?"
    always = (-math.inf, math.inf, math.inf) if nvtx else (-math.inf, math.inf, -math.inf, math.inf)
    out = []
    n = b1 - b0
    for b in range(b0 + n * k // slices, b0 + n * (k + 1) // slices):
        row = exp.rows(sql, (b * BLOCK, b * BLOCK + BLOCK - 1)).fetchone()
        if any(v is not None for v in row):
            # A value that is no integer is ordered by SQLite's rules, not Python's: read its block.
            out.append((b * BLOCK, b * BLOCK + BLOCK - 1,
                        *(row if all(v is None or type(v) is int for v in row) else always)))
    return out


def _ends(exp: Export, table: str) -> tuple[int | None, int | None]:
    # Two subqueries: with min() and max() in one SELECT, SQLite scans the table for them.
    return exp.rows(f"SELECT (SELECT min(rowid) FROM {table}), (SELECT max(rowid) FROM {table})").fetchone()


def _rowids(exp: Export, table: str, k: int, slices: int) -> tuple[int, int] | None:
    """Rowid bounds (inclusive) of slice `k` of `table`'s rows, split by rowid value."""
    first, last = _ends(exp, table)
    if first is None:
        return None
    n = last - first + 1
    return first + n * k // slices, first + n * (k + 1) // slices - 1
