"""Records in, one at a time: JSON Lines from pyprof.parse (docs/records.md), or the original
PyProf's Python-dict lines, read with ast.literal_eval (never eval: nothing read is executed);
an nsys export given instead is parsed on the fly with pyprof.parse."""
from __future__ import annotations

import ast
import contextlib
import json
import os
import sys
from typing import BinaryIO, Iterator

from ..errors import EXIT_BAD_FORMAT, EXIT_BAD_LINE, EXIT_INCOMPLETE, EXIT_NO_INPUT, PyprofError
from .legacy import from_legacy
from .warnings_tally import Tally

# Optional (pip install 'pyprof[fast]'): prof takes 0.72x the CPU time with it
# (benchmarks/results/prof_orjson_100k_cpu.txt). Records are the same but for integers beyond
# 64 bits, which orjson reads as floats (parse never writes one).
try:
    from orjson import loads as _fast_loads
except ImportError:
    _fast_loads = None

_SQLITE = b"SQLite format 3\x00"
_UNDECODED = object()
_PARSE_FAILED = b"pyprof.parse: "  # the line parse writes after its records when it fails midway


def is_export(path: str) -> bool:
    """True for an nsys export: a `.sqlite` or `.nsys-rep` name, or a file that is SQLite."""
    if path.endswith((".sqlite", ".nsys-rep")):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE
    except OSError:
        return False


def numbered(path: str | os.PathLike, tally: Tally, strict: bool = False,
             memcpy: bool = False) -> Iterator[tuple[int, dict]]:
    """(number, record) pairs of `path` (`-`: stdin), counted in `tally`: line numbers of a
    record file, record numbers of an nsys export (parsed now, as `pyprof.parse [--memcpy]`
    would; `strict` is for record lines)."""
    path = os.fspath(path)
    if path != "-" and is_export(path):
        from ..parse import Export, Stats
        from ..parse import records as parse_records
        from ..parse.export import check_export
        from ..parse.nsysrep import sqlite_path

        with sqlite_path(path, True) as db, Export(db) as exp:
            check_export(exp, memcpy)
            with contextlib.closing(parse_records(exp, Stats(), memcpy)) as recs:
                for n, rec in enumerate(recs, 1):
                    tally.records += 1
                    yield n, rec
        return
    with open_input(path) as stream:
        yield from records(stream, tally, strict)


def open_input(path: str) -> BinaryIO:
    """The record file at `path` (stdin for `-`), binary; PyprofError when it cannot be read."""
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as err:
        raise PyprofError(f"cannot read {path}: {err.strerror}", EXIT_NO_INPUT) from None


def records(stream: BinaryIO, tally: Tally, strict: bool = False) -> Iterator[tuple[int, dict]]:
    """Yield (line number, record) for each record of `stream`. A malformed line is reported with
    its number and skipped, or, with `strict`, raises PyprofError (EXIT_BAD_LINE)."""
    decode = json.JSONDecoder().decode  # on str: skips json.loads' per-call encoding detection
    for lineno, line in enumerate(stream, 1):
        if lineno == 1 and line.startswith(_SQLITE):
            raise PyprofError("the input is an nsys SQLite export: give its path (prof parses it) or run "
                              "`python -m pyprof.parse` on it and give prof its output", EXIT_BAD_FORMAT)
        rec = _UNDECODED
        if _fast_loads is not None:
            try:
                rec = _fast_loads(line)
            except ValueError:
                pass  # json decides below, with its message (and reads NaN, lone surrogates, blank lines)
        if rec is _UNDECODED:
            try:
                rec = decode(line.decode())
            except (ValueError, RecursionError) as err:  # RecursionError: absurdly deep nesting
                if not line.strip():
                    continue
                if line.startswith(_PARSE_FAILED):
                    said = line.decode("utf-8", "replace").strip()
                    raise PyprofError(f"line {lineno}: the input is incomplete, parse failed while writing it "
                                      f"({said})", EXIT_INCOMPLETE) from None
                rec = _legacy(line)
                if rec is None:
                    reason = "not UTF-8 text" if isinstance(err, UnicodeDecodeError) else \
                        f"not a JSON record ({getattr(err, 'msg', err)})"
                    bad_record(tally, strict, lineno, reason)
                    continue
        if not isinstance(rec, dict):
            bad_record(tally, strict, lineno, "not a JSON object")
            continue
        tally.records += 1
        yield lineno, rec


def _legacy(line: bytes):
    """An original-PyProf line (a Python dict literal), converted to a record; None otherwise."""
    text = line.decode("utf-8", "replace").strip()
    if not text.startswith("{"):
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return from_legacy(value) if isinstance(value, dict) else None


def bad_record(tally: Tally, strict: bool, lineno: int, reason: str) -> None:
    """Report a line that is not a usable record: skipped, or fatal under `strict`."""
    if strict:
        raise PyprofError(f"line {lineno}: {reason}", EXIT_BAD_LINE)
    tally.bad_line(lineno, reason)
