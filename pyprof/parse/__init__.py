"""Stage 2 of pyprof: Nsight Systems SQLite export -> one JSON record per GPU kernel.

`python -m pyprof.parse` is the command line (`__main__`); `parse()` is the same from Python.
Modules: export (open and check the file), queries (the SQL), ranges (what a range's text means),
attribute (the merge sweep that builds records), gpu (TARGET_INFO_GPU), output (writing),
nsysrep (.nsys-rep input). Never imports torch.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import sys
from typing import TYPE_CHECKING, Any, Iterator

from pyprof.errors import refuse_output_onto_input

if TYPE_CHECKING:
    from pyprof.parse.attribute import Stats
    from pyprof.parse.export import Export

__all__ = ["parse", "records", "lines", "Stats", "Export"]

# The modules below (SQLAlchemy with them: half a second) are imported on first use, not with the
# package: `python -m pyprof.parse` imports this package before its __main__, which imports them
# where Ctrl-C is one line, not a traceback.


def __getattr__(name: str) -> Any:
    if name == "Stats":
        from pyprof.parse.attribute import Stats
        return Stats
    if name == "Export":
        from pyprof.parse.export import Export
        return Export
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def lines(exp: Export, stats: Stats, memcpy: bool = False) -> Iterator[str]:
    """Yield one record per kernel (and memcpy/memset with `memcpy`) as a line of compact JSON,
    in launch order, kernels of compiled graphs joined to the trace's compile-time table."""
    from pyprof.parse import attribute
    from pyprof.parse.compiled_kernels import joined_lines

    return joined_lines(exp, stats, memcpy, attribute.lines)


def records(exp: Export, stats: Stats, memcpy: bool = False) -> Iterator[dict[str, Any]]:
    """lines(), decoded: one dict per record (for library use and tests)."""
    loads = json.loads
    with contextlib.closing(lines(exp, stats, memcpy)) as out:
        for line in out:
            yield loads(line)


def parse(path: str, output: str | None = None, *, memcpy: bool = False, quiet: bool = False,
          progress: bool = False) -> Stats:
    """Write the records of export `path` to `output` (a file, created only on success) or stdout.

    Raises PyprofError for every fatal problem. When one happens after records went to stdout, a
    last line that is not JSON is written there, so that the partial output cannot pass as complete.
    """
    from pyprof.parse.export import NotUtf8
    from pyprof.parse.nsysrep import sqlite_path

    refuse_output_onto_input(output, [path])
    with sqlite_path(path, quiet, progress) as db:
        try:
            return _parse(db, output, memcpy, progress, lenient=False, skip=0)
        except NotUtf8 as err:
            # Rare (a range pushed with bytes that are not UTF-8), and decoding leniently costs
            # every run 7%: read again, leniently. The records already on stdout are the same
            # first records of the second reading (same queries, same order): skipped.
            if not quiet:
                print(f"pyprof.parse: note: {err}; read with U+FFFD in its place", file=sys.stderr)
            return _parse(db, output, memcpy, progress, lenient=True, skip=err.written)


def _parse(db: str, output: str | None, memcpy: bool, progress: bool, lenient: bool, skip: int) -> Stats:
    from pyprof.parse.attribute import Stats
    from pyprof.parse.export import Export, NotUtf8, check_export
    from pyprof.parse.output import mark_incomplete, open_output, write_lines
    from pyprof.parse.queries import sources
    from pyprof.progress import Progress

    stats = Stats()
    with Export(db, lenient) as exp:
        check_export(exp, memcpy)
        total = None
        if progress:
            with exp.errors():
                # The same tables lines() reads; each name is one of parse's own constants.
                total = sum(exp.scalar(f"SELECT count(*) FROM {t}") or 0 for t, _ in sources(exp, memcpy))
        # closing(): the record generator's cursors must be closed before the connection is.
        written = [skip]
        with open_output(output) as out, contextlib.closing(lines(exp, stats, memcpy)) as recs:
            try:
                write_lines(_counted(itertools.islice(recs, skip, None), written), out,
                            Progress("pyprof.parse", total, progress))
            except NotUtf8 as err:
                recs.close()
                if lenient:
                    raise  # the lenient connection decodes everything: not reached
                # Counted where they are written: records made may still wait in the compiled-graph join.
                err.written = written[0] if output is None else 0
                raise
            except BaseException as err:
                recs.close()  # publishes the counts
                if output is None:
                    mark_incomplete(out, err, stats.records)
                raise
    return stats


def _counted(lines: Iterator[str], count: list[int]) -> Iterator[str]:
    # Before the yield: the writer may stop there, and the line it was given is written.
    for line in lines:
        count[0] += 1
        yield line
