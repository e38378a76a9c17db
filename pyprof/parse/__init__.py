"""Stage 2 of pyprof: Nsight Systems SQLite export -> one JSON record per GPU kernel.

`python -m pyprof.parse` is the command line (`__main__`); `parse()` is the same from Python.
Modules: export (open and check the file), queries (the SQL), ranges (what a range's text means),
attribute (the merge sweep that builds records), gpu (TARGET_INFO_GPU), output (writing),
nsysrep (.nsys-rep input). Never imports torch.
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Iterator

from pyprof.errors import PyprofError
from pyprof.parse import attribute
from pyprof.parse.attribute import Stats
from pyprof.parse.compiled import joined_lines
from pyprof.parse.export import Export, check_export
from pyprof.parse.nsysrep import sqlite_path
from pyprof.parse.output import open_output, write_lines
from pyprof.parse.queries import sources
from pyprof.progress import Progress
from pyprof.text import count

__all__ = ["parse", "records", "lines", "Stats", "Export"]


def lines(exp: Export, stats: Stats, memcpy: bool = False) -> Iterator[str]:
    """Yield one record per kernel (and memcpy/memset with `memcpy`) as a line of compact JSON,
    in launch order, kernels of compiled graphs joined to the trace's compile-time table."""
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
    stats = Stats()
    with sqlite_path(path, quiet) as db, Export(db) as exp:
        check_export(exp, memcpy)
        total = None
        if progress:
            with exp.errors():
                # The same tables lines() reads; each name is one of parse's own constants.
                total = sum(exp.scalar(f"SELECT count(*) FROM {t}") or 0 for t, _ in sources(exp, memcpy))
        # closing(): the record generator's cursors must be closed before the connection is.
        with open_output(output) as out, contextlib.closing(lines(exp, stats, memcpy)) as recs:
            try:
                write_lines(recs, out, Progress("pyprof.parse", total, progress))
            except (PyprofError, KeyboardInterrupt) as err:
                recs.close()  # publishes the counts
                if output is None and stats.records:
                    why = f"error: {err}" if isinstance(err, PyprofError) else "interrupted"
                    verb = "is" if stats.records == 1 else "are"
                    out.write(f"pyprof.parse: {why} - the {count(stats.records, 'record')} above {verb} incomplete\n")
                raise
    return stats
